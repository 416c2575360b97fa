"""The fast reader of gitwork's own YAML (``codec.load_canonical``; issue 27 point 3, the cold rebuild).

It recognises, line by line, the shape ``dump_yaml`` writes for item and lease files and declines
(``None``) anything else, which then goes through the general reader. The property: for every text,
the fast reader either declines or gives exactly what the general reader gives; it never accepts a
text the general reader refuses. Texts come from the dumper (documents of every shape the format
has), from those texts mutated line by line (indents, blank lines, duplicate keys, reserved words,
quotes, comments, trailing spaces, CRs), and from hand-written YAML.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import examples
from gitwork import codec
from gitwork.errors import Corrupt

text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",))
    | st.sampled_from(["\n", "\t", "\r", "\x85", "\u2028", " ", "#", ":", "-", "|", '"', "'", "\\"]),
    max_size=30,
)
scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | text | st.sampled_from(
    ["open", "done", "null", "~", "true", "007", "1.5", "[]", "{}", "w-0123456789abcdef", "a b", "x: y", "-", ""])
keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,12}", fullmatch=True) | st.sampled_from(
    ["id", "title", "null", "True", "alice@host/s1", "a b", "labels", "depends_on"])


def documents() -> st.SearchStrategy[dict[str, Any]]:
    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        mapping = st.dictionaries(keys, inner, max_size=4)
        return mapping | st.lists(scalars | mapping | st.just([]) | st.just({}), max_size=4)

    return st.dictionaries(keys, st.recursive(scalars, extend, max_leaves=10), max_size=6)


def general(data: bytes) -> Any:
    """What the general reader makes of ``data``: the document, or the refusal."""
    try:
        return codec.load_yaml(data, what="f", general=True)
    except Corrupt:
        return Corrupt


def agrees(data: bytes) -> None:
    try:
        text_ = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    fast = codec.load_canonical(text_)
    if fast is not None:
        assert fast == general(data), data
        assert type(fast) is dict
        # and the values' types too (True is not 1, 1 is not "1")
        assert repr(fast) == repr(general(data)), data
    assert (codec.load_yaml(data, what="f") if general(data) is not Corrupt else Corrupt) == general(data)


ITEM = codec.dump_yaml({
    "id": "w-000043d6c7a8dd62", "title": "構成 ошибка ünïcode #20971", "status": "done", "priority": 3,
    "labels": ["kind-2"], "depends_on": ["w-ceccfb542d72a5d2", "w-dc7a4beeca84ebca"], "description": "",
    "provenance": {"by": "bench", "at": "2026-12-02T06:33:18Z"}, "criteria": [], "decisions": [],
    "created_at": "2026-12-02T06:33:18Z", "updated_at": "2026-12-02T06:33:18Z"})


def test_the_fast_reader_takes_what_gitwork_writes() -> None:
    doc = codec.load_canonical(ITEM.decode())
    assert doc is not None and doc == codec.load_yaml(ITEM, general=True)
    assert doc["labels"] == ["kind-2"] and doc["priority"] == 3 and doc["provenance"]["by"] == "bench"
    lease = codec.dump_yaml({"item": "w-1", "holder": "alice@host/s1", "state": "active", "epoch": 3, "fence": 12,
                             "expires_at": "2030-01-01T00:00:00Z", "paths": []})
    assert codec.load_canonical(lease.decode()) == codec.load_yaml(lease, general=True)


@pytest.mark.parametrize("text_", [
    "id: a\nid: b\n",  # a key twice: the general reader refuses it
    "id: a\n\nx: b\n", "id: a\n  x: b\n", "id: a \n", "id:  a\n", "id:a\n", "- a\n", "{}\n", "id: a", "id: a\r\n",
    "# c\nid: a\n", "id: null_\n", "id: yes\n", "Null: a\n", "l:\n- a\n", "l:\n  - \"a: b\"\n", "l:\n  - a: b\n",
    "m:\n  k:\n    z: 1\n", "t: |\n  a\n  b\n", "t: \"a\\u0000\"\n", "t: \"a\tb\"\n", "t: 'a'\n", "l:\n", "t: 1.5\n",
    "t: \"a\" # c\n", "t: \"a\x00b\"\n", "t: \"a\x85b\"\n", "t: \"a\x1bb\"\n", "l:\n  - a\n  b\n", "\ufeffid: a\n", "l:\n  - a\n   - b\n", "l:\n  - a\nm:\n  k: v\n  k: w\n",
])
def test_the_fast_reader_declines_or_agrees_on_odd_texts(text_: str) -> None:
    agrees(text_.encode())


@settings(max_examples=examples(quick=75, thorough=1500), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(documents(), st.data())
@example({"a": ["x: y", {"b": "c\nd"}], "t": "line\n", "u": " lead\ntrail ", "e": "", "z": "\u2028\x85\r"}, None)
def test_fast_reader_declines_or_agrees_with_the_general_reader(doc: dict[str, Any], data: Any) -> None:
    dumped = codec.dump_yaml(doc)
    agrees(dumped)
    if data is None:
        return
    lines = dumped.decode().split("\n")
    # Mutate the writer's text the ways a hand or another tool would.
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, max(0, len(lines) - 1)))
        how = data.draw(st.sampled_from(["indent", "dedent", "blank", "dup", "space", "cr", "comment", "tab",
                                         "drop", "quote", "colon", "dash"]))
        line = lines[at] if lines else ""
        lines[at:at + 1] = {
            "indent": [" " + line], "dedent": [line[1:]], "blank": [line, ""], "dup": [line, line],
            "space": [line + " "], "cr": [line + "\r"], "comment": [line + " # x"], "tab": ["\t" + line],
            "drop": [], "quote": [line.replace('"', "'", 1)], "colon": [line.replace(": ", ":", 1)],
            "dash": [line.replace("- ", "-", 1)],
        }[how]
    agrees("\n".join(lines).encode())
