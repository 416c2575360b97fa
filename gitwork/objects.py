"""Git objects: encode and decode trees and commits, and read and write loose objects.

Writing a loose object is what git itself does (deflate, write a temporary file beside the target,
rename); doing it here costs no process start, which is most of what a command spends. Objects are
content-addressed, so a concurrent writer of the same object writes the same bytes and the rename is
harmless. :class:`LooseObjects` reads and writes exactly as git's ``object-file.c`` does, settings
included (``core.sharedRepository``, ``core.fsync``/``core.fsyncObjectFiles``); what it cannot read
(packed objects, alternates, promisor objects) the store asks ``git cat-file`` for.
"""

from __future__ import annotations

import errno
import os
import stat
import zlib
from collections.abc import Iterable, Mapping

from . import hashing

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


_READ = 1 << 16  # bytes per read of a loose object file (most are a few hundred)


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


# --- git's settings for the files it writes ---------------------------------------------------------

PERM_UMASK, PERM_GROUP, PERM_EVERYBODY = 0, 0o660, 0o664


def parse_bool(value: str | None) -> bool | None:
    """git's ``git_parse_maybe_bool``: ``None`` when the text is no boolean (git would die)."""
    if value is None:
        return True
    text = value.lower()
    if text in ("true", "yes", "on"):
        return True
    if text in ("false", "no", "off", ""):
        return False
    try:
        return int(value, 0 if value.lower().startswith(("0x", "-0x")) else 10) != 0
    except ValueError:
        return None


def shared_perm(value: str | None) -> int:
    """``core.sharedRepository`` as git's ``git_config_perm`` reads it (0: umask; <0: exact mode)."""
    if value is None:
        return PERM_UMASK
    if value == "umask":
        return PERM_UMASK
    if value == "group":
        return PERM_GROUP
    if value in ("all", "world", "everybody"):
        return PERM_EVERYBODY
    try:
        number = int(value.strip() or "0", 8)
    except ValueError:
        flag = parse_bool(value)
        if flag is None:
            raise ValueError(f"bad core.sharedRepository value {value!r}") from None
        return PERM_GROUP if flag else PERM_UMASK
    if number in (0, 1, 2):
        return (PERM_UMASK, PERM_GROUP, PERM_EVERYBODY)[number]
    if number & 0o600 != 0o600:
        raise ValueError(f"core.sharedRepository 0{number:o}: the owner must keep read and write permission")
    return -(number & 0o666)


def calc_shared_perm(mode: int, shared: int) -> int:
    """git's ``calc_shared_perm`` (path.c)."""
    tweak = -shared if shared < 0 else shared
    if not mode & stat.S_IWUSR:
        tweak &= ~0o222
    if mode & stat.S_IXUSR:
        tweak |= (tweak & 0o444) >> 2  # copy read bits to execute bits
    return (mode & ~0o777) | tweak if shared < 0 else mode | tweak


def adjust_shared_perm(path: str, shared: int) -> None:
    """git's ``adjust_shared_perm``: widen (or, for an octal value, set) a new file's or folder's mode."""
    if not shared:
        return
    old = os.stat(path).st_mode
    new = calc_shared_perm(old, shared)
    if stat.S_ISDIR(old):
        new |= (new & 0o444) >> 2
        if new & 0o060:
            new |= stat.S_ISGID  # g+s matters only if the group is granted something
    if (old ^ new) & 0o7777:
        os.chmod(path, new & 0o7777)


# core.fsync components (git's FSYNC_COMPONENT_* bits and their names, in git's order).
_LOOSE, _PACK, _PACK_META, _GRAPH, _INDEX, _REF = 1, 2, 4, 8, 16, 32
_OBJECTS = _LOOSE | _PACK
_DERIVED = _PACK_META | _GRAPH
FSYNC_DEFAULT = (_OBJECTS | _DERIVED) & ~_LOOSE  # git on Linux: loose objects are not fsynced by default
_FSYNC_NAMES = (
    ("loose-object", _LOOSE), ("pack", _PACK), ("pack-metadata", _PACK_META), ("commit-graph", _GRAPH),
    ("index", _INDEX), ("objects", _OBJECTS), ("reference", _REF), ("derived-metadata", _DERIVED),
    ("committed", _OBJECTS | _REF), ("added", _OBJECTS | _REF | _INDEX),
    ("all", _OBJECTS | _REF | _INDEX | _DERIVED),
)


def parse_fsync_components(value: str) -> int:
    """git's ``parse_fsync_components`` (config.c), prefix matching and ``none`` included."""
    current, positive, negative = FSYNC_DEFAULT, 0, 0
    pos = 0
    while True:
        while pos < len(value) and value[pos] in ", \t\n\r":
            pos += 1
        end = value.find(",", pos)
        end = len(value) if end < 0 else end
        word = value[pos:end]
        if value[pos:] == "none":
            current = 0
        else:
            negated = word.startswith("-")
            if negated:
                word = word[1:]
            if not word:
                break
            for name, bits in _FSYNC_NAMES:
                if name.startswith(word):
                    if negated:
                        negative |= bits
                    else:
                        positive |= bits
        if end >= len(value):
            break
        pos = end
    return (current & ~negative) | positive


def fsync_loose_objects(config: Mapping[str, str]) -> bool:
    """Whether git would fsync a loose object it writes, given ``core.*`` settings (lower-case keys).

    git's ``close_loose_object``: ``core.fsyncObjectFiles=true`` fsyncs whatever ``core.fsync`` says;
    otherwise the ``loose-object`` component of ``core.fsync`` decides (not set by default on Linux).
    ``core.fsyncMethod`` (fsync, writeout-only, batch) only changes how: outside a bulk-checkin
    transaction git issues a full fsync for ``batch`` too, and gitwork uses a full fsync for all three.
    """
    if parse_bool(config.get("core.fsyncobjectfiles", "false")):
        return True
    components = config.get("core.fsync")
    return bool(parse_fsync_components(components) & _LOOSE) if components is not None else False


def loose_compression(config: Mapping[str, str]) -> int:
    """The zlib level git uses for loose objects: ``core.looseCompression``, else ``core.compression``,
    else 1 (``Z_BEST_SPEED``); -1 is zlib's default. Raises ValueError where git would die."""
    for key in ("core.loosecompression", "core.compression"):
        if key in config:
            level = int(config[key].strip(), 0)
            if level != -1 and not 0 <= level <= 9:
                raise ValueError(f"bad zlib compression level {level} ({key})")
            return level
    return 1


# --- the object folder ----------------------------------------------------------------------------

# How often to retry creating a temporary object file whose fan-out folder vanished under us
# (``git prune-packed``/``gc`` remove empty ones at any moment); git retries once, a loop of a few
# is as cheap and survives a housekeeping run that empties the folder again in between.
_CREATE_ATTEMPTS = 16


class LooseObjects:
    """A repository's object folder: loose objects read and written as git reads and writes them.

    ``shared`` is :func:`shared_perm` of ``core.sharedRepository``; ``fsync`` whether each object
    file is fsynced before it is renamed into place (:func:`fsync_loose_objects`).
    """

    def __init__(self, objects_dir: str, algorithm: str = "sha1", *, shared: int = 0, fsync: bool = False,
                 level: int = 1) -> None:
        self.objects_dir = objects_dir
        self.algorithm = algorithm
        self.shared = shared
        self.fsync = fsync
        self.level = level  # zlib level, as git's core.looseCompression

    def hash(self, kind: str, data: bytes) -> str:
        header = f"{kind} {len(data)}\0".encode()
        return str(hashing.new(self.algorithm, header + data).hexdigest())

    # --- reading ------------------------------------------------------------------------------

    def header(self, oid: str) -> tuple[str, int] | None:
        """``(kind, size)`` of a loose object from its first bytes, inflating no more than its header (a
        blob of a gigabyte of zeros is a kilobyte on disk); ``None`` when it is not loose here (ask git)."""
        try:
            fd = os.open(os.path.join(self.objects_dir, oid[:2], oid[2:]), os.O_RDONLY)
        except OSError:
            return None
        try:
            head = zlib.decompressobj().decompress(os.read(fd, 512), 64)
        except (OSError, zlib.error):
            return None
        finally:
            os.close(fd)
        kind, _, size = head.partition(b"\0")[0].partition(b" ")
        if b"\0" not in head or not size.isdigit():
            return None
        return kind.decode("ascii", "replace"), int(size)

    def read(self, oid: str) -> tuple[str, bytes] | None:
        """``(kind, content)`` of a loose object, or ``None`` when it is not loose here (ask git)."""
        # os.read, not open(): no buffered file object per object, which halves the cost of reading one
        # (a cache rebuild reads two per item). A read short of its size ends the file; if it ever did
        # not, the stream is truncated and zlib says so: the object is then asked of git.
        try:
            fd = os.open(os.path.join(self.objects_dir, oid[:2], oid[2:]), os.O_RDONLY)
        except OSError:
            return None
        try:
            data = os.read(fd, _READ)
            if len(data) == _READ:  # a large object: the rest of it
                parts = [data]
                while part := os.read(fd, _READ):
                    parts.append(part)
                data = b"".join(parts)
            raw = zlib.decompress(data)
        except (OSError, zlib.error):
            return None
        finally:
            os.close(fd)
        header, _, body = raw.partition(b"\0")
        kind, _, size = header.partition(b" ")
        if not size.isdigit() or int(size) != len(body):
            return None
        return kind.decode("ascii", "replace"), body

    # --- writing ------------------------------------------------------------------------------

    def write(self, kind: str, data: bytes) -> str:
        header = f"{kind} {len(data)}\0".encode()
        oid = str(hashing.new(self.algorithm, header + data).hexdigest())
        # No memory of what was written before: housekeeping may have packed, pruned or moved any of it
        # since (a long-lived Workplane spans many gc runs). Like git, look at the file every time.
        subdir = os.path.join(self.objects_dir, oid[:2])
        path = os.path.join(subdir, oid[2:])
        if not self._freshen(path):
            try:
                self._write_file(subdir, path, zlib.compress(header + data, self.level))
            except PermissionError as exc:
                from .errors import GwError

                # git's own words for it (a shared repository whose group this user is not in, say).
                raise GwError(f"insufficient permission for adding an object to repository database "
                              f"{self.objects_dir} ({exc.strerror}: {exc.filename})") from None
        return oid

    def write_tree(self, entries: Mapping[str, TreeEntry]) -> str:
        return self.write("tree", format_tree(entries.values()))

    @staticmethod
    def _freshen(path: str) -> bool:
        """An existing loose object gets a new mtime, as git's ``freshen_loose_object`` does, so a
        ``gc --prune`` running now does not take an object the commit being written will need."""
        try:
            os.utime(path)
            return True
        except OSError:
            return False

    def _create_tmp(self, subdir: str) -> tuple[int, str]:
        """git's ``create_tmpfile``: the fan-out folder is (re)made whenever it is missing."""
        for _ in range(_CREATE_ATTEMPTS):
            tmp = os.path.join(subdir, "tmp_obj_" + os.urandom(6).hex())
            try:
                return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444), tmp
            except FileNotFoundError:
                try:
                    os.mkdir(subdir, 0o777)
                except FileExistsError:
                    pass
                else:
                    adjust_shared_perm(subdir, self.shared)
        raise OSError(errno.ENOENT, "object folder keeps vanishing", subdir)

    def _write_file(self, subdir: str, path: str, body: bytes) -> None:
        fd, tmp = self._create_tmp(subdir)
        try:
            try:
                view = memoryview(body)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            # git's finalize_object_file: link, or rename where linking is not possible. The temporary
            # file keeps the folder non-empty, so prune-packed cannot remove it between here and there.
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        adjust_shared_perm(path, self.shared)

