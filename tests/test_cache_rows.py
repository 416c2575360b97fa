"""The per-item shortcuts of a cache rebuild answer exactly as the general code they stand in for.

A rebuild checks and summarises 100,000 item files; its shortcuts (``model.item_problem``'s plain
pass over exact types, ``rows.item_summary`` reading the canonical shape directly) must never call a
file sound that the rules refuse, nor word a refusal differently.
"""

from __future__ import annotations

import itertools
from typing import Any

from gitwork import model
from gitwork.model import ITEM_SHAPE, Item, item_problem, problem


class _Text(str):
    """A str that is not exactly a str (no YAML reader makes one; the rules accept it)."""


_ID = "w-0123456789abcdef"
_BASE: dict[str, Any] = {
    "id": _ID, "title": "t", "status": "open", "priority": 2, "labels": ["a"], "depends_on": ["w-1"],
    "description": "", "provenance": {"by": "x"}, "criteria": [], "decisions": [], "created_at": "2026-01-01",
    "updated_at": "2026-01-01",
}
_VALUES: list[Any] = [None, True, False, 0, 1, 4, 5, -1, 1.5, "", "x", "open", "done", "bogus", _Text("done"),
                      [], ["a"], ["a", 1], [1], [{}], [{"a": 1}], ["a", None], [_Text("a")], {}, {"a": 1},
                      "2030-01-01T12:00:00Z", "task", "epic", ["src/*.py"], ["/abs"], "2.5", "0.10", [{"kind": "timer"}]]


def _rules(doc: dict[str, Any], item_id: str) -> str | None:
    found = problem(doc, ITEM_SHAPE, Item.REQUIRED)
    if found is None and doc["id"] != item_id:
        found = f"id {doc['id']!r} does not match its folder {item_id}"
    return found


def test_item_problem_answers_as_the_rules_for_every_field_and_value() -> None:
    fields = [*ITEM_SHAPE, "extra"]
    seen = 0
    for name, value in itertools.product(fields, _VALUES):
        for doc in ({**_BASE, name: value}, {name: value, **_BASE}, {k: v for k, v in _BASE.items() if k != name}):
            for item_id in (_ID, "w-other"):
                assert item_problem(doc, item_id) == _rules(doc, item_id), (doc, item_id)
                seen += 1
    # two faults: the first in the file's order is the one named, as the rules name it
    for (a, va), (b, vb) in itertools.combinations([(n, v) for n in ("status", "priority", "labels", "owner")
                                                     for v in (None, 5, "bogus", [1])], 2):
        doc = {**_BASE, a: va, b: vb}
        assert item_problem(doc, _ID) == _rules(doc, _ID), doc
    assert seen > 2000
    assert model._plainly_sound(_BASE)  # (the plain pass is taken for a plain item)


_TEXTS: list[bytes] = [
    b"id: w-1\ntitle: t\n",
    'id: w-1\ntitle: "caf\u00e9 \U0001f680"\nlabels:\n  - a\n'.encode(),
    b'id: w-1\ntitle: "\\u00e9"\n',  # an escape the fast reader reads: still load_yaml's (surrogate check)
    b'id: w-1\ntitle: "\\ud800"\n',  # a lone surrogate: load_yaml refuses it
    b'id: w-1\ntitle: "\\U0001F680"\n',
    b"id: w-1\ntitle: \xff\n",  # not UTF-8: load_yaml refuses it
    b"id: w-1\ntitle: t",  # no final newline: the general reader's
    b"# c\nid: w-1\ntitle: t\n",
    b"id: w-1\ntitle: |\n  two\n  lines\n",
    b"- a\n- b\n",
    b"",
]


def test_item_summary_reads_an_item_file_as_load_yaml_does() -> None:
    from gitwork import codec, rows
    from gitwork.errors import Corrupt

    for data in _TEXTS:
        try:
            want: Any = codec.load_yaml(data, what="x")
        except Corrupt as error:
            want = error
        got = rows._canonical(data)
        if isinstance(want, Corrupt):
            assert got is None, data  # refused: left to load_yaml, which names the file
        elif got is not None:
            assert got == want and type(got) is dict, data
    assert rows._canonical(_TEXTS[0]) == {"id": "w-1", "title": "t"}  # (the direct path is taken)
