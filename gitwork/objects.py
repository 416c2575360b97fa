"""Git objects: encode and decode trees and commits, and write loose objects.

Writing a loose object is what git itself does (deflate, write a temporary file beside the target,
rename); doing it here costs no process start, which is most of what a command spends. Objects are
content-addressed, so a concurrent writer of the same object writes the same bytes and the rename is
harmless. Reading goes through ``git cat-file`` so packed objects and alternates just work.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterable, Mapping

MODE_TREE = "40000"
MODE_BLOB = "100644"


class TreeEntry:
    __slots__ = ("mode", "name", "oid")

    def __init__(self, mode: str, name: str, oid: str) -> None:
        self.mode, self.name, self.oid = mode, name, oid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TreeEntry) and (self.mode, self.name, self.oid) == (other.mode, other.name, other.oid)

    def __repr__(self) -> str:
        return f"TreeEntry({self.mode}, {self.name!r}, {self.oid})"

    @property
    def is_tree(self) -> bool:
        return self.mode == MODE_TREE


def parse_tree(data: bytes, hexlen: int = 40) -> dict[str, TreeEntry]:
    """Decode a raw tree object into ``{name: entry}``."""
    raw = hexlen // 2
    entries: dict[str, TreeEntry] = {}
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        mode = data[pos:space].decode()
        name = data[space + 1 : nul].decode("utf-8", "surrogateescape")
        oid = data[nul + 1 : nul + 1 + raw].hex()
        entries[name] = TreeEntry(mode, name, oid)
        pos = nul + 1 + raw
    return entries


def _tree_sort_key(entry: TreeEntry) -> bytes:
    # git orders tree entries as if directory names ended in "/".
    name = entry.name.encode("utf-8", "surrogateescape")
    return name + b"/" if entry.is_tree else name


def format_tree(entries: Iterable[TreeEntry]) -> bytes:
    out = bytearray()
    for entry in sorted(entries, key=_tree_sort_key):
        out += f"{entry.mode} ".encode() + entry.name.encode("utf-8", "surrogateescape")
        out += b"\0" + bytes.fromhex(entry.oid)
    return bytes(out)


class Commit:
    __slots__ = ("tree", "parents", "author", "committer", "message")

    def __init__(self, tree: str, parents: tuple[str, ...], author: str, committer: str, message: str) -> None:
        self.tree, self.parents, self.author, self.committer, self.message = tree, parents, author, committer, message


def parse_commit(data: bytes) -> Commit:
    head, _, message = data.partition(b"\n\n")
    tree, parents, author, committer = "", [], "", ""
    for line in head.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value.decode()
        elif key == b"parent":
            parents.append(value.decode())
        elif key == b"author":
            author = value.decode("utf-8", "replace")
        elif key == b"committer":
            committer = value.decode("utf-8", "replace")
    return Commit(tree, tuple(parents), author, committer, message.decode("utf-8", "replace"))


def format_commit(tree: str, parents: Iterable[str], author: str, committer: str, message: str) -> bytes:
    lines = [f"tree {tree}"]
    lines += [f"parent {p}" for p in parents]
    lines += [f"author {author}", f"committer {committer}"]
    if not message.endswith("\n"):
        message += "\n"
    return ("\n".join(lines) + "\n\n" + message).encode("utf-8")


class LooseWriter:
    """Writes objects into ``<objects_dir>`` as loose objects (sha1 or sha256 repositories)."""

    def __init__(self, objects_dir: str, algorithm: str = "sha1") -> None:
        self.objects_dir = objects_dir
        self.algorithm = algorithm
        self._made_dirs: set[str] = set()
        self._known: set[str] = set()

    def hash(self, kind: str, data: bytes) -> str:
        header = f"{kind} {len(data)}\0".encode()
        return hashlib.new(self.algorithm, header + data).hexdigest()

    def write(self, kind: str, data: bytes) -> str:
        header = f"{kind} {len(data)}\0".encode()
        oid = hashlib.new(self.algorithm, header + data).hexdigest()
        if oid in self._known:
            return oid
        subdir = os.path.join(self.objects_dir, oid[:2])
        path = os.path.join(subdir, oid[2:])
        if not os.path.exists(path):
            if subdir not in self._made_dirs:
                os.makedirs(subdir, exist_ok=True)
                self._made_dirs.add(subdir)
            tmp = os.path.join(subdir, "tmp_obj_" + os.urandom(6).hex())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(zlib.compress(header + data, 1))
                os.replace(tmp, path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass
                raise
        self._known.add(oid)
        return oid

    def write_tree(self, entries: Mapping[str, TreeEntry]) -> str:
        return self.write("tree", format_tree(entries.values()))
