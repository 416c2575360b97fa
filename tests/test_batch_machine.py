"""Property: a batch is exactly its members applied one by one, in one commit, or nothing at all.

Random sequences of documents (new, edit, msg, check, claim, release, done, cancel, reopen, import,
with refusals among them) are applied twice from the same state and clock: one command each on one
repository, as one batch on another. When every single command is accepted, the batch lands as one
commit and the two ``items/`` trees are identical (same ids, items, leases, events, threads); when
the k-th is refused, the batch is refused with the same exit code, naming position k, and its
repository's state ref has not moved. One identity per document (issue 23): the single commands may act
as anyone, but a batch acts as one identity, so one whose member names another identity is refused as
forbidden (77) at that member, before any member runs, and writes nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import Clock, make_repo, tip
from gitwork import ids
from gitwork.errors import Forbidden, GwError
from gitwork.workplane import Workplane

EXTERNAL = ("1", "2", "3")  # a CSV row's key: the import op takes only the id its source derives
ITEMS = [ids.imported("csv", key) for key in EXTERNAL]
KEY = dict(zip(ITEMS, EXTERNAL, strict=True))
WHO = ["alice", "bob", None]  # None: "as" left out (the work plane's identity, LEAD)
LEAD = "alice"


def _as(doc: dict, who: str | None) -> dict:
    return {**doc, "as": who} if who else doc


def documents() -> st.SearchStrategy[dict]:
    item = st.sampled_from(ITEMS)
    who = st.sampled_from(WHO)
    return st.one_of(
        st.builds(lambda i, t: {"op": "new", "item": i, "title": t, "criteria": ["one"]}, item,
                  st.sampled_from(["alpha", "beta"])),
        st.builds(lambda i, label: {"op": "edit", "item": i, "add_labels": [label]}, item, st.sampled_from(["x", "y"])),
        st.builds(lambda i, d: {"op": "edit", "item": i, "add_deps": [d]}, item, item),
        st.builds(lambda i, w: _as({"op": "msg", "item": i, "text": "hi", "epoch": "current"}, w), item, who),
        st.builds(lambda i: {"op": "check", "item": i, "criterion": 1}, item),
        st.builds(lambda i, w: _as({"op": "claim", "item": i}, w), item, who),
        st.builds(lambda i, w: _as({"op": "release", "item": i}, w), item, who),
        st.builds(lambda i: {"op": "done", "item": i, "force": True, "reason": "r"}, item),
        st.builds(lambda i: {"op": "cancel", "item": i}, item),
        st.builds(lambda i: {"op": "reopen", "item": i}, item),
        st.builds(lambda i, t: {"op": "import", "item": i, "source": "csv", "external": KEY[i], "title": t,
                                "comments": [{"id": f"m-{i[-4:]}", "by": "carol", "text": "c"}]},
                  item, st.sampled_from(["gamma", "delta"])),
    )


def items_tree(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "refs/gitwork/state:items"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.slow
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(documents(), min_size=1, max_size=7))
def test_a_batch_is_its_members_one_by_one_or_nothing(tmp_path_factory, docs: list[dict]) -> None:
    base = tmp_path_factory.mktemp("batch")
    one_by_one, batched = make_repo(base / "single"), make_repo(base / "batch")
    clock = Clock()
    docs = [{**doc, "id": f"c-member-{n:04d}"} for n, doc in enumerate(docs, 1)]
    with Workplane(str(one_by_one), agent=LEAD, now=clock) as single, \
            Workplane(str(batched), agent=LEAD, now=clock) as batch:
        single.do("init")
        batch.do("init")
        refused = None
        for position, doc in enumerate(docs, 1):
            try:
                single.submit(dict(doc))
            except GwError as error:
                refused = (position, error)
                break
        before = tip(batched)
        foreign = [n for n, doc in enumerate(docs, 1) if doc.get("as", LEAD) != LEAD]
        if foreign:  # refused before any member runs, whatever the members before it would do
            with pytest.raises(Forbidden) as forbidden:
                batch.submit({"op": "batch", "ops": docs})
            assert forbidden.value.message.startswith(f"#{foreign[0]} ("), forbidden.value.message
            assert forbidden.value.details.get("position") == foreign[0]
            assert tip(batched) == before
            return
        try:
            applied = batch.submit({"op": "batch", "ops": docs})
        except GwError as error:
            assert refused is not None, f"the batch was refused ({error.message}) but every single command landed"
            position, single_error = refused
            assert (error.code, error.details.get("position")) == (single_error.code, position), error.message
            assert error.message == f"#{position} ({docs[position - 1]['op']}): {single_error.message}"
            assert tip(batched) == before
            return
        assert refused is None, f"#{refused[0]} was refused alone ({refused[1].message}) but not in the batch"
        moved = int(subprocess.run(["git", "rev-list", "--count", f"{before}..refs/gitwork/state"], cwd=batched,
                                   capture_output=True, text=True).stdout.strip() or 0)
        assert moved == (1 if applied.result["changed"] else 0)
        assert items_tree(batched) == items_tree(one_by_one)
