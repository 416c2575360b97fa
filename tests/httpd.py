"""A real smart-HTTP git server on 127.0.0.1: ``git http-backend`` behind Python's ``http.server``.

The server runs as its own process (``python httpd.py ROOT PORTFILE [PORT]``) in its own process
group, like :mod:`daemon`'s ``git daemon``: stopping it kills the listener *and* every
``http-backend``/``receive-pack``/hook it is running, so a push in flight dies with it (the
"server went away mid-push" tests need exactly that). It binds port 0 the first time and reports the
port it got; :meth:`GitHTTPServer.restart` binds the same port again so the URL recorded in the
clones stays valid across an outage.

The CGI glue is the documented one (git-http-backend(1)): GIT_PROJECT_ROOT, GIT_HTTP_EXPORT_ALL,
PATH_INFO, REQUEST_METHOD, CONTENT_TYPE, QUERY_STRING, CONTENT_LENGTH, REMOTE_ADDR, plus the request
headers git's client sends (``Content-Encoding: gzip``, ``Git-Protocol``) and chunked request bodies.
A hostile server is one file away: while ``ROOT/answer`` exists, every request gets its canned answer.
Pushes need ``http.receivepack=true`` in the served bare repository (:func:`served_repo`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon import accepts


class GitHTTPServer:
    """Serves every bare repository under ``root``; ``url(name)`` for ``root/name.git``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "httpd.log"

    def url(self, name: str) -> str:
        assert self.port is not None, "server never started"
        return f"http://127.0.0.1:{self.port}/{name}.git"

    def start(self, timeout: float = 20.0) -> None:
        assert self.proc is None, "server already running"
        port_file = self.root / f"httpd-{os.getpid()}-{time.monotonic_ns()}.port"
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, __file__, str(self.root), str(port_file), str(self.port or 0)],
                    stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                )
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break  # could not bind (the old port still in use): try again
                if port_file.exists() and port_file.read_text().strip():
                    self.port = int(port_file.read_text())
                    port_file.unlink()
                    if accepts(self.port):
                        return
                time.sleep(0.05)
            else:
                self.stop()
                raise RuntimeError(f"http server did not start: {self.log.read_text()[-2000:]}")
            self.proc = None
            if time.monotonic() >= deadline:
                raise RuntimeError(f"http server could not bind: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the server and every request it is serving (its whole process group)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group start_new_session made: ours alone
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while self.port and accepts(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> GitHTTPServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def served_repo(root: Path, name: str) -> Path:
    """A bare repository under ``root`` that accepts pushes over smart HTTP."""
    path = Path(root) / f"{name}.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    subprocess.run(["git", "--git-dir", str(path), "config", "http.receivepack", "true"], check=True)
    return path


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[GitHTTPServer]:
    """A running smart-HTTP server over ``tmp_path/http`` (put repos there with :func:`served_repo`)."""
    root = tmp_path / "http"
    root.mkdir()
    server = GitHTTPServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- the server process -----------------------------------------------------------------------------


def _serve(root: str, port_file: str, port: int) -> None:
    import shutil
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: a stopped server drops it at once

        def do_GET(self) -> None:
            self._cgi()

        def do_POST(self) -> None:
            self._cgi()

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _canned(self) -> bool:
            """Answer from ``ROOT/answer`` if it exists: a first line "STATUS CONTENT-TYPE", then the body."""
            try:
                with open(os.path.join(root, "answer"), "rb") as handle:
                    head, _, body = handle.read().partition(b"\n")
            except FileNotFoundError:
                return False
            status, _, content_type = head.decode().partition(" ")
            self.send_response(int(status))
            self.send_header("Content-Type", content_type or "text/plain")
            if int(status) == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="gitwork tests"')
            self.end_headers()
            self.wfile.write(body)
            return True

        def _cgi(self) -> None:
            if self._canned():
                return
            path, _, query = self.path.partition("?")
            body = self._body() if self.command == "POST" else b""
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", root),
                "GIT_PROJECT_ROOT": root, "GIT_HTTP_EXPORT_ALL": "1", "GATEWAY_INTERFACE": "CGI/1.1",
                "PATH_INFO": path, "REQUEST_METHOD": self.command, "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
                "REMOTE_ADDR": self.client_address[0], "REMOTE_USER": "tester",
                "SERVER_PROTOCOL": "HTTP/1.0", "GIT_CONFIG_NOSYSTEM": "1",
            }
            for header, var in (("Content-Encoding", "HTTP_CONTENT_ENCODING"), ("Git-Protocol", "HTTP_GIT_PROTOCOL")):
                if self.headers.get(header):
                    env[var] = self.headers[header]
            backend = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env)
            head, _, payload = backend.stdout.partition(b"\r\n\r\n")
            if not _ and b"\n\n" in backend.stdout:
                head, _, payload = backend.stdout.partition(b"\n\n")
            status, headers = 200, []
            for line in head.decode("latin-1").splitlines():
                name, _sep, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name.strip(), value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            sys.stderr.write("httpd: " + (format % args) + "\n")

    assert shutil.which("git"), "git not on PATH"
    ThreadingHTTPServer.allow_reuse_address = True
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    temporary = port_file + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(str(server.server_address[1]))
    os.replace(temporary, port_file)
    server.serve_forever()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], int(sys.argv[3]))
