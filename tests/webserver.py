"""A real deployment of the arbiter: Debian's nginx + fcgiwrap running git's own ``git http-backend``.

This is the set-up docs/deploy.md tells a team to run, started on 127.0.0.1 for the tests and the
benchmarks: :func:`nginx_conf` writes the very configuration the document explains. Nothing on the
machine is touched: the server lives under a private prefix (its own ``nginx.conf``, pid file, logs,
temp directories and fcgiwrap socket), listens on a free port and runs in foreground
(``daemon off``), not as a system service.

Both programs run in ONE process group of their own (a ``sh`` that starts ``fcgiwrap`` then execs
``nginx``), so :meth:`WebServer.stop` kills the nginx master and workers, fcgiwrap, and every
``git http-backend``/``receive-pack``/hook they are running with one ``killpg``, then checks that no
process of the group is left.

Who may push is decided at the web server, as it should be in a deployment: reads are anonymous,
``git-receive-pack`` (the push service, both its ``info/refs`` advertisement and the POST) needs HTTP
basic authentication against the prefix's ``htpasswd``. nginx sets ``REMOTE_USER``, which is also
what makes ``git http-backend`` enable receive-pack (no ``http.receivepack`` needed). ``url(name)``
carries the test user's credentials; ``anonymous_url(name)`` does not.

As root, nginx's workers would drop to ``nobody``; here they run as the invoking user (``user root``
when that is root) because fcgiwrap, git and the repositories all belong to that user. A real
deployment runs all three as one unprivileged user (docs/deploy.md).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon import accepts, commands, free_port, in_group

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
FCGIWRAP = shutil.which("fcgiwrap") or "/usr/sbin/fcgiwrap"
USER, PASSWORD = "agent", "push-secret"


def git_http_backend() -> str:
    """The path of git's CGI program (``git --exec-path``/git-http-backend)."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(exec_path, "git-http-backend")


def missing() -> str | None:
    """Why a web server cannot run here, or None. tests/system-packages.sh installs both on a CI machine."""
    absent = [name for name, path in (("nginx", NGINX), ("fcgiwrap", FCGIWRAP)) if not os.access(path, os.X_OK)]
    if absent:
        return (f"{' and '.join(absent)} not installed (Debian packages nginx-light, fcgiwrap; "
                "tests/system-packages.sh installs them when run as root)")
    if not os.access(git_http_backend(), os.X_OK):
        return f"{git_http_backend()} missing"
    return None


def api_conf(api: str | None) -> tuple[str, str]:
    """The command service's two parts of the configuration (docs/deploy.md, "The command service"):
    the upstream ``gw serve`` at ``api`` (``127.0.0.1:PORT``) and the location proxying ``/v1/`` to it.
    Empty without ``api``: the plain git arbiter."""
    if api is None:
        return "", ""
    upstream = f"""
    # The command service: gw serve on the arbiter's own repository, reached over kept-alive connections.
    upstream gitwork_api {{
        server {api};
        keepalive 64;
    }}
"""
    location = """
        # The REST API of gw serve (its bearer tokens are checked there, not here). 1 MiB passes every
        # body to gw serve, which answers one over 256 KiB itself (413, JSON); past 1 MiB nginx answers
        # the same JSON without reading it.
        location /v1/ {
            proxy_pass http://gitwork_api;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_buffering off;           # the event streams (/v1/events) go out as they come
            proxy_read_timeout 3600s;
            client_max_body_size 1m;
            error_page 413 = @too_large;
        }
        location @too_large {
            default_type application/json;
            return 413 '{"ok": false, "error": "too-large", "code": 5, "message": "the body is more than 1 MiB"}\\n';
        }
"""
    return upstream, location


def nginx_conf(*, prefix: Path, port: int, run_as: str | None, api: str | None = None) -> str:
    """The nginx configuration of the arbiter (docs/deploy.md explains it line by line); with ``api``
    (``HOST:PORT`` of ``gw serve`` on the arbiter's repository) also the command service's ``/v1/``."""
    user = f"user {run_as};\n" if run_as else ""
    upstream, api_location = api_conf(api)
    return f"""\
# gitwork arbiter: git smart HTTP through nginx -> fcgiwrap -> git http-backend
{user}daemon off;
worker_processes 2;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 512; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/tmp/body;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    proxy_temp_path {prefix}/tmp/proxy;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    # A push's pack can be large; git sends it chunked. No size limit, no buffering of git's answer.
    client_max_body_size 0;
    fastcgi_buffering off;
    fastcgi_read_timeout 600s;

    # Pushing is authenticated, reading is not: the push service is git-receive-pack, both in
    # GET .../info/refs?service=git-receive-pack and in POST .../git-receive-pack.
    map $arg_service $push_realm {{
        git-receive-pack "gitwork arbiter";
        default off;
    }}
{upstream}
    server {{
        listen 127.0.0.1:{port};
        server_name localhost;

        location ~ ^/[A-Za-z0-9._-]+\\.git/git-receive-pack$ {{
            auth_basic "gitwork arbiter";
            auth_basic_user_file {prefix}/htpasswd;
            include {prefix}/git-backend.conf;
        }}
        location ~ ^/[A-Za-z0-9._-]+\\.git/info/refs$ {{
            auth_basic $push_realm;
            auth_basic_user_file {prefix}/htpasswd;
            include {prefix}/git-backend.conf;
        }}
        location ~ ^/[A-Za-z0-9._-]+\\.git/(HEAD|git-upload-pack)$ {{
            include {prefix}/git-backend.conf;
        }}
{api_location}
        # Nothing else (no dumb-HTTP object files, no browsing of the repositories).
        location / {{ return 404; }}
    }}
}}
"""


def backend_conf(*, root: Path, socket: Path) -> str:
    """The FastCGI parameters git http-backend needs (git-http-backend(1)), shared by the locations."""
    return f"""\
fastcgi_pass unix:{socket};
fastcgi_param SCRIPT_FILENAME {git_http_backend()};
fastcgi_param GIT_PROJECT_ROOT {root};
fastcgi_param GIT_HTTP_EXPORT_ALL "";
fastcgi_param PATH_INFO $uri;
fastcgi_param REMOTE_USER $remote_user;
fastcgi_param REMOTE_ADDR $remote_addr;
fastcgi_param REQUEST_METHOD $request_method;
fastcgi_param QUERY_STRING $query_string;
fastcgi_param CONTENT_TYPE $content_type;
fastcgi_param CONTENT_LENGTH $content_length;
fastcgi_param SERVER_PROTOCOL $server_protocol;
fastcgi_param GATEWAY_INTERFACE CGI/1.1;
fastcgi_param HTTP_GIT_PROTOCOL $http_git_protocol;
"""


class WebServer:
    """nginx + fcgiwrap serving every bare repository under ``root`` (``url(name)`` for ``root/name.git``)."""

    def __init__(self, root: Path, *, workers: int = 4, api: str | None = None) -> None:
        self.root = Path(root)
        self.workers = workers  # fcgiwrap children: requests served at once
        self.api = api  # HOST:PORT of gw serve, proxied under /v1/ (the command service), or None
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.prefix = Path("/nonexistent")  # made by start(), removed by stop()

    def url(self, name: str) -> str:
        """The push URL (with the test user's credentials)."""
        assert self.port is not None, "server never started"
        return f"http://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{name}.git"

    def anonymous_url(self, name: str) -> str:
        assert self.port is not None, "server never started"
        return f"http://127.0.0.1:{self.port}/{name}.git"

    @property
    def log(self) -> Path:
        return self.prefix / "server.log"

    def _configure(self) -> None:
        # A private prefix per start; its fcgiwrap socket path must fit sockaddr_un (108 bytes), which
        # pytest's tmp paths may not.
        self.prefix = Path(tempfile.mkdtemp(prefix="gw-www-"))
        socket = self.prefix / "fcgiwrap.sock"
        (self.prefix / "tmp").mkdir(exist_ok=True)
        run_as = None
        if os.geteuid() == 0:
            run_as = "root root"  # else the workers become nobody, who cannot reach the socket
        (self.prefix / "nginx.conf").write_text(
            nginx_conf(prefix=self.prefix, port=self.port or 0, run_as=run_as, api=self.api))
        (self.prefix / "git-backend.conf").write_text(backend_conf(root=self.root, socket=socket))
        # nginx reads {PLAIN} passwords; a deployment uses `htpasswd -B` (bcrypt) instead.
        (self.prefix / "htpasswd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")

    def start(self, timeout: float = 20.0) -> None:
        assert self.proc is None, "server already running"
        deadline = time.monotonic() + timeout
        wanted = self.port  # a restart serves the same port again (TIME_WAIT: retry it); else any free one
        while True:
            self.port = wanted or free_port()
            self._configure()
            socket = self.prefix / "fcgiwrap.sock"
            script = ('"$1" -c "$2" -s "unix:$3" -p "$4" & '
                      'exec "$5" -p "$6" -c "$6/nginx.conf" -e "$6/error.log"')
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    ["sh", "-c", script, "sh", FCGIWRAP, str(self.workers), str(socket), git_http_backend(),
                     NGINX, str(self.prefix)],
                    stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
                    env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
                )
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break  # nginx could not bind (the port taken since we probed it, or TIME_WAIT): again
                if socket.exists() and accepts(self.port) and self.proc.poll() is None:
                    return  # ours answers (not someone else who took the port: then nginx has exited)
                time.sleep(0.05)
            else:
                logs = self._logs()
                self.stop()
                raise RuntimeError(f"nginx did not start: {logs}")
            logs = self._logs()
            self.stop()
            if time.monotonic() >= deadline:
                raise RuntimeError(f"nginx could not start: {logs}")
            time.sleep(0.1)

    def _logs(self) -> str:
        return "".join(path.read_text(errors="replace")[-2000:] for path in
                       (self.log, self.prefix / "error.log") if path.exists())

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the group start_new_session made: ours alone
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while left := in_group(proc.pid):
            # SIGKILL is not instant for a process in the middle of a system call: wait, never ignore.
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes left after stopping nginx: {commands([p for p, _ in left])}")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop nginx, fcgiwrap and every request they serve (the whole group; none of them is left), and
        remove the private prefix. :meth:`start` again serves the same port (the clones' URLs stay valid)."""
        self._kill()
        shutil.rmtree(self.prefix, ignore_errors=True)
        deadline = time.monotonic() + 5
        while self.port and accepts(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> WebServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class CommandService:
    """``gw serve`` on the arbiter's own bare repository: the command service of docs/deploy.md, which
    nginx proxies under ``/v1/`` (``WebServer(root, api=service.address)``).

    It runs as users run it (``gw serve --repo ARBITER --bind 127.0.0.1:0 --json``, this interpreter)
    in a process group of its own, stopped with one ``killpg`` like the web server. :meth:`token` adds
    a bearer token on the arbiter (``gw serve token add``), which the running server reads at once.
    """

    def __init__(self, repo: Path) -> None:
        self.repo = Path(repo)
        self.proc: subprocess.Popen[str] | None = None
        self.address: str | None = None  # 127.0.0.1:PORT once started

    def start(self, timeout: float = 60.0) -> str:
        import json
        import threading

        assert self.proc is None, "already running"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.proc = subprocess.Popen([sys.executable, "-m", "gitwork", "serve", "--repo", str(self.repo),
                                      "--bind", "127.0.0.1:0", "--json"], cwd=self.repo, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                                     start_new_session=True, env=env)
        assert self.proc.stdout is not None
        said: list[str] = []

        def read() -> None:  # the JSON object it prints once it listens (no select: stdout is buffered)
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                said.append(line)
                if line.startswith("}"):
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        text = "".join(said)
        if reader.is_alive() or not text.rstrip().endswith("}"):
            self.stop()
            raise RuntimeError(f"gw serve did not start: {text[-500:]!r}")
        self.address = json.loads(text)["url"].removeprefix("http://")
        return self.address

    def token(self, name: str, role: str = "agent") -> str:
        done = subprocess.run([sys.executable, "-m", "gitwork", "serve", "token", "add", name, "--role", role],
                              cwd=self.repo, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()  # uvicorn finishes the request in flight (a write between its objects and its CAS)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of its group (a git it started)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)

    def __enter__(self) -> CommandService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def served_repo(root: Path, name: str, *, server_hook: bool = True) -> Path:
    """A bare repository under ``root`` with gitwork's server hook (``gw hooks install --server``)."""
    path = Path(root) / f"{name}.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    if server_hook:
        # The real command a deployer runs, by this interpreter (the hook records it and PYTHONPATH).
        subprocess.run([sys.executable, "-m", "gitwork", "hooks", "install", "--server", str(path)],
                       check=True, capture_output=True)
    return path


def require() -> None:
    """Skip (with the reason) when nginx or fcgiwrap is not installed and cannot be: this is not root.
    As root, tests/system-packages.sh installs them (a fresh CI machine): missing there is a failure."""
    reason = missing()
    if reason and os.geteuid() == 0:
        pytest.fail(f"{reason}: run sh tests/system-packages.sh", pytrace=False)
    if reason:
        pytest.skip(f"{reason}; not root, so not installable here (sudo sh tests/system-packages.sh)")


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebServer]:
    """One running nginx + fcgiwrap per test module (starting one costs ~0.1 s; sharing keeps the suite short).

    Each test puts its own bare repositories under ``web_server.root`` with :func:`served_repo`."""
    require()
    root = tmp_path_factory.mktemp("www")
    server = WebServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
