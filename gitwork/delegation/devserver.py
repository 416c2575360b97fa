"""A minimal server for the delegation endpoints, until ``gw serve`` carries them.

``python -m gitwork.delegation.devserver REPO PORTFILE`` binds 127.0.0.1 on a free port, writes the
port number to PORTFILE once it listens, and serves ``app_for(REPO)``: a FastAPI app with the
delegation router only when a peer is configured (tests/test_delegation.py starts it).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any


def app_for(repo_path: str) -> Any:
    from fastapi import FastAPI

    from .peer_api import maybe_router

    app = FastAPI(title="gitwork peer")
    router = maybe_router(repo_path)
    if router is not None:
        app.include_router(router)
    return app


def main(argv: list[str]) -> int:
    import uvicorn

    repo, portfile = argv
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app_for(repo), log_level="warning", lifespan="off"))
    tmp = portfile + ".tmp"
    with open(tmp, "w") as out:
        out.write(str(sock.getsockname()[1]))
    os.replace(tmp, portfile)  # uvicorn listens on the bound socket from here; connects queue until it accepts
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
