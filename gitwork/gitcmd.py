"""The one place that runs the git binary.

Every call goes through :func:`run` (or :func:`run_through_files`, its twin for a large input and
output), which reports the command, exit code and both streams when git
fails, so no caller formats git failures by hand (:func:`start` is the one exception: a detached git
nobody waits for). ``git cat-file --batch`` output is read by one parser (:func:`parse_header`, then
the content and its LF), whether from :class:`CatFile`, which keeps one process per repository for
all reads of a command, or from :func:`read_batch`, which asks for many objects at once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from .errors import GitFailed

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any

# Git must never stop to ask a person anything, nor page, nor localise the messages we parse.
_QUIET_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "LC_ALL": "C", "LANGUAGE": "C"}


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(_QUIET_ENV)
    if extra:
        env.update(extra)
    return env


class Completed:
    """What a git run produced (a plain class: dataclasses cost ~25 ms of start-up)."""

    __slots__ = ("args", "returncode", "stdout", "stderr")

    def __init__(self, args: tuple[str, ...], returncode: int, stdout: bytes, stderr: bytes) -> None:
        self.args, self.returncode, self.stdout, self.stderr = args, returncode, stdout, stderr

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace").strip()


def one_line(text: str) -> str:
    """git's (possibly several) lines of stderr as one line: every error gw prints is one line."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


class TimedOut(GitFailed):
    """A git run went past its ``timeout`` (git was killed): the caller says what that means."""


def run(
    args: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    keep: int | None = None,
) -> Completed:
    """Run ``git *args``; raise :class:`GitFailed` (with cmd, rc, output) unless ``check`` is off.

    A run past ``timeout`` raises :class:`TimedOut` (a :class:`GitFailed`). ``keep``: git talks to a
    server whose output is not ours to bound (a hook's stderr, relayed): only the first and the last
    ``keep`` bytes of each stream are kept, with a mark where the middle went, and stdin is closed.
    """
    cmd = ("git", *args)
    try:
        if keep is not None:
            import subprocess

            try:
                returncode, stdout, stderr = _run_kept(cmd, keep, timeout, cwd, git_env(env))
            except subprocess.TimeoutExpired as exc:
                raise TimedOut(f"git {' '.join(args)} timed out after {timeout}s", cmd=list(cmd)) from exc
        elif input is None and timeout is None and _SPAWN and (cwd is None or os.path.isdir(cwd)):
            # A cwd as ``git -C``, which changes to it first just as subprocess's cwd does (a folder
            # that is not one takes subprocess's way and its error): the server hook's repository
            # discovery is one such run, and subprocess costs it more start-up than the git it runs.
            spawned = cmd if cwd is None else ("git", "-C", os.fspath(cwd), *args)
            returncode, stdout, stderr = _spawn(spawned, git_env(env))
        else:
            import subprocess

            try:
                proc = subprocess.run(cmd, cwd=cwd, input=input, capture_output=True, env=git_env(env),
                                      timeout=timeout, check=False)
            except subprocess.TimeoutExpired as exc:
                raise TimedOut(f"git {' '.join(args)} timed out after {timeout}s", cmd=list(cmd)) from exc
            returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except FileNotFoundError as exc:  # no git binary at all
        raise GitFailed("git is not installed or not on PATH") from exc
    done = Completed(tuple(cmd), returncode, stdout, stderr)
    if check and returncode != 0:
        raise GitFailed(
            f"git {' '.join(args)} failed (exit {returncode}): {one_line(done.err or done.out)}",
            cmd=list(cmd),
            returncode=returncode,
            stdout=done.out,
            stderr=done.err,
        )
    return done


# os.posix_spawn and /proc/self/fd (to close inherited descriptors, as subprocess's close_fds does).
_SPAWN = hasattr(os, "posix_spawn") and os.path.isdir("/proc/self/fd")


def _close_inherited(keep: tuple[int, ...] = ()) -> list[tuple[Any, ...]]:
    """The spawn actions that close every inheritable descriptor above 2 but ``keep``: an inherited
    descriptor must not outlive us in git's hooks (subprocess's ``close_fds``)."""
    actions: list[tuple[Any, ...]] = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                if os.get_inheritable(fd):
                    actions.append((os.POSIX_SPAWN_CLOSE, fd))
            except OSError:
                pass  # the descriptor listdir itself used, closed since
    return actions


def _spawn(cmd: tuple[str, ...], env: dict[str, str], *, timeout: float | None = None,
           no_stdin: bool = False) -> tuple[int, bytes, bytes]:
    """``cmd`` run as ``subprocess.run(cmd, capture_output=True, env=env)`` runs it (stdin inherited,
    both streams read to their end, descriptors other than 0-2 closed, SIGPIPE and SIGXFSZ back to
    their defaults), through ``os.posix_spawn``: importing subprocess (threading, locale, selectors)
    costs a one-commit ``gw claim`` more start-up than the one ``git update-ref`` it runs.
    ``no_stdin``: stdin from /dev/null. Past ``timeout`` seconds the process is killed and
    ``subprocess.TimeoutExpired`` raised, as ``subprocess.run`` does (subprocess imported only then)."""
    import select

    program = _program(cmd[0], env)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    if no_stdin:
        actions.append((os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0))
    actions += _close_inherited((out_r, out_w, err_r, err_w))
    try:
        pid = os.posix_spawn(program, cmd, env, file_actions=actions,
                             setsigdef=_default_signals())
    finally:
        os.close(out_w)
        os.close(err_w)
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    left = set(chunks)
    deadline = None if timeout is None else _monotonic() + timeout
    killed = False
    try:
        while left:
            wait = None if deadline is None else max(0.0, deadline - _monotonic())
            ready = poller.poll(None if wait is None else int(wait * 1000) + 1)
            if not ready and deadline is not None and _monotonic() >= deadline:
                os.kill(pid, _signals().SIGKILL)
                killed = True
                break
            for fd, _events in ready:
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    left.discard(fd)
    finally:
        os.close(out_r)
        os.close(err_r)
        _pid, status = os.waitpid(pid, 0)
    if killed:
        import subprocess

        raise subprocess.TimeoutExpired(cmd, timeout or 0.0, b"".join(chunks[out_r]), b"".join(chunks[err_r]))
    return os.waitstatus_to_exitcode(status), b"".join(chunks[out_r]), b"".join(chunks[err_r])


def _monotonic() -> float:
    import time

    return time.monotonic()


class _Kept:
    """The first and the last ``most`` bytes of a stream, with a mark where the middle went."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.most - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.most:
            self.dropped += len(self.tail) - self.most
            del self.tail[: len(self.tail) - self.most]

    def value(self) -> bytes:
        middle = b"\n[... %d bytes left out ...]\n" % self.dropped if self.dropped else b""
        return bytes(self.head) + middle + bytes(self.tail)


def _run_kept(cmd: tuple[str, ...], most: int, timeout: float | None, cwd: str | os.PathLike[str] | None,
              env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Run ``cmd`` keeping only the ends of each stream; kill it and raise ``TimeoutExpired`` past ``timeout``."""
    import selectors
    import subprocess
    import time

    proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env)
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Kept(most), _Kept(most)
    kept = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
    with proc, selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                raise subprocess.TimeoutExpired(cmd, timeout or 0.0)
            for key, _events in selector.select(None if left == float("inf") else left):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    kept[key.fd].add(chunk)
                else:
                    selector.unregister(key.fileobj)
        try:
            proc.wait(timeout=None if timeout is None else max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    return proc.returncode, out.value(), err.value()


def run_tool(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float | None = None,
             input: bytes | None = None) -> Completed:
    """Run another program (``tmux``, ``ssh-keygen``) as git is run: output captured, no stdin unless
    ``input`` is given; the exit status is the caller's to judge. ``FileNotFoundError`` (no such
    program) and ``subprocess.TimeoutExpired`` propagate. Without ``input``, through ``os.posix_spawn``
    (``_spawn``): ``gw run``'s tmux calls need no subprocess module on the way to the agent."""
    if input is None and _SPAWN:
        code, out, err = _spawn(tuple(cmd), dict(os.environ if env is None else env), timeout=timeout,
                                no_stdin=True)
        return Completed(tuple(cmd), code, out, err)
    import subprocess

    if input is not None:
        proc = subprocess.run(tuple(cmd), capture_output=True, env=env, timeout=timeout, input=input)
    else:
        proc = subprocess.run(tuple(cmd), capture_output=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    return Completed(tuple(cmd), proc.returncode, proc.stdout, proc.stderr)


def start(args: Sequence[str], *, cwd: str | os.PathLike[str] | None = None) -> bool:
    """Start ``git *args`` detached (its own session, no streams) and do not wait: housekeeping a
    command must never wait for (``gc --auto``). False when git cannot be started.

    Through ``os.posix_spawn`` of ``sh``, which puts git in the background and exits at once (reaped
    here, so no zombie is left in a long-lived ``gw serve``; git's parent becomes init): a command
    that draws the housekeeping lot must not import subprocess on its way (``gw run`` to its agent)."""
    if _SPAWN and cwd is None:
        null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
        try:
            pid = os.posix_spawn("/bin/sh", ("sh", "-c", '"$@" &', "sh", "git", *args), git_env(),
                                 file_actions=null + _close_inherited(), setsid=True)
            os.waitpid(pid, 0)
        except OSError:
            return False
        return True
    import subprocess

    try:
        subprocess.Popen(("git", *args), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=git_env(), start_new_session=True)
    except OSError:
        return False
    return True


# --- git cat-file --batch ----------------------------------------------------------------------------

_KINDS = frozenset((b"blob", b"tree", b"commit", b"tag"))
_HEX = frozenset(b"0123456789abcdef")


def parse_header(line: bytes, name: str) -> tuple[str, str, int] | None:
    """One header line of ``cat-file --batch`` output (its LF removed), asked for ``name``:
    ``(oid, type, size)``, or None for ``<name> missing`` / ``<name> ambiguous``. Anything else is not
    what git writes (a git that died, or a protocol we do not know): :class:`GitFailed`, never a guess.

    A found object's header names its id, never the name asked for; so a name with spaces cannot
    pass for a header, and a missing one is recognised by its last word alone."""
    parts = line.split(b" ")
    if (len(parts) == 3 and len(parts[0]) in (40, 64) and _HEX.issuperset(parts[0]) and parts[1] in _KINDS
            and parts[2].isdigit()):
        return parts[0].decode(), parts[1].decode(), int(parts[2])
    if len(parts) >= 2 and parts[-1] in (b"missing", b"ambiguous"):
        return None
    shown = line[:80].decode("utf-8", "replace")
    raise GitFailed(f"git cat-file --batch answered {name[:80]!r} with {shown!r}, not an object header")


def close_pipes(proc: Any) -> None:
    """Close a reader's stdin and stdout, whatever state its process is in (a pipe already broken by
    its end is no error here: the caller reaps the process next)."""
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def _died(name: str, err: bytes = b"") -> GitFailed:
    said = one_line(err.decode("utf-8", "replace"))
    return GitFailed(f"git cat-file --batch exited while reading {name[:80]!r}" + (f": {said}" if said else ""))


def read_batch(git_dir: str, names: Sequence[str]) -> dict[str, tuple[str, str, bytes]]:
    """``{name: (oid, type, content)}`` of the ``names`` (ids or ``rev:path``) that exist, by one
    ``git cat-file --batch`` fed every name at once (buffered: no round trip per object). A git that
    fails or dies part way raises :class:`GitFailed` with its own words: a caller never gets a torn
    object, nor a missing one that was merely unread."""
    names = [name for name in names if "\n" not in name]  # a name with a newline names nothing
    if not names:
        return {}
    done = run_through_files(["--git-dir", git_dir, "cat-file", "--batch", "--buffer"],
                             "".join(f"{name}\n" for name in names).encode())
    spans: list[tuple[str, str, str, int, int]] = []
    count = cut_answers(done.stdout, names, 0, 0, spans, done.stderr)[1]
    if count < len(names) or done.returncode != 0:
        raise _died(names[min(count, len(names) - 1)], done.stderr)
    out = done.stdout
    return {name: (oid, kind, out[start:end]) for name, oid, kind, start, end in spans}


def cut_answers(out: bytes | bytearray, names: Sequence[str], at: int, count: int,
                spans: list[tuple[str, str, str, int, int]], err: bytes = b"") -> tuple[int, int]:
    """The one parser of ``cat-file --batch`` answers: from ``at`` in ``out``, the complete answers to
    ``names[count:]`` appended to ``spans`` as ``(name, oid, type, start, end)`` of their content (a
    missing object: none); returns the position and count reached (an answer cut short stops there).
    Content not followed by its LF is not git's answer: :class:`GitFailed` (``err``: git's words)."""
    while count < len(names):
        end = out.find(b"\n", at)
        if end < 0:
            break
        name = names[count]
        line = bytes(out[at:end])
        # The usual answer to a full object id, ``<that id> <type> <size>``, checked without
        # parse_header's general tests (a rebuild reads 200,000 headers); anything else goes there.
        parts = line.split(b" ")
        if (len(parts) == 3 and len(parts[0]) in (40, 64) and parts[0] == name.encode() and parts[1] in _KINDS
                and parts[2].isdigit()):
            header: tuple[str, str, int] | None = (name, parts[1].decode(), int(parts[2]))
        else:
            header = parse_header(line, name)
        if header is None:
            at, count = end + 1, count + 1
            continue
        body_end = end + 1 + header[2]
        if len(out) <= body_end:
            break
        if out[body_end] != 10:  # content, then one LF: anything else means git died inside
            raise _died(name, err)
        spans.append((name, header[0], header[1], end + 1, body_end))
        at, count = body_end + 1, count + 1
    return at, count


def start_batch(git_dir: str, err: int) -> subprocess.Popen[bytes]:
    """A long-lived ``git cat-file --batch-command --buffer`` (git 2.36+), stderr to ``err``: for
    ``cachefill.Batch``, which reads many batches of objects through one git."""
    import subprocess

    try:
        return subprocess.Popen(("git", "--git-dir", git_dir, "cat-file", "--batch-command", "--buffer"),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=git_env())
    except FileNotFoundError as exc:
        raise GitFailed("git is not installed or not on PATH") from exc


def run_through_files(args: Sequence[str], input: bytes) -> Completed:
    """``git *args`` fed ``input``, its output read whole: like :func:`run` with ``input`` and
    ``check=False``, but every stream a file in memory rather than a pipe, so git runs to its end
    without waiting on this process and the output is read in one piece, not polled and read in
    32 KiB slices (at 30 MB, a tenth of a rebuild's CPU went there)."""
    import subprocess

    fds: list[int] = []
    try:
        for _stream in ("in", "out", "err"):
            fds.append(_memory_file())
        _write_all(fds[0], input)
        os.lseek(fds[0], 0, os.SEEK_SET)
        cmd = ("git", *args)
        try:
            code = subprocess.run(cmd, stdin=fds[0], stdout=fds[1], stderr=fds[2], env=git_env(),
                                  check=False).returncode
        except FileNotFoundError as exc:
            raise GitFailed("git is not installed or not on PATH") from exc
        out, err = (_read_all(fd) for fd in fds[1:])
        return Completed(cmd, code, out, err)
    finally:
        for fd in fds:
            os.close(fd)


def _memory_file() -> int:
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        return int(memfd("gw-git", os.MFD_CLOEXEC))
    import tempfile

    with tempfile.TemporaryFile() as handle:  # (no memfd: an unlinked file, its descriptor kept)
        return os.dup(handle.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    size = os.lseek(fd, 0, os.SEEK_END)
    parts, at = [], 0
    while at < size:
        part = os.pread(fd, size - at, at)
        if not part:
            break
        parts.append(part)
        at += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_sizes(git_dir: str, names: Sequence[str]) -> dict[str, tuple[str, int]]:
    """``{name: (type, size)}`` of the ``names`` that exist, by one ``git cat-file --batch-check``: what
    an object is before anything reads it (the arbiter bounds an inbox push by it). Parsed as
    :func:`read_batch` parses: a line git would not write is :class:`GitFailed`, never a guess."""
    names = [name for name in names if "\n" not in name]
    if not names:
        return {}
    done = run(["--git-dir", git_dir, "cat-file", "--batch-check", "--buffer"],
               input="".join(f"{name}\n" for name in names).encode(), check=False)
    lines = done.stdout.split(b"\n")
    found: dict[str, tuple[str, int]] = {}
    for number, name in enumerate(names):
        if number >= len(lines) or (number == len(lines) - 1 and not lines[number]):
            raise _died(name, done.stderr)
        header = parse_header(lines[number], name)
        if header is not None:
            found[name] = (header[1], header[2])
    if done.returncode != 0:
        raise _died(names[-1], done.stderr)
    return found


# Readers let go while git still ran (its stdin just closed): reaped when the next one starts, as
# subprocess keeps its own (``_active``), else a long-lived process (``gw serve``) gathers zombies.
_UNREAPED: list[int] = []


def _reap_dropped() -> None:
    for pid in list(_UNREAPED):
        try:
            done = os.waitpid(pid, os.WNOHANG)[0]
        except ChildProcessError:
            done = pid  # (reaped elsewhere)
        if done:
            _UNREAPED.remove(pid)


class _Child:
    """A ``git cat-file --batch`` started with ``os.posix_spawn``: the part of ``subprocess.Popen`` that
    :class:`CatFile` (and the suite's leak check) use. Importing subprocess costs a server hook ~5 ms of
    its ~40 (threading, selectors, locale, signal's enums), more than the reader it would start."""

    def __init__(self, cmd: tuple[str, ...], env: dict[str, str], err: int | None) -> None:
        if _UNREAPED:
            _reap_dropped()
        program = _program(cmd[0], env)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1)]
        actions.append((os.POSIX_SPAWN_DUP2, err, 2) if err is not None
                       else (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0))
        actions += _close_inherited((in_r, in_w, out_r, out_w) + ((err,) if err is not None else ()))
        try:
            self.pid = os.posix_spawn(program, cmd, env, file_actions=actions,
                                      setsigdef=_default_signals())
        except BaseException:
            os.close(in_w)
            os.close(out_r)
            raise
        finally:
            os.close(in_r)
            os.close(out_w)
        self.stdin = open(in_w, "wb")  # noqa: SIM115 - closed by CatFile.close (EOF ends the reader)
        self.stdout = open(out_r, "rb")  # noqa: SIM115 - closed with the object
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; past ``timeout`` seconds :class:`TimeoutError` (the child left running)."""
        if self.returncode is None and timeout is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        deadline = None if timeout is None else _monotonic() + timeout
        delay = 0.0005  # git ends within a millisecond of its stdin closing: poll soon, then back off
        while self.poll() is None:
            if deadline is not None and _monotonic() >= deadline:
                raise TimeoutError(f"git cat-file (pid {self.pid}) still running after {timeout}s")
            import time

            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, 9)  # SIGKILL
            except ProcessLookupError:
                pass

    def __del__(self) -> None:
        for stream in (getattr(self, "stdin", None), getattr(self, "stdout", None)):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if getattr(self, "returncode", 0) is None:
            try:
                if self.poll() is None:  # reap it if it has ended, else when the next reader starts
                    _UNREAPED.append(self.pid)
            except OSError:
                pass


def _signals() -> Any:
    """The signal module without its enums (the C module: 1 ms less start-up than ``signal``)."""
    try:
        import _signal as signal  # type: ignore[import-not-found]
    except ImportError:
        import signal  # type: ignore[no-redef]
    return signal


def _default_signals() -> tuple[int, int]:
    """The signals a spawned git gets back at their defaults (Python ignores SIGPIPE and SIGXFSZ)."""
    signal = _signals()
    return (signal.SIGPIPE, signal.SIGXFSZ)


def _program(name: str, env: Mapping[str, str]) -> str:
    """``name`` looked up on ``env``'s PATH as subprocess does (``FileNotFoundError`` if absent)."""
    program = next((p for p in (os.path.join(d, name) for d in os.get_exec_path(env))
                    if os.access(p, os.X_OK) and not os.path.isdir(p)), None)
    if program is None:
        raise FileNotFoundError(name)
    return program


class CatFile:
    """A long-lived ``git cat-file --batch`` reader; objects by id or by ``rev:path``."""

    def __init__(self, git_dir: str) -> None:
        self._git_dir = git_dir
        self._proc: _Child | subprocess.Popen[bytes] | None = None
        self._err: int | None = None  # git's stderr: a file in memory, read only when git dies

    def _start(self) -> _Child | subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._drop_err()
            # Not a pipe: a long-lived reader nobody drains would block on a full one.
            memfd = getattr(os, "memfd_create", None)
            self._err = memfd("gw-cat-file", os.MFD_CLOEXEC) if memfd is not None else None
            cmd = ("git", "--git-dir", self._git_dir, "cat-file", "--batch")
            try:
                if _SPAWN:
                    self._proc = _Child(cmd, git_env(), self._err)
                    return self._proc
                import subprocess

                self._proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL if self._err is None else self._err,
                    env=git_env(),
                )
            except FileNotFoundError as exc:  # no git binary at all: said as run() says it
                self._proc = None
                self._drop_err()
                raise GitFailed("git is not installed or not on PATH") from exc
        return self._proc

    def _drop_err(self) -> bytes:
        """What git wrote on stderr (its last 64 KiB at most); the file is closed."""
        fd, self._err = self._err, None
        if fd is None:
            return b""
        try:
            size = os.fstat(fd).st_size
            return os.pread(fd, 65536, max(0, size - 65536))
        except OSError:
            return b""
        finally:
            os.close(fd)

    def get(self, name: str) -> tuple[str, str, bytes] | None:
        """Return ``(oid, type, content)`` or ``None`` when the object does not exist.

        A git that dies (here or part way through an object) raises :class:`GitFailed` with what it
        said; the next call starts a new one."""
        if "\n" in name:
            raise ValueError("object name contains a newline")
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(name.encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            raise self._gone(name) from None
        line = proc.stdout.readline()
        if not line.endswith(b"\n"):
            raise self._gone(name)
        header = parse_header(line[:-1], name)
        if header is None:
            return None
        oid, kind, size = header
        data = proc.stdout.read(size + 1)  # content, then one LF
        if len(data) != size + 1 or data[-1:] != b"\n":
            raise self._gone(name)
        return oid, kind, data[:-1]

    def _gone(self, name: str) -> GitFailed:
        """The reader died: what it said, and it is dropped (the next read starts another)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            close_pipes(proc)
            proc.wait()
        return _died(name, self._drop_err())

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if isinstance(proc, _Child):
            if proc.poll() is None:
                try:
                    proc.stdin.close()
                    proc.wait(timeout=5)
                except OSError:  # TimeoutError included
                    proc.kill()
                    proc.wait()
        elif proc is not None and proc.poll() is None:
            import subprocess

            assert proc.stdin is not None
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()  # reaped here, as the posix_spawn path does: no zombie left for a checker to see
        self._drop_err()
