"""An attacker's pass (session 5) over the new everyday inputs: date filters, ``gw config set``, and the
canonical YAML reader under a forged state file.

Each case is hostile input on the real CLI in a real repository: it must end with one line on stderr,
the documented exit code (docs/exit-codes.md), never a traceback, and change no ref or file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import git, gw_here, run_gw
from gitwork import codec
from gitwork.errors import Corrupt
from test_corrupt_state import commit_file

ENV = {"GW_AGENT": "alice", "GW_NO_AUTO_GC": "1"}
INVALID, CORRUPT = 5, 8


def ok(repo: Path, *args: str) -> str:
    done = gw_here(repo, *args, env=ENV)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def one_line_refusal(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr, (word, done.stderr)


@pytest.mark.parametrize("value", ["999999w", "999999d", "2000000d"])
@pytest.mark.parametrize("flag", ["--created-after", "--updated-before"])
def test_a_time_back_beyond_the_calendar_is_exit_5(repo: Path, flag: str, value: str) -> None:
    """``999999w`` is 19,000 years back: before year 1, which Python's dates cannot hold (was exit 1,
    OverflowError). It is a bad value of the flag, as ``99999999d`` (seven digits) already was."""
    ok(repo, "init")
    for verb in ("list", "ready", "search"):
        args = [verb, *(["parsing"] if verb == "search" else []), flag, value]
        one_line_refusal(gw_here(repo, *args, env=ENV), INVALID, flag)


def test_a_time_back_just_inside_the_calendar_still_works(repo: Path) -> None:
    ok(repo, "init")
    item = ok(repo, "new", "an item").strip()
    listed = ok(repo, "list", "--created-after", "99999d", "--json")
    assert item in listed


def test_config_set_shared_of_text_that_is_not_unicode_writes_nothing(repo: Path) -> None:
    """A value with a byte that is no UTF-8 (argv reaches Python as a lone surrogate) was a raw
    traceback from ``gw config set --shared`` (UnicodeEncodeError while writing .workplane)."""
    ok(repo, "init")
    before = refs(repo)
    for key in ("remote", "paths", "gates"):
        done = run_gw(repo, "config", "set", "--shared", key, "x\udc85y", env=ENV)
        one_line_refusal(done, INVALID, key)
        assert not (repo / ".workplane").exists()
    assert refs(repo) == before


@pytest.mark.parametrize("ref", ["refs/gitwork/../x", "refs/", "refs/gitwork/state.lock", "refs/a b",
                                 "refs/gitwork//state", "refs/x~1", "refs/x^", "refs/x:y", "refs/x@{1}",
                                 "refs/.hidden", "refs/x.", "refs/x/", "refs/x*", "refs/x\\y"])
def test_config_set_ref_refuses_a_name_git_would_refuse(repo: Path, ref: str) -> None:
    """``gw config set ref`` took any text under refs/, then every writing verb failed with exit 1
    (git-failed: git refuses the name). The setting is checked as git checks a ref name."""
    ok(repo, "init")
    before = refs(repo)
    for shared in ([], ["--shared"]):
        done = gw_here(repo, "config", "set", *shared, "ref", ref, env=ENV)
        one_line_refusal(done, INVALID, "ref")
    assert git(repo, "config", "--get-regexp", "^gitwork\\.", check=False) == ""
    assert not (repo / ".workplane").exists()
    assert refs(repo) == before
    # The same value from the environment: every verb refuses it up front, writing nothing.
    done = gw_here(repo, "new", "x", env={**ENV, "GW_REF": ref})
    one_line_refusal(done, INVALID)
    assert refs(repo) == before


def test_config_set_ref_still_takes_a_good_name(repo: Path) -> None:
    ok(repo, "init")
    ok(repo, "config", "set", "ref", "refs/gitwork/other-state_1.x")
    assert ok(repo, "new", "on the other ref").strip().startswith("w-")
    assert git(repo, "rev-parse", "--verify", "refs/gitwork/other-state_1.x")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1", "1e12"])
def test_config_set_lock_timeout_refuses_a_value_no_lock_wait_can_use(repo: Path, value: str) -> None:
    """``lock_timeout nan`` was accepted, then ``gw new`` died with exit 1 (ValueError: cannot convert
    float NaN to integer). A number of seconds from 0 to a day, like every other duration."""
    ok(repo, "init")
    before = refs(repo)
    for shared in ([], ["--shared"]):
        done = gw_here(repo, "config", "set", *shared, "lock-timeout", f"{value}", env=ENV)
        # (-1 reads as an option to the parser: exit 2 is its own refusal, also writing nothing)
        assert done.returncode in (INVALID, 2), (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
    assert git(repo, "config", "--get-regexp", "^gitwork\\.", check=False) == ""
    assert not (repo / ".workplane").exists()
    done = gw_here(repo, "new", "x", env={**ENV, "GW_LOCK_TIMEOUT": value})
    one_line_refusal(done, INVALID, "lock_timeout")
    assert refs(repo) == before


def test_config_set_lock_timeout_takes_a_sensible_value(repo: Path) -> None:
    ok(repo, "init")
    ok(repo, "config", "set", "lock-timeout", "2.5")
    assert "2.5" in ok(repo, "config", "get", "lock-timeout")
    ok(repo, "new", "still writes")


# --- a forged state file with a number Python will not read (more than 4300 digits) ----------------

HUGE = "1" * 5000


@pytest.mark.parametrize("text", [f"a: {HUGE}\n", f"a:\n  - {HUGE}\n", f"a:\n  b: -{HUGE}\n", f"a: [{HUGE}]\n"])
def test_the_yaml_readers_refuse_a_huge_integer_as_corrupt(text: str) -> None:
    """Both readers raised a bare ValueError (int's 4300-digit limit): the canonical one must decline,
    the general one refuse it as corrupt, as any file it cannot use."""
    assert codec.load_canonical(text) is None
    with pytest.raises(Corrupt):
        codec.load_yaml(text.encode(), what="f")
    with pytest.raises(Corrupt):
        codec.load_yaml(text.encode(), what="f", general=True)


def test_a_forged_item_with_a_huge_number_is_left_out_not_a_crash(repo: Path) -> None:
    """One item file pushed with a 5000-digit priority took ``gw list`` (and show) down with exit 1; it
    is a corrupt file like any other: ``show`` exits 8 naming it, ``list`` leaves it out."""
    ok(repo, "init")
    victim = ok(repo, "new", "victim").strip()
    other = ok(repo, "new", "bystander").strip()
    path = next(p for p in git(repo, "ls-tree", "-r", "--name-only", "refs/gitwork/state").split()
                if p.endswith(f"{victim}/item.yaml"))
    text = git(repo, "show", f"refs/gitwork/state:{path}")
    forged = "\n".join(f"priority: {HUGE}" if line.startswith("priority:") else line for line in text.splitlines())
    commit_file(repo, path, (forged + "\n").encode())
    done = gw_here(repo, "show", victim, env=ENV)
    one_line_refusal(done, CORRUPT, "item.yaml")
    done = gw_here(repo, "list", env=ENV)
    assert done.returncode == 0 and other[:8] in done.stdout and victim[:8] not in done.stdout, (done.stdout, done.stderr)
    assert "internal error" not in done.stderr and "item.yaml" in done.stderr
    assert "set_int_max_str_digits" not in done.stderr, "the reason, not Python's advice"


# --- gw new --template: a template's one-value list ------------------------------------------------


def test_a_template_with_a_bare_text_for_a_list_is_one_entry_not_its_letters(repo: Path) -> None:
    """``labels: bug`` passes the new op's rules as the list ``[bug]`` (as a document's would), but the
    expansion spread the text: the item got the labels b, g, u and the criteria o, n, e."""
    ok(repo, "init")
    (repo / ".workplane").write_text("templates:\n  t:\n    labels: bug\n    criteria: one\n    priority: '0'\n")
    item = ok(repo, "new", "--template", "t", "hello", "-l", "x").strip()
    import json

    shown = json.loads(ok(repo, "show", item, "--json"))
    assert shown["labels"] == ["bug", "x"], shown["labels"]
    assert [c["text"] for c in shown["criteria"]] == ["one"], shown["criteria"]
    assert shown["priority"] == 0


@pytest.mark.parametrize("odd", ["\u2028", "\u2029", "\x85"])
def test_config_set_shared_of_a_line_separator_can_be_set_again(repo: Path, odd: str) -> None:
    """A value holding U+2028 was written raw into .workplane; the next ``gw config set --shared`` of the
    same key split the file's lines there (str.splitlines) and refused its own edit with exit 8."""
    ok(repo, "init")
    ok(repo, "config", "set", "--shared", "remote", f"a{odd}b")
    assert odd not in (repo / ".workplane").read_text(encoding="utf-8"), "written escaped, as JSON does"
    assert f"a{odd}b" in ok(repo, "config", "get", "remote", "--json")
    ok(repo, "config", "set", "--shared", "remote", "c")
    assert (repo / ".workplane").read_text(encoding="utf-8") == 'remote: "c"\n'
    # A .workplane written by hand with the raw character is edited line by line all the same.
    (repo / ".workplane").write_text(f'gates: ["x{odd}y"]\nremote: "d"\n', encoding="utf-8")
    ok(repo, "config", "set", "--shared", "remote", "e")
    assert (repo / ".workplane").read_text(encoding="utf-8") == f'gates: ["x{odd}y"]\nremote: "e"\n'


def test_a_10kb_item_word_is_refused_in_a_short_line(repo: Path) -> None:
    """An item word that is no id nor an imported item's name was echoed whole: 10 kB on stderr."""
    ok(repo, "init")
    for verb in ("show", "claim"):
        done = gw_here(repo, verb, "--", "x" * 10000, env=ENV)
        one_line_refusal(done, INVALID, "malformed item id")
        assert len(done.stderr) < 400, len(done.stderr)


@pytest.mark.parametrize(("key", "value"), [("default_ttl", "10s"), ("default_ttl", "30s"), ("clock_margin", "2h")])
def test_config_set_refuses_a_lease_length_every_claim_would_refuse(repo: Path, key: str, value: str) -> None:
    """``gw config set default_ttl 10s`` (or a clock_margin of 2h) was written, then every ``gw claim``
    without --ttl refused it (exit 5, "a lease of 10s would be unusable"): refused when set instead."""
    ok(repo, "init")
    item = ok(repo, "new", "claim me").strip()
    for shared in ([], ["--shared"]):
        done = gw_here(repo, "config", "set", *shared, key, value, env=ENV)
        one_line_refusal(done, INVALID, "clock_margin")
    assert git(repo, "config", "--get-regexp", "^gitwork\\.", check=False) == ""
    assert not (repo / ".workplane").exists()
    ok(repo, "claim", item)


def test_a_workplane_that_is_a_folder_is_refused_in_one_line(repo: Path) -> None:
    """``.workplane`` a directory (or unreadable): every verb died with exit 1 (IsADirectoryError)."""
    ok(repo, "init")
    (repo / ".workplane").mkdir()
    before = refs(repo)
    for args in (["list"], ["new", "x"], ["config", "list"]):
        one_line_refusal(gw_here(repo, *args, env=ENV), CORRUPT, ".workplane")
    assert refs(repo) == before


def test_a_date_before_year_1000_sorts_as_time_does(repo: Path) -> None:
    """``format_instant`` wrote year 999 as ``999-01-01T...`` (strftime does not pad the year), which
    sorts after ``2026-...`` as text: ``--created-after 0999-01-01`` listed nothing, ``--created-before``
    everything."""
    ok(repo, "init")
    item = ok(repo, "new", "an item").strip()
    assert item in ok(repo, "list", "--created-after", "0999-01-01", "--json")
    assert item not in ok(repo, "list", "--created-before", "0999-01-01", "--json")
    from gitwork.clock import format_instant, parse_instant

    assert format_instant(parse_instant("0999-01-01T00:00:00Z")) == "0999-01-01T00:00:00Z"
    assert format_instant(parse_instant("2026-12-02T08:00:00Z")) == "2026-12-02T08:00:00Z"
