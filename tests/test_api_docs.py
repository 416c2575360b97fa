"""docs/api.md and docs/openapi.json are generated (``python -m gitwork.apidoc``) and stay in step with the code.

In-process and cheap: the OpenAPI document is built once per module; the worked example at the top
of docs/api.md runs against a real repository.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gitwork import apidoc, commands, engine
from gitwork.workplane import Workplane

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return apidoc.openapi()


@pytest.fixture(scope="module")
def text(spec: dict[str, Any]) -> str:
    return apidoc.render(spec)


def test_api_reference_is_current(text: str) -> None:
    current = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert current == text, "docs/api.md is stale: run python -m gitwork.apidoc"


def test_openapi_document_is_current_and_deterministic(spec: dict[str, Any]) -> None:
    current = (ROOT / "docs" / "openapi.json").read_text(encoding="utf-8")
    assert current == apidoc.openapi_text(spec), "docs/openapi.json is stale: run python -m gitwork.apidoc"
    assert apidoc.openapi_text() == current, "two builds of the OpenAPI document differ"
    assert json.loads(current)["components"]["schemas"]["Command_claim"]["description"] == engine.OPS["claim"].summary


def test_every_op_appears(text: str) -> None:
    public = engine.declared("internal") ^ set(engine.OPS)
    assert public and engine.declared("internal")
    for name in public:
        assert f'<a id="op-{name}"></a>\n#### `{name}`\n\n' in text, f"public op {name} missing from docs/api.md"
        for field in engine.OPS[name].fields:
            assert f"| `{field}` |" in text
    recorded = text.split("### Recorded only by gitwork", 1)[1].split("\n## ", 1)[0]
    for name in engine.declared("internal"):
        assert f"| `{name}` | {engine.OPS[name].summary} |" in recorded, f"record op {name} missing from docs/api.md"
        assert f"#### `{name}`" not in text, f"record op {name} is listed with the public ops"


def test_who_may_submit_is_declared_by_every_public_op_and_printed() -> None:
    internal = engine.declared("internal")  # first: it loads the op registry that engine.OPS is filled by
    text = apidoc.render()
    for name, spec in engine.OPS.items():
        assert bool(spec.who) != (name in internal), f"op {name}: who= is for public ops only"
        if name not in internal:
            assert f"Who may submit it: {spec.who}" in text


def test_a_public_op_without_who_is_refused_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match="who="):
        engine.op("test-nobody", "a public op that says nobody may submit it", item="item!")
    assert "test-nobody" not in engine.OPS


def test_every_field_kind_and_common_field_is_described(text: str) -> None:
    assert set(apidoc._kinds()) == set(commands.KINDS)
    for kind in commands.KINDS:
        assert f"\n| {kind} | " in text
    for field in commands.COMMON:
        assert f"\n| `{field}` | {commands.COMMON[field].kind} | " in text, f"common field {field} undocumented"


def _public_methods() -> list[str]:
    return sorted(name for name in dir(Workplane)
                  if not name.startswith("_") and inspect.isfunction(getattr(Workplane, name)))


def test_every_public_workplane_method_appears_with_its_docstring(text: str) -> None:
    names = _public_methods()
    assert {"submit", "do", "record", "ready", "post", "inbox"} <= set(names)
    for name in names:
        func = getattr(Workplane, name)
        assert (func.__doc__ or "").strip(), f"Workplane.{name} has no docstring"
        assert f"\n#### `{name}`\n\n```python\n{name}(" in text, f"Workplane.{name} missing from docs/api.md"
        assert apidoc._first_paragraph(func) in text
    assert "0x" not in text.split("## Command documents")[0], "a default rendered with its memory address"


def test_every_rest_path_and_mcp_tool_appears(spec: dict[str, Any], text: str) -> None:
    from gitwork.mcp.tools import TOOLS

    assert "/v1/commands" in spec["paths"]
    for path, methods in spec["paths"].items():
        for method in methods:
            assert f"| {method.upper()} | `{path}` |" in text
    for tool in TOOLS:
        assert f"\n| `{tool.name}` | " in text


def test_worked_example_runs(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    code = apidoc._EXAMPLE.replace('"path/to/repo"', repr(str(repo)))
    assert code != apidoc._EXAMPLE
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/api.md example", "exec"), {})
    printed = out.getvalue().splitlines()
    assert json.loads(printed[0].replace("'", '"').replace("True", "true").replace("None", "null"))["op"] == "new"
    assert printed[1].endswith(" Ship it")
    with Workplane(str(repo)) as wp:
        item = printed[1].split()[0]
        assert wp.item(item).status == "done"
        assert wp.ready() == []


def test_check_detects_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "api.md"
    assert apidoc.main(["--check", str(target)]) == 1  # missing
    assert apidoc.main([str(target)]) == 0
    assert (tmp_path / "openapi.json").is_file()
    assert apidoc.main(["--check", str(target)]) == 0
    (tmp_path / "openapi.json").write_text("{}\n", encoding="utf-8")
    assert apidoc.main(["--check", str(target)]) == 1
    assert "openapi.json" in capsys.readouterr().err
