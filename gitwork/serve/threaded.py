"""Run an application on a free port in a background thread, and stop it (tests, benchmarks, embedding).

The socket is bound to port 0 before uvicorn starts, so two of these never race for a port (xdist),
and :meth:`Running.stop` waits for the thread: nothing is left listening.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (port 0: a free one), for uvicorn's ``sockets=``.

    Created with ``IPPROTO_TCP`` spelled out: asyncio sets ``TCP_NODELAY`` only on sockets whose
    ``proto`` says TCP, and accepted sockets inherit it. Without it every keep-alive response waits
    for the client's delayed ACK (Nagle): 40 ms a request, measured (benchmarks/bench_serve.py).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening now, before uvicorn starts: a client told the address (gw serve --json) may connect at
    # once and waits in the backlog instead of being refused.
    sock.listen(2048)
    return sock


class Running:
    """``with Running(app) as url:`` serves ``app`` on ``url`` (``http://127.0.0.1:PORT``) for the block."""

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        self.sock = bound_socket(host, 0)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1,
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self, timeout: float = 20) -> str:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:  # bounded poll: uvicorn says when it listens
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True  # open event streams are cut after timeout_graceful_shutdown
        self.thread.join(10)
        self.sock.close()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
