"""Files written whole or not at all: the one temporary-file-then-rename in gitwork.

A reader of a file gitwork keeps (a token list, a queued command, an execution's handle, a session's
manifest) sees either the old version or the new one, never a mix, and never a half-written file
after a ``kill -9``. The way: write a temporary file beside the target, then ``rename`` it over the
target (atomic within one file system). Two details make it safe when writers race:

* the temporary name is unique to the writer (pid and random bytes) and created with ``O_EXCL``, so
  two writers never write into one temporary file (a fixed ``path + ".tmp"`` lets one writer rename
  the other's half-written file into place, or fail because its temporary file was renamed away);
* the temporary file is removed on any failure (full disk, a bad ``data``, an interrupt).

A temporary name starts with ``.`` and ends with ``.tmp`` (:func:`is_temp`): folder scans skip it. A
writer killed with ``kill -9`` between the create and the rename leaves its temporary file behind
(nothing can remove it); it never replaces the target.

Standard library only: ``launch/wrapper.py`` runs without gitwork on its path and loads this file by
its path.
"""

from __future__ import annotations

import os

_CHUNK = 1 << 20  # one write call per MiB: a large file is not one giant syscall
_ATTEMPTS = 16  # unique names collide only when a pid is reused with the same random bytes


def stamp(path: str) -> tuple[int, int, int] | None:
    """What tells a file changed: (mtime ns, size, inode), or None when it is not there. The inode
    counts because these files are replaced by rename (``write_atomic``), which can keep time and size."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def is_temp(name: str) -> bool:
    """Is ``name`` (a file's base name) a temporary file of :func:`write_atomic`?"""
    return name.startswith(".") and name.endswith(".tmp")


def _create_temp(path: str, mode: int | None) -> tuple[int, str]:
    folder, name = os.path.split(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(_ATTEMPTS):
        temp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            fd = os.open(temp, flags, 0o666 if mode is None else mode)
        except FileExistsError:
            continue
        if mode is not None:
            try:
                os.fchmod(fd, mode)  # exactly ``mode``: the umask takes bits away at create time
            except BaseException:
                os.close(fd)
                os.unlink(temp)
                raise
        return fd, temp
    raise FileExistsError(f"no free temporary name beside {path}")


def _write_temp(path: str, data: bytes | str, fsync: bool, mode: int | None) -> str:
    """A temporary file beside ``path`` holding ``data`` (fsynced when asked); its name."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    fd, temp = _create_temp(path, mode)
    try:
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view[:_CHUNK]):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        _remove(temp)
        raise
    return temp


def write_atomic(path: str, data: bytes | str, *, fsync: bool, mode: int | None = None) -> None:
    """Replace ``path`` by ``data`` (str: UTF-8) whole or not at all.

    ``fsync``: the file's bytes, then the folder's entry, reach the disk before this returns (a power
    loss keeps the new version); without it the write is atomic for readers and process crashes only.
    ``mode``: the file's exact permission bits from the moment it exists (``0o600`` for secrets, never
    readable by others even briefly); by default those ``open()`` gives (0666 less the umask).
    """
    temp = _write_temp(path, data, fsync, mode)
    try:
        os.replace(temp, path)
    except BaseException:
        _remove(temp)
        raise
    if fsync:
        sync_folder(os.path.dirname(path) or ".")


def write_new(path: str, data: bytes | str, *, mode: int | None = None) -> bool:
    """Create ``path`` holding ``data`` unless it exists: True if this call made it.

    The file appears whole (a temporary file linked into place): a racing reader never sees it empty,
    and of several racing writers exactly one wins; the others' data is dropped.
    """
    temp = _write_temp(path, data, False, mode)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        _remove(temp)
    return True


def sync_folder(folder: str) -> None:
    """fsync a folder, so a rename or a new entry in it survives a power loss."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(temp: str) -> None:
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass
