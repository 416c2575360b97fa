"""Reads see a read-only View; an op's attempt number is in its Context (issue 26, point 3).

- ``Workplane.context()`` is an ``engine.View``: it reads, it has no command, no outcome and nothing to
  write with; no module of gitwork builds a fake ``{"op": "read"}`` command to read.
- ``engine.apply`` depends only on (snapshot, command, now, settings, attempt): the attempt number is
  ``engine.run``'s round, passed in the Context, never a count kept by an op module across calls.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import ROOT, Clock
from gitwork import engine
from gitwork.workplane import LocalRef, Workplane


def test_a_read_is_a_view_with_nothing_to_write_with(wp: Workplane) -> None:
    item = wp.do("new", title="one").result["item"]
    view = wp.context()
    assert type(view) is engine.View
    assert view.item(view.resolve(item[:6])).title == "one" and view.lease(item) is None
    assert view.actor == wp.settings.identity()
    for writer in ("cmd", "outcome", "target", "memo", "save_item", "event", "say", "require_holder"):
        assert not hasattr(view, writer), writer


def test_no_module_builds_a_fake_command_to_read() -> None:
    offences = []
    for path in sorted((ROOT / "gitwork").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "op" for k in node.keys):
                values = [v.value for k, v in zip(node.keys, node.values, strict=True)
                          if isinstance(k, ast.Constant) and k.value == "op" and isinstance(v, ast.Constant)]
                if "read" in values:
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offences == []


class LosingFirst(LocalRef):
    """The real local CAS, except that the first ``losses`` swaps lose; ``meanwhile`` runs after a loss
    (another command of the same process, interleaved with this one)."""

    limit = 5

    def __init__(self, wp: Workplane, losses: int, meanwhile: Callable[[], None] | None = None) -> None:
        super().__init__(wp.store)
        self.losses, self.meanwhile = losses, meanwhile

    def swap(self, old: str | None, new: str) -> bool:
        if self.losses:
            self.losses -= 1
            return False
        return super().swap(old, new)

    def lost(self, attempt: int) -> None:
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()


def test_two_interleaved_runs_of_one_command_do_not_share_an_attempt_count(tmp_path: Path) -> None:
    """The same command (one id: a retry, a replay on another clone) run twice in one process, the second
    inside the first's lost round: each sees its own rounds, 1, 2, ..., whatever the other did."""
    from conftest import make_repo

    seen: dict[str, list[int]] = {"first": [], "second": []}
    planes = {name: Workplane(str(make_repo(tmp_path / name))) for name in seen}
    for plane in planes.values():
        plane.do("init")
    ids = {name: plane.do("new", title="x").result["item"] for name, plane in planes.items()}
    engine.declared("arbiter")
    before = dict(engine.OPS)

    def note(ctx: engine.Context) -> None:
        seen[ctx.actor].append(ctx.attempt)
        item = ctx.target()
        ctx.event(item, "test-attempt", attempt=ctx.attempt)
        ctx.say(f"attempt {ctx.attempt}", item)

    engine.op("test-attempt", "a test op that records its attempt", who="anyone.", item="item!")(note)
    try:
        def command(name: str) -> dict[str, Any]:
            return engine.validate_command({"op": "test-attempt", "item": ids[name], "id": "c-shared", "as": name})

        def second() -> None:
            engine.run(LosingFirst(planes["second"], 1), command("second"), Clock(), planes["second"].settings)

        landed = engine.run(LosingFirst(planes["first"], 2, second), command("first"), Clock(),
                            planes["first"].settings)
    finally:
        engine.OPS.clear()
        engine.OPS.update(before)
    assert seen == {"first": [1, 2, 3], "second": [1, 2]}
    assert landed.attempts == 3


def test_claim_next_on_one_snapshot_is_a_pure_function_of_its_inputs(wp: Workplane) -> None:
    """Applied twice to the same snapshot, command, instant and attempt, ``claim --next`` picks the same
    item (the best one on a first attempt), and a later attempt spreads by its number alone."""
    for number in range(12):
        wp.do("new", title=f"item {number}", priority=2)
    snapshot, now = wp.store.snapshot(), wp.now()
    cmd = engine.validate_command({"op": "claim", "next": True, "id": "c-next-1", "as": "alice"})

    def picked(attempt: int) -> str:
        outcome = engine.apply(snapshot, dict(cmd), now, wp.settings, attempt=attempt)
        return str(outcome.result["item"])

    first = picked(1)
    assert [picked(1) for _ in range(3)] == [first] * 3
    assert [picked(4) for _ in range(3)] == [picked(4)] * 3


# --- record formats below ops/, and one wording of a lost CAS ------------------------------------------


def _imports(path: Path) -> set[str]:
    """The gitwork modules ``path`` imports (absolute names), lazy imports included."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = f"{base}.{node.module}" if node.level and node.module else (node.module or base)
            found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith("gitwork")}


def test_procedures_read_record_formats_below_ops_and_ops_import_no_procedure() -> None:
    upward = ("gitwork.delegation", "gitwork.launch", "gitwork.sessions", "gitwork.sync", "gitwork.publish",
              "gitwork.workplane", "gitwork.cli", "gitwork.serve", "gitwork.mcp")
    offences = []
    for path in sorted((ROOT / "gitwork").rglob("*.py")):
        inside = path.relative_to(ROOT / "gitwork").parts
        for name in _imports(path):
            if inside[0] == "ops" and name.startswith(upward):
                offences.append(f"{'/'.join(inside)} imports {name}")
            # Outside ops/: only the engine's loader and the generators read the op table; nothing imports an op module.
            if inside[0] not in ("ops",) and name.startswith("gitwork.ops.") and \
                    name not in ("gitwork.ops.__main__", "gitwork.ops.table"):
                offences.append(f"{'/'.join(inside)} imports {name}")
    assert offences == []


def test_gave_up_after_lost_races_is_written_once() -> None:
    copies = [path.name for path in (ROOT / "gitwork").rglob("*.py") if "lost races\"" in path.read_text("utf-8")
              or 'lost races on {' in path.read_text("utf-8")]
    assert copies == ["engine.py"]
    held = engine.gave_up(3, "origin")
    assert held.code == 75 and str(held) == "gave up after 3 lost races on origin" and held.details["remote"] == "origin"
