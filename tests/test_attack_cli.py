"""Everyday verbs (issue 18) attacked: ``--jq`` with endless output, several ids naming one item twice."""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import gw_cmd, tip
from gitwork.cli.main import main
from gitwork.workplane import Workplane


def gw_in(repo: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "-C", str(repo)])
    return code, out.getvalue(), err.getvalue()


def _cap_memory() -> None:  # in the child: an endless collection dies fast instead of eating the machine
    limit = 512 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_jq_with_endless_output_streams_into_a_reader_that_stops(wp: Workplane, repo: Path) -> None:
    pytest.importorskip("jq")
    wp.do("new", title="one")
    reader = subprocess.Popen(gw_cmd("list", "--jq", "repeat(1)"), cwd=repo, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, preexec_fn=_cap_memory, start_new_session=True)
    assert reader.stdout is not None and reader.stderr is not None
    watchdog = threading.Timer(60, lambda: os.killpg(reader.pid, signal.SIGKILL))
    watchdog.start()
    try:
        lines = [reader.stdout.readline() for _ in range(1000)]  # | head -n 1000
        reader.stdout.close()
        code = reader.wait(timeout=60)
        err = reader.stderr.read().decode()
    finally:
        watchdog.cancel()
        if reader.poll() is None:
            os.killpg(reader.pid, signal.SIGKILL)
            reader.wait()
    assert lines == [b"1\n"] * 1000, lines[:3]
    assert code == 0, err
    assert "Error" not in err and "internal" not in err, err


def test_release_with_one_item_named_twice_releases_it_once_and_succeeds(wp: Workplane, repo: Path) -> None:
    first = wp.do("new", title="first").result["item"]
    second = wp.do("new", title="second").result["item"]
    for item in (first, second):
        wp.do("claim", item=item)
    code, out, err = gw_in(repo, "release", first, first[:8], second, first, "--json")
    assert code == 0, err
    results = json.loads(out)
    assert [r["item"] for r in results] == [first, second] and all(r["ok"] for r in results), results
    before = tip(repo)
    code, _out, err = gw_in(repo, "release", second, second)  # nothing held any more: one refusal, not two
    assert code == 7 and err.count("gw: stale") == 1, err
    assert tip(repo) == before


@pytest.mark.parametrize("verb", [("list",), ("ready",), ("search", "x")])
def test_a_malformed_label_filter_is_refused_not_an_empty_listing(wp: Workplane, repo: Path, verb: tuple[str, ...]) -> None:
    wp.do("new", title="x marks", labels=["ok"])
    before = tip(repo)
    for option, value in (("--label", ""), ("--label-any", "a b"), ("--label-any", "ok\n")):
        code, out, err = gw_in(repo, *verb, option, value)
        assert code == 5 and out == "" and err.count("\n") == 1 and "bad label" in err, (verb, option, err)
    assert tip(repo) == before
    code, out, _err = gw_in(repo, *verb, "--label-any", "nope", "--label-any", "ok", "--json")
    assert code == 0 and len(json.loads(out)) == 1
