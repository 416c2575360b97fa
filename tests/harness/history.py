"""I6-I8 and the path-lease invariant, checked on the arbiter's state history after the run.

Each check is two parts: :func:`extract` walks the state ref once and reduces every commit to the
facts a rule needs (a grant and what the item waited on just before it, a reservation and what the
item had spent, an execution's reports, a queue landing and the entry it landed); the ``check_*``
functions judge those facts alone. So a checker test feeds a hand-made violating history straight to
a ``check_*`` (tests/test_system_harness.py), and the rules are re-derived here, independently of
gitwork's own (a glob's literal prefix, a timer's instant, a sum of reported costs), not imported.

- I6: no item is granted (claim, claim --next, gw run's reservation that claims) while one of its
  waits is open at the commit's time (a ref or command wait, a timer not yet passed), unless forced;
- I7: a queued session lands at most once, only from an entry that was queued (at the parent), under
  the lease it was queued under (same holder, epoch and fence, still active), and a code branch the
  publisher moved only moves to commits a ``queue-land`` (or a direct publish) recorded;
- I8: an execution's ``usage.cost`` is the sum of its reports, each report id once; a report a client
  was told landed is there once; no ``exec-reserve`` lands once the item's reported cost reached its budget;
- IP: no grant gives a lease whose globs overlap (by literal prefix) the globs of another holder's
  lease live at that moment (active, before its expiry plus the clock margin).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ledger import Ledger

STATE = "refs/gitwork/state"
WILDCARDS = "*?["
GRANTING = ("claim", "exec-reserve")  # ops whose grant must respect the item's waits (takeover may not)


@dataclass(frozen=True)
class LeaseFact:
    item: str
    holder: str
    state: str
    epoch: int
    fence: int
    expires_at: _dt.datetime | None
    paths: tuple[str, ...] = ()


@dataclass
class Grant:
    """A commit that gave ``lease`` (a new epoch, active) on its item."""

    commit: str
    op: str
    forced: bool
    at: _dt.datetime
    lease: LeaseFact
    waits: list[dict[str, Any]] = field(default_factory=list)  # the item's waits at the parent
    others: list[LeaseFact] = field(default_factory=list)  # the other items' path leases at the parent


@dataclass
class Reserve:
    commit: str
    item: str
    budget: decimal.Decimal | None  # the item's own, at the parent
    spent: decimal.Decimal  # the reported cost of the item's executions, at the parent


@dataclass
class Execution:
    id: str
    item: str
    cost: decimal.Decimal | None  # usage.cost as recorded
    reports: list[tuple[str, decimal.Decimal]]  # (report id, cost) as recorded


@dataclass
class Landing:
    commit: str
    session: str
    branch_commit: str  # what the target moved to
    entry: dict[str, Any] | None  # the queue entry of the session at the parent
    lease: LeaseFact | None  # the item's lease at the parent


@dataclass
class History:
    margin: int
    grants: list[Grant] = field(default_factory=list)
    reserves: list[Reserve] = field(default_factory=list)
    executions: list[Execution] = field(default_factory=list)
    landings: list[Landing] = field(default_factory=list)
    commits: int = 0


def instant(text: Any) -> _dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        when = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def amount(value: Any) -> decimal.Decimal:
    try:
        return decimal.Decimal(str(value)) if value not in (None, "") else decimal.Decimal(0)
    except decimal.InvalidOperation:
        return decimal.Decimal("NaN")


def prefix(glob: str) -> str:
    """A glob's literal prefix: the text before its first wildcard (docs/leases.md)."""
    cut = min([glob.index(c) for c in WILDCARDS if c in glob] or [len(glob)])
    return glob[:cut]


def globs_overlap(a: str, b: str) -> bool:
    pa, pb = prefix(a), prefix(b)
    if pa == a and pb == b:  # two plain paths: a file or a whole folder each
        return a == b or b.startswith(a.rstrip("/") + "/") or a.startswith(b.rstrip("/") + "/")
    return pa.startswith(pb) or pb.startswith(pa)


# --- the checks (pure: facts in, violations out) -----------------------------------------------------


def open_waits(waits: list[dict[str, Any]], at: _dt.datetime) -> list[dict[str, Any]]:
    found = []
    for wait in waits:
        if wait.get("kind") == "timer":
            until = instant(wait.get("until"))
            if until is not None and until <= at:
                continue
        found.append(wait)
    return found


def check_waits(history: History, ledger: Ledger) -> None:
    """I6."""
    for grant in history.grants:
        if grant.op not in GRANTING or grant.forced:
            continue
        ledger.count("I6:grants-checked")
        waiting = open_waits(grant.waits, grant.at)
        if waiting:
            said = "; ".join(f"{w.get('kind')} {w.get('until') or w.get('ref') or w.get('command')} (wait {w.get('id')})"
                             for w in waiting)
            ledger.violate("I6", f"{grant.commit[:12]} {grant.op} granted {grant.lease.item} to {grant.lease.holder} "
                                 f"(fence {grant.lease.fence}) at {grant.at.isoformat()} while it waited on {said}")


def check_path_leases(history: History, ledger: Ledger) -> None:
    """IP: a grant with globs never overlaps another holder's live path lease."""
    margin = _dt.timedelta(seconds=history.margin)
    for grant in history.grants:
        if not grant.lease.paths:
            continue
        ledger.count("IP:path-grants-checked")
        for other in grant.others:
            if other.item == grant.lease.item or other.holder == grant.lease.holder or other.state != "active":
                continue
            if other.expires_at is None or grant.at >= other.expires_at + margin:
                continue
            pairs = [(a, b) for a in grant.lease.paths for b in other.paths if globs_overlap(a, b)]
            if pairs:
                ledger.violate("IP", f"{grant.commit[:12]} {grant.op} gave {grant.lease.holder} {grant.lease.item} "
                                     f"with {pairs} while {other.holder}'s lease on {other.item} (fence {other.fence}, "
                                     f"until {other.expires_at.isoformat()}) was live")


def check_ledger(history: History, ledger: Ledger) -> None:
    """I8: every cost counted once, and no reservation past a spent budget."""
    by_id = {execution.id: execution for execution in history.executions}
    for execution in history.executions:
        ids = [rid for rid, _ in execution.reports]
        doubled = sorted({rid for rid in ids if ids.count(rid) > 1})
        if doubled:
            ledger.violate("I8", f"execution {execution.id} ({execution.item}) keeps reports {doubled} more than once")
        total = sum((cost for _, cost in execution.reports), decimal.Decimal(0))
        if execution.reports and execution.cost != total:
            ledger.violate("I8", f"execution {execution.id} ({execution.item}) records cost {execution.cost} but its "
                                 f"reports add up to {total}")
        ledger.count("I8:executions-checked")
    for execution_id, report_id, cost in ledger.reports:
        found = by_id.get(execution_id)
        if report_id in ledger.refused_ids:
            continue
        times = [c for rid, c in (found.reports if found else []) if rid == report_id]
        if len(times) != 1 or times[0] != cost:
            ledger.violate("I8", f"report {report_id} on {execution_id} ({cost} USD, acknowledged) is recorded "
                                 f"{len(times)} times {times}")
        else:
            ledger.count("I8:reports-landed-once")
    for reserve in history.reserves:
        if reserve.budget is None:
            continue
        ledger.count("I8:reservations-under-budget-checked")
        if reserve.spent >= reserve.budget:
            ledger.violate("I8", f"{reserve.commit[:12]} exec-reserve on {reserve.item} landed with {reserve.spent} "
                                 f"USD reported of its {reserve.budget} USD budget")


def check_queue(history: History, ledger: Ledger, moves: list[str] | None = None,
                failing: list[str] | None = None) -> None:
    """I7. ``moves``: the commits the code branch was moved to, in order (None: not checked); ``failing``:
    those of them whose tree the gates refuse (the harness's gate refuses any ``*.red`` file)."""
    landed: dict[str, str] = {}
    for landing in history.landings:
        ledger.count("I7:landings-checked")
        where = f"{landing.commit[:12]} queue-land {landing.session}"
        if landing.session in landed:
            ledger.violate("I7", f"{where}: the session landed already at {landed[landing.session][:12]}")
        landed[landing.session] = landing.commit
        entry, lease = landing.entry, landing.lease
        if entry is None:
            ledger.violate("I7", f"{where}: no queue entry of it at the parent")
            continue
        if lease is None or lease.state != "active" or lease.holder != entry.get("holder") \
                or lease.fence != entry.get("fence") or lease.epoch != entry.get("epoch"):
            ledger.violate("I7", f"{where}: queued under {entry.get('holder')} epoch {entry.get('epoch')} fence "
                                 f"{entry.get('fence')}, landed under {lease}")
    if moves is not None:
        recorded = {landing.branch_commit for landing in history.landings}
        for commit in moves:
            if commit not in recorded:
                ledger.violate("I7", f"the code branch moved to {commit[:12]}, which no landing recorded")
    for commit in failing or ():
        ledger.violate("I7", f"the code branch moved to {commit[:12]}, a tree its gates refuse")


def check_all(history: History, ledger: Ledger, moves: list[str] | None = None,
              failing: list[str] | None = None) -> None:
    check_waits(history, ledger)
    check_path_leases(history, ledger)
    check_ledger(history, ledger)
    check_queue(history, ledger, moves, failing)


# --- the facts, from a repository's state ref ---------------------------------------------------------


def extract(repo: Path, margin: int, ref: str = STATE) -> History:
    """Walk ``ref`` once (oldest first); blobs are parsed once per object id."""
    from gitwork import codec, layout, statecommit
    from gitwork.records.executions import EXECUTIONS
    from gitwork.records.queue import ENTRIES
    from gitwork.store import Repository, Store

    store = Store(Repository.discover(str(repo)), ref)
    parsed: dict[str, dict[str, Any]] = {}
    history = History(margin=margin)

    def load(snap: Any, path: str) -> dict[str, Any] | None:
        entry = snap.entry(path)
        if entry is None:
            return None
        oid = entry.oid
        if oid not in parsed:
            data = snap.blob(path)
            parsed[oid] = codec.load_yaml(data, what=path) if data else {}
        return parsed[oid]

    def lease_at(snap: Any, item: str) -> LeaseFact | None:
        doc = load(snap, layout.item_path(item, layout.LEASE_FILE))
        if not doc:
            return None
        return LeaseFact(item, str(doc.get("holder")), str(doc.get("state")), int(doc.get("epoch") or 0),
                         int(doc.get("fence") or 0), instant(doc.get("expires_at")),
                         tuple(str(g) for g in doc.get("paths") or ()))

    def files_under(snap: Any, top: str) -> list[str]:
        out = []
        for name, entry in snap.tree(top).items():
            path = f"{top}/{name}"
            out += files_under(snap, path) if entry.is_tree else [path]
        return out

    def path_leases(snap: Any, but: str) -> list[LeaseFact]:
        found = []
        for path in files_under(snap, layout.ITEMS):
            if path.endswith("/" + layout.LEASE_FILE):
                item = path.split("/")[-2]
                lease = lease_at(snap, item)
                if item != but and lease is not None and lease.paths:
                    found.append(lease)
        return found

    def spent(snap: Any, item: str) -> decimal.Decimal:
        total = decimal.Decimal(0)
        for path in files_under(snap, EXECUTIONS):
            doc = load(snap, path) or {}
            if doc.get("item") == item:
                total += amount((doc.get("usage") or {}).get("cost"))
        return total

    try:
        lines = [line.split() for line in _git(repo, "rev-list", "--reverse", "--parents", ref).splitlines()]
        for parts in lines:
            history.commits += 1
            if len(parts) != 2:
                continue
            commit, parent = parts
            state = statecommit.read(store, commit)
            cmd, at = state.command, state.at
            if not cmd or at is None or not isinstance(cmd.get("item"), str):
                continue
            op, item = str(cmd.get("op")), cmd["item"]
            before, after = store.snapshot(parent, at_tip=False), store.snapshot(commit, at_tip=False)
            old, new = lease_at(before, item), lease_at(after, item)
            if new is not None and new.state == "active" and (old is None or old.state != "active"
                                                              or old.epoch != new.epoch):
                item_doc = load(before, layout.item_path(item, layout.ITEM_FILE)) or {}
                history.grants.append(Grant(commit, op, bool(cmd.get("force")), at, new,
                                            [dict(w) for w in item_doc.get("waits") or ()],
                                            path_leases(before, item) if new.paths else []))
            if op == "exec-reserve":
                item_doc = load(before, layout.item_path(item, layout.ITEM_FILE)) or {}
                budget = item_doc.get("budget")
                history.reserves.append(Reserve(commit, item, None if budget is None else amount(budget),
                                                spent(before, item)))
            if op == "queue-land":
                entries = [load(before, path) or {} for path in files_under(before, ENTRIES)]
                entry = next((e for e in entries if e.get("session") == cmd.get("session")), None)
                history.landings.append(Landing(commit, str(cmd.get("session")), str(cmd.get("commit")), entry,
                                                lease_at(before, str((entry or {}).get("item") or item))))
        tip = store.snapshot(lines[-1][0], at_tip=False) if lines else None
        for path in files_under(tip, EXECUTIONS) if tip is not None else []:
            doc = load(tip, path) or {}
            reports = [(str(r.get("id")), amount(r.get("cost"))) for r in doc.get("reports") or ()]
            cost = (doc.get("usage") or {}).get("cost")
            history.executions.append(Execution(str(doc.get("id")), str(doc.get("item")),
                                                None if cost is None else amount(cost), reports))
    finally:
        store.close()
    return history


def _git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60, check=False).stdout
