"""The state files' encoding: canonical YAML that round-trips, is real YAML, and durations.

The canonical dumper/loader exist so the hot path never imports ruamel; the price is that they must
agree with each other *and* with an ordinary YAML reader (another tool reading the state ref), and
that anything a person edits by hand still loads through the fallback.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from conftest import examples
from gitwork import codec
from gitwork.errors import Corrupt, Invalid

KEY_RE = r"[A-Za-z_][A-Za-z0-9_-]*"
# YAML 1.2 core-schema words that a reader resolves to null/bool when they appear unquoted.
RESERVED_KEYS = ("null", "Null", "NULL", "true", "True", "TRUE", "false", "False", "FALSE")

# Printable text of any script, plus the whitespace and break characters YAML treats specially.
text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"))
    | st.sampled_from(["\n", "\t", "\r", "\x85", "\u2028", " ", "#", ":", "-", "|", '"', "'"]),
    max_size=40,
)
scalars = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | text


def keys(reserved_ok: bool) -> st.SearchStrategy[str]:
    base = st.from_regex(KEY_RE, fullmatch=True).filter(lambda k: len(k) <= 30)
    if reserved_ok:
        return base | st.sampled_from(RESERVED_KEYS)
    return base.filter(lambda k: k not in RESERVED_KEYS)


def documents(reserved_ok: bool) -> st.SearchStrategy[dict[str, Any]]:
    key = keys(reserved_ok)

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        mapping = st.dictionaries(key, inner, max_size=4)
        # The format has no nested lists: a list holds scalars and mappings (criteria, decisions).
        element = scalars | mapping | st.just([]) | st.just({})
        return mapping | st.lists(element, max_size=4)

    values = st.recursive(scalars, extend, max_leaves=12)
    return st.dictionaries(key, values, max_size=5)


def ruamel_load(data: bytes) -> Any:
    return YAML(typ="safe", pure=True).load(data.decode("utf-8"))


@pytest.mark.slow
@settings(max_examples=examples(quick=30, thorough=200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(reserved_ok=False))
@example({"a": ["x: y", {"b": "c\nd"}], "t": "line\n", "u": " lead\ntrail ", "e": "", "z": "\u2028\x85\r"})
@example({"n": "null", "b": "True", "i": "007", "f": "1.5", "d": "2024-01-01", "y": "y", "s": "~"})
def test_canonical_dump_round_trips_and_is_plain_yaml(doc: dict[str, Any]) -> None:
    dumped = codec.dump_yaml(doc)
    assert dumped.endswith(b"\n")
    assert codec.load_yaml(dumped) == doc
    assert ruamel_load(dumped) == doc


def test_empty_document_round_trips() -> None:
    dumped = codec.dump_yaml({})
    assert codec.load_yaml(dumped) == {}
    assert ruamel_load(dumped) == {}


@pytest.mark.parametrize("key", ["null", "true", "False"])
def test_reserved_word_keys_read_back_as_strings_by_other_yaml_readers(key: str) -> None:
    dumped = codec.dump_yaml({key: 1})
    assert codec.load_yaml(dumped) == {key: 1}
    assert ruamel_load(dumped) == {key: 1}


@settings(max_examples=examples(quick=25, thorough=100), deadline=None)
@given(documents(reserved_ok=False))
def test_fallback_reads_ruamel_block_output(doc: dict[str, Any]) -> None:
    # Another tool's rendering of the same data (ruamel's own style) must load to the same value.
    import io

    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    buffer = io.StringIO()
    # Unshare the objects hypothesis reuses: ruamel writes a shared object once, as an anchor and
    # aliases, which gitwork refuses in state files (no alias expansion; see test_trust_engine.py).
    yaml.dump(json.loads(json.dumps(doc)), buffer)
    rendered = buffer.getvalue().encode()
    # ruamel does not round-trip everything itself (it emits U+0085 raw, then reads it as a space).
    assume(ruamel_load(rendered) == doc)
    assert codec.load_yaml(rendered) == doc


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("# a comment first\ntitle: Fix it   # trailing comment\npriority: 1\n", {"title": "Fix it", "priority": 1}),
        ("{title: 'Fix it', labels: [a, b], owner: null}\n", {"title": "Fix it", "labels": ["a", "b"], "owner": None}),
        ("---\ntitle:    Fix it\nlabels:\n- a\n- b\n...\n", {"title": "Fix it", "labels": ["a", "b"]}),
        ("title: 'it''s'\ndescription: >\n  folded\n  text\n", {"title": "it's", "description": "folded text\n"}),
        ("criteria:\n    -   text: one\n        checked: yes\n", {"criteria": [{"text": "one", "checked": "yes"}]}),
        ("a: 1\r\nb: two\r\n", {"a": 1, "b": "two"}),
    ],
)
def test_non_canonical_yaml_loads_via_fallback(source: str, expected: dict[str, Any]) -> None:
    assert codec.load_yaml(source.encode()) == expected


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"title: [unclosed\n", "not valid YAML"),
        (b"- a\n- b\n", "not a YAML mapping"),
        (b"just a string\n", "not a YAML mapping"),
        (b"title: \xff\xfe\n", "not UTF-8"),
    ],
)
def test_load_yaml_refuses_garbage_as_corrupt(data: bytes, fragment: str) -> None:
    with pytest.raises(Corrupt) as caught:
        codec.load_yaml(data, what="item w-1")
    assert fragment in caught.value.message
    assert "item w-1" in caught.value.message


def test_dump_refuses_what_the_format_cannot_hold() -> None:
    for bad in ({"x": 1.5}, {"x": [[1]]}, {1: 1}, {"x": b"bytes"}):
        with pytest.raises(TypeError):
            codec.dump_yaml(bad)


@settings(max_examples=examples(quick=40, thorough=200), deadline=None)
@given(st.lists(st.dictionaries(keys(False), scalars, max_size=4), max_size=6))
def test_records_round_trip_one_line_each(records: list[dict[str, Any]]) -> None:
    data = b"".join(codec.encode_record({"seq": n, **r}) for n, r in enumerate(records, start=1))
    assert data.count(b"\n") == len(records)
    back = list(codec.iter_records(data))
    assert back == [{"seq": n, **r} for n, r in enumerate(records, start=1)]


def test_records_refuse_partial_or_unnumbered_lines() -> None:
    with pytest.raises(Corrupt, match="partial record"):
        list(codec.iter_records(b'{"seq":1}\n{"seq":2'))
    with pytest.raises(Corrupt, match="no sequence number"):
        list(codec.iter_records(b'{"seq":1}\n{"at":"x"}\n'))
    with pytest.raises(Corrupt, match="not a JSON record"):
        list(codec.iter_records(b"seq: 1\n"))


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900), ("1h30m", 5400), ("90s", 90), ("2d", 172800), ("1d2h3m4s", 93784), ("45", 45), (45, 45),
     (" 10M ", 600), ("366d", 366 * 86400)],
)
def test_parse_duration(text: str | int, seconds: int) -> None:
    assert codec.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5x", "", "m", "1.5h", "-5m", "0", "0s", "367d", "15 m", "h1", "1m1h", True, 0])
def test_parse_duration_refuses_malformed_or_out_of_range(text: Any) -> None:
    if text is True:
        # bool is an int to Python; the command layer refuses it before parse_duration is reached.
        from gitwork.commands import _duration

        with pytest.raises(Invalid):
            _duration(text, "ttl")
        return
    with pytest.raises(Invalid):
        codec.parse_duration(text)


@settings(deadline=None)  # CI machines are shared: no per-example deadline
@given(st.integers(min_value=1, max_value=366 * 86400))
def test_format_duration_round_trips(seconds: int) -> None:
    shown = codec.format_duration(seconds)
    assert codec.parse_duration(shown) == seconds


def test_format_duration_is_compact() -> None:
    assert [codec.format_duration(s) for s in (900, 5400, 90, 86400, 0)] == ["15m", "1h30m", "1m30s", "1d", "0s"]
