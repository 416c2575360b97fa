"""Where each piece of state lives in the state ref's tree (see docs/format.md)."""

from __future__ import annotations

from .ids import shard

ITEMS = "items"
COUNTERS = "counters.yaml"
ITEM_FILE = "item.yaml"
LEASE_FILE = "lease.yaml"
EVENTS_FILE = "events.log"


COMMANDS = "commands"


def command_path(command_id: str) -> str:
    """Where the record of an applied command lives: sharded by a hash, since clients choose ids."""
    from .hashing import sha1_hex

    return f"{COMMANDS}/{sha1_hex(command_id.encode())[:2]}/{command_id}"


def item_dir(item_id: str) -> str:
    return f"{ITEMS}/{shard(item_id)}/{item_id}"


def item_path(item_id: str, name: str) -> str:
    return f"{item_dir(item_id)}/{name}"
