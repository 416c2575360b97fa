"""``gw run``'s hand-over to a resident launcher (``gw launcher``, ``resident.py``; docs/launch.md).

When this clone's launcher listens on its socket, ``gw run`` sends it the request (its words, working
folder and environment) and prints its answer, instead of importing gitwork and launching itself: the
launcher does the very same launch in its warm process. This module runs before anything else of gw
is imported, so it uses ``os``, ``sys`` and the C module ``_socket`` only (``socket`` itself builds
enums and imports selectors: milliseconds on the way to the agent), and asks git nothing: the clone's
common git dir is found by reading ``.git`` as git does.

``handoff`` answers ``None`` whenever the launcher cannot be used (no socket, nobody listening, an
unusual repository set-up, another build, a launcher that died mid-request): ``gw run`` then does what
it always did. A launcher killed during a launch leaves what a killed ``gw run`` leaves, and the
in-process ``gw run`` that follows is the retry that settles it (docs/launch.md, "A retry never starts
a second run").
"""

from __future__ import annotations

import os
import sys

SOCKET = "launcher.sock"
MAGIC = b"gw-launch-1"
FALLBACK = -1  # the launcher's answer "do it yourself" (another repository, another build, stopping)
SOCKET_MAX = 100  # sun_path is 108 bytes on Linux


def socket_path(common_dir: str) -> str:
    """``<git common dir>/gitwork/launcher.sock``, or a short path under /tmp when that one is too long."""
    path = os.path.join(common_dir, "gitwork", SOCKET)
    if len(os.fsencode(path)) <= SOCKET_MAX:
        return path
    from ..hashing import sha1_hex  # not hashlib: OpenSSL's load (and hashlib where _sha1 is missing)

    digest = sha1_hex(os.fsencode(os.path.abspath(common_dir)))[:16]
    return os.path.join("/tmp", f"gw-launcher-{os.getuid()}", f"{digest}.sock")


def common_dir(start: str) -> str | None:
    """The git common dir of the work tree ``start`` is in, read from ``.git`` (a folder, or a file
    naming the git dir, whose ``commondir`` names the common one), as git finds it; None for anything
    git's environment variables steer, a bare repository, or no repository."""
    if any(name in os.environ for name in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES",
                                           "GIT_DISCOVERY_ACROSS_FILESYSTEM")):
        return None
    folder = os.path.abspath(start)
    while True:
        dot = os.path.join(folder, ".git")
        if os.path.isdir(dot):
            git_dir = dot
            break
        if os.path.isfile(dot):
            try:
                with open(dot) as read:
                    text = read.read().strip()
            except OSError:
                return None
            if not text.startswith("gitdir: "):
                return None
            git_dir = os.path.join(folder, text[len("gitdir: "):])
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
    try:
        with open(os.path.join(git_dir, "commondir")) as read:
            return os.path.realpath(os.path.join(git_dir, read.read().strip()))
    except FileNotFoundError:
        return os.path.realpath(git_dir)
    except OSError:
        return None


def package() -> str:
    """This gw's package folder: a launcher of another installation is not this build."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def request(args: list[str], cwd: str, common: str) -> bytes:
    """The request: NUL-ended fields (no argument, path or environment entry holds a NUL), its length first."""
    fields = [MAGIC, os.fsencode(package()), os.fsencode(common), os.fsencode(cwd), b"%d" % len(args),
              *map(os.fsencode, args), *(k + b"=" + v for k, v in os.environb.items())]
    body = b"".join(field + b"\0" for field in fields)
    return b"%d\n" % len(body) + body


def handoff(args: list[str]) -> int | None:
    """Hand ``gw run ARGS...`` (``args`` starts with ``run``) to this clone's launcher: its exit code, its
    output printed; None when there is no launcher to hand it to (then ``gw run`` launches itself)."""
    words = args[:args.index("--")] if "--" in args else args
    if any(w in ("--help", "-h") or w.startswith("-C") for w in words) or os.environ.get("GW_LAUNCHER") == "off":
        return None
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    common = common_dir(cwd)
    if common is None:
        return None
    path = socket_path(common)
    if not os.path.exists(path):
        return None
    import _socket  # type: ignore[import-not-found]  # the C module (see the module's docstring)

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
            # The request carries the caller's whole environment: only to a launcher of this very user
            # (the socket's mode says so; the kernel's word on the peer says it again, wherever it lives).
            peer = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        except OSError:
            return None  # nobody listens (a launcher that died): nothing was handed over
        if int.from_bytes(peer[4:8], sys.byteorder) != os.getuid():
            return None
        try:
            sock.sendall(request(args, cwd, common))
            reply = _read_all(sock)
        except OSError:
            reply = b""
        except KeyboardInterrupt:  # as gw run's own Ctrl-C: 130, one line; the launch goes on in the launcher
            sys.stderr.write("gw: interrupted (the launcher goes on with the launch: gw run again to see it)\n")
            return 130
    finally:
        sock.close()
    # The answer: "CODE\0OUTLEN\0ERRLEN\0" and the two outputs. Anything short of it (the launcher died
    # mid-request) is no answer: gw run then runs as a retry would, and settles what the launcher left.
    head = reply.split(b"\0", 3)
    if len(head) != 4 or not all(part.lstrip(b"-").isdigit() for part in head[:3]):
        return None
    code, out_len, err_len = int(head[0]), int(head[1]), int(head[2])
    if code == FALLBACK or len(head[3]) != out_len + err_len:
        return None
    _write(1, head[3][:out_len])
    _write(2, head[3][out_len:])
    return code


def _read_all(sock: object) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = sock.recv(65536)  # type: ignore[attr-defined]
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _write(fd: int, data: bytes) -> None:
    sys.stdout.flush() if fd == 1 else sys.stderr.flush()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
