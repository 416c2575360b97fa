"""Work item ops: init, new, edit, check, decision, done, cancel, reopen."""

from __future__ import annotations

import re

from .. import ids
from ..engine import Context, op
from ..errors import Forbidden, Illegal, Invalid
from ..model import ITEM_TYPES, TRANSITIONS, Item
from ..paths import check_globs
from ..roles import WHO_ACTS_ON, act_on, edit_on
from .common import check_cycle as _check_cycle
from .common import end_lease, note_parent, parent_of, record_decision, refuse_open_dependencies

TYPE_CHECKING = False  # typing costs ~15 ms to import; annotations are strings anyway
if TYPE_CHECKING:
    from typing import Any

_HEX_COMMIT = re.compile(r"[0-9a-f]{7,64}\Z")


@op("init", "prepare the state ref (no-op when it exists)", who="anyone.")
def init(ctx: Context) -> None:
    if ctx.snapshot.commit is None:
        ctx.save_counters({"fence": 0})
        ctx.say(f"init gitwork state by {ctx.actor}")


def _provenance(ctx: Context, source: str | None) -> dict[str, Any]:
    prov: dict[str, Any] = {"by": ctx.actor, "at": ctx.when}
    if not source:
        return prov
    if source.startswith(("http://", "https://")):
        kind, ref = "url", source
    elif source.startswith("commit:") or _HEX_COMMIT.match(source):
        kind, ref = "commit", source.removeprefix("commit:")
    elif source.startswith("file:"):
        kind, ref = "file", source.removeprefix("file:")
    elif source.startswith(("item:", "w-")):
        kind, ref = "item", ctx.resolve(source.removeprefix("item:"))
        ctx.cmd["source"] = f"item:{ref}"  # recorded resolved: a replay must not re-resolve a prefix
    else:
        kind, ref = "text", source
    prov["source"] = {"kind": kind, "ref": ref}
    return prov


def _resolve_deps(ctx: Context, item_id: str, deps: list[str]) -> list[str]:
    resolved = []
    for dep in deps:
        full = ctx.resolve(dep)
        if full == item_id:
            raise Invalid(f"{item_id} cannot depend on itself")
        ctx.item(full)  # must exist and parse
        if full not in resolved:
            resolved.append(full)
    return resolved


def _parent(ctx: Context, item_id: str, text: str) -> str:
    """The full id of ``item_id``'s new parent, recorded resolved in the document; refused (5) unless it
    exists and is not ``item_id`` itself nor one of its descendants (the parents form a forest)."""
    parent = ctx.resolve(text)
    ctx.cmd["parent"] = parent
    if parent == item_id:
        raise Invalid(f"{item_id} cannot be its own parent", item=item_id)
    chain: list[str] = [item_id]
    current: str | None = parent
    while current is not None:
        chain.append(current)
        if current == item_id:
            raise Invalid(f"{item_id} cannot be a child of its own descendant: " + " -> ".join(reversed(chain[1:])),
                          item=item_id, parent=parent)
        if len(chain) > 10_000:
            raise Invalid(f"the parents above {parent} do not end (more than 10,000)", item=item_id)
        current = parent_of(ctx, current)  # NotFound (3) for a parent that does not exist
    return parent


def _criteria(ctx: Context, texts: list[str]) -> list[dict[str, Any]]:
    return [{"text": t, "checked": False} for t in texts]


@op(
    "new",
    "create a work item", who="anyone.",
    title="title!",
    description="text",
    priority="priority",
    labels="labels",
    depends_on="items",
    criteria="texts",
    owner="name",
    source="short",
    item="item",
    type="|".join(ITEM_TYPES),
    parent="item",
    paths="globs",
)
def new(ctx: Context) -> None:
    cmd = ctx.cmd
    item_id = cmd.get("item") or ids.mint()
    cmd["item"] = item_id  # recorded in the commit, so a replay on another tip creates the same item
    if not ids.is_full(item_id):
        raise Invalid(f"a new item's id must be a full id (w- and 16 hex digits), got {item_id!r}")
    if ctx.snapshot.blob(f"items/{ids.shard(item_id)}/{item_id}/item.yaml") is not None:
        raise Invalid(f"item {item_id} already exists")
    deps = _resolve_deps(ctx, item_id, cmd.get("depends_on", []))
    if deps:
        cmd["depends_on"] = deps  # recorded resolved, like every id in a stored command
    parent = _parent(ctx, item_id, cmd["parent"]) if "parent" in cmd else None
    item = Item(
        id=item_id,
        title=cmd["title"],
        description=cmd.get("description", ""),
        priority=cmd.get("priority", 2),
        labels=sorted(set(cmd.get("labels", []))),
        owner=cmd.get("owner"),
        provenance=_provenance(ctx, cmd.get("source")),
        depends_on=deps,
        criteria=_criteria(ctx, cmd.get("criteria", [])),
        type=cmd.get("type"),
        parent=parent,
        created_at=ctx.when,
        paths=cmd.get("paths") or None,
    )
    ctx.save_item(item)
    ctx.event(item_id, "created", title=item.title)
    ctx.say(f"new {item_id} by {ctx.actor}: {item.title}", item_id)
    ctx.outcome.result = {"item": item_id, "title": item.title}


@op(
    "edit",
    "change an item's fields", who=WHO_ACTS_ON,
    roles=True,
    item="item!",
    title="title",
    description="text",
    priority="priority",
    labels="labels",
    add_labels="labels",
    remove_labels="labels",
    add_deps="items",
    remove_deps="items",
    add_criteria="texts",
    owner="name",
    status="open|blocked",
    reason="short",
    type="|".join(ITEM_TYPES),
    parent="item",
    paths="globs",
    add_paths="globs",
    remove_paths="globs",
    budget="usd",
)
def edit(ctx: Context) -> None:
    cmd = ctx.cmd
    item_id = ctx.target()
    item = ctx.item(item_id)
    edit_on(ctx, item, {key for key in cmd if key not in ("op", "id", "as", "item", "reason", "fence", "lease")})
    changed: dict[str, Any] = {}
    for key in ("title", "description", "priority", "owner", "type"):
        if key in cmd and cmd[key] != getattr(item, key):
            setattr(item, key, cmd[key])
            changed[key] = cmd[key] if key != "description" else "(changed)"
    labels = set(cmd["labels"]) if "labels" in cmd else set(item.labels)
    labels |= set(cmd.get("add_labels", []))
    labels -= set(cmd.get("remove_labels", []))
    if sorted(labels) != item.labels:
        item.labels = sorted(labels)
        changed["labels"] = item.labels
    if any(key in cmd for key in ("paths", "add_paths", "remove_paths")):
        globs = set(cmd["paths"]) if "paths" in cmd else set(item.paths or [])
        globs = (globs | set(cmd.get("add_paths", []))) - set(cmd.get("remove_paths", []))
        if sorted(globs) != (item.paths or []):
            item.paths = check_globs(sorted(globs)) or None  # bounded again: the union may exceed the limit
            changed["paths"] = item.paths or []
    if "add_deps" in cmd or "remove_deps" in cmd:
        wanted = _resolve_deps(ctx, item_id, cmd.get("add_deps", []))
        removed = {ctx.resolve(d) for d in cmd.get("remove_deps", [])}
        # The stored document names full ids: replayed on another tip, a prefix could mean another item.
        if "add_deps" in cmd:
            cmd["add_deps"] = wanted
        if "remove_deps" in cmd:
            cmd["remove_deps"] = sorted(removed)
        added = [d for d in wanted if d not in item.depends_on]
        _check_cycle(ctx, item_id, added)
        deps = [d for d in item.depends_on if d not in removed] + added
        if deps != item.depends_on:
            item.depends_on = deps
            changed["depends_on"] = deps
    if "parent" in cmd:
        parent = _parent(ctx, item_id, cmd["parent"])
        if parent != item.parent:
            item.parent = parent
            changed["parent"] = parent
            note_parent(ctx, item_id, parent)
    if "budget" in cmd:
        _budget(ctx, item, cmd["budget"], changed)
    if cmd.get("add_criteria"):
        item.criteria = item.criteria + _criteria(ctx, cmd["add_criteria"])
        changed["criteria_added"] = cmd["add_criteria"]
    if "status" in cmd and cmd["status"] != item.status:
        _transition(item, cmd["status"])
        changed["status"] = cmd["status"]
    if not changed:
        raise Invalid(f"nothing to change on {item_id}")
    ctx.save_item(item)
    ctx.event(item_id, "edited", changes=changed, reason=cmd.get("reason"))
    ctx.say(f"edit {item_id} by {ctx.actor}: {', '.join(changed)}", item_id, fence=cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "changed": sorted(changed)}


def _budget(ctx: Context, item: Item, budget: str, changed: dict[str, Any]) -> None:
    """A budget is the owner's or an admin's to set: never its holder's as such (an agent would lift its
    own limit). A budget of 0 allows no launch at all (docs/launch.md, "Budgets")."""
    from ..roles import curator

    if not curator(ctx, item):
        raise Forbidden(f"only the owner of {item.id} or an admin sets its budget (you are {ctx.actor})",
                        item=item.id, who=ctx.actor)
    if budget != item.budget:
        item.budget = budget
        changed["budget"] = budget


def _transition(item: Item, target: str) -> None:
    if target not in TRANSITIONS[item.status]:
        raise Illegal(f"{item.id} cannot go from {item.status} to {target}")
    item.status = target


@op("check", "tick (or untick) one acceptance criterion", who=WHO_ACTS_ON,
    mcp={"verb": "items:check", "fields": ("item", "criterion", "uncheck", "fence")}, roles=True,
    item="item!", criterion="int!", uncheck="bool")
def check(ctx: Context) -> None:
    item_id = ctx.target()
    act_on(ctx, item_id)
    item = ctx.item(item_id)
    number = ctx.cmd["criterion"]
    if not 1 <= number <= len(item.criteria):
        raise Invalid(f"{item_id} has {len(item.criteria)} criteria; there is no #{number}")
    want = not ctx.cmd.get("uncheck", False)
    criterion = dict(item.criteria[number - 1])
    if criterion.get("checked") == want:
        raise Invalid(f"criterion #{number} of {item_id} is already {'checked' if want else 'unchecked'}")
    criterion.update(checked=want, by=ctx.actor if want else None, at=ctx.when if want else None)
    item.criteria = [*item.criteria[: number - 1], {k: v for k, v in criterion.items() if v is not None}, *item.criteria[number:]]
    ctx.save_item(item)
    ctx.event(item_id, "checked" if want else "unchecked", criterion=number, text=criterion["text"])
    ctx.say(f"{'check' if want else 'uncheck'} {item_id} #{number} by {ctx.actor}", item_id, fence=ctx.cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "criterion": number, "checked": want}


@op("decision", "record a decision with its rationale", who=WHO_ACTS_ON,
    mcp={"verb": "items:decision", "fields": ("item", "text", "why", "fence")}, roles=True,
    item="item!", text="short!", why="text!")
def decision(ctx: Context) -> None:
    item_id = ctx.target()
    act_on(ctx, item_id)
    record_decision(ctx, item_id, ctx.cmd["text"], ctx.cmd["why"])


def _close(ctx: Context, target: str, duplicate_of: str | None = None) -> None:
    item_id = ctx.target()
    lease = act_on(ctx, item_id)
    item = ctx.item(item_id)
    reason = ctx.cmd.get("reason") or (f"duplicate of {duplicate_of}" if duplicate_of else None)
    if target == "done":
        open_criteria = [i + 1 for i, c in enumerate(item.criteria) if not c.get("checked")]
        if open_criteria and not ctx.cmd.get("force"):
            raise Illegal(
                f"{item_id} has unchecked criteria {open_criteria}: check them, or use --force with a --reason"
            )
        if open_criteria and not reason:
            raise Invalid("--force needs a --reason")
        refuse_open_dependencies(ctx, item_id, "done")
    _transition(item, target)
    item.closed_reason = reason
    ctx.save_item(item)
    ctx.event(item_id, target, reason=reason, forced=bool(ctx.cmd.get("force")) or None, duplicate_of=duplicate_of)
    if lease is not None:
        end_lease(ctx, lease, "released", reason=target)
    ctx.say(f"{target} {item_id} by {ctx.actor}", item_id, fence=ctx.cmd.get("fence"))
    ctx.outcome.result = {"item": item_id, "status": target, **({"duplicate_of": duplicate_of} if duplicate_of else {})}


@op("done", "mark an item done (releases the holder's lease)", who=WHO_ACTS_ON,
    mcp={"verb": "items:done", "summary": "finish an item: publishes your open session, releases the lease",
         "fields": ("item", "force", "reason", "fence"), "lease": "end"}, arbiter=True, roles=True, item="item!",
    force="bool", reason="short")
def done(ctx: Context) -> None:
    # The holder's open sessions under this lease would be stranded (their fence dies with the
    # lease): refuse, naming them. `gw done` publishes the one committed session first.
    from ..records.sessions import refuse_open_sessions

    item_id = ctx.target()
    refuse_open_sessions(ctx, item_id, ctx.require_holder(item_id), "done")
    _close(ctx, "done")


@op("cancel", "cancel an item (duplicate_of: the item it duplicates, recorded in its reason and event)",
    who=WHO_ACTS_ON, arbiter=True, roles=True, item="item!", reason="short", duplicate_of="item")
def cancel(ctx: Context) -> None:
    duplicate_of = None
    if ctx.cmd.get("duplicate_of") is not None:
        item_id = ctx.target()
        # Resolved (3 when no such item) and recorded in full in the document, as a parent is.
        duplicate_of = ctx.cmd["duplicate_of"] = ctx.resolve(ctx.cmd["duplicate_of"])
        ctx.item(duplicate_of)  # must exist and parse
        if duplicate_of == item_id:
            raise Invalid(f"{item_id} cannot be a duplicate of itself", item=item_id)
    _close(ctx, "cancelled", duplicate_of)


@op("reopen", "reopen a done or cancelled item", who=WHO_ACTS_ON, roles=True, item="item!", reason="short")
def reopen(ctx: Context) -> None:
    item_id = ctx.target()
    act_on(ctx, item_id)
    item = ctx.item(item_id)
    if item.status not in ("done", "cancelled"):
        raise Illegal(f"{item_id} is {item.status}; only done or cancelled items can be reopened")
    _transition(item, "open")
    item.closed_reason = None
    ctx.save_item(item)
    ctx.event(item_id, "reopened", reason=ctx.cmd.get("reason"))
    ctx.say(f"reopen {item_id} by {ctx.actor}", item_id)
    ctx.outcome.result = {"item": item_id, "status": "open"}
