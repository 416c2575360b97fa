"""Two peers delegating over ``gw serve``: clone 0 is the laptop (the sender), the last clone the gpu box
(the peer, running the harness agent on the subprocess backend for what it accepts), with real
ssh-keygen keys and local git config, as tests/test_delegation.py sets them up. The peer's server is a
registered process the faults can kill; it is started again when it died.
"""

from __future__ import annotations

import subprocess
from typing import Any

from conftest import git
from test_signing import keygen

from .actors import Actor, read_announcement
from .world import Proc, gw_argv

ALLOW = "plan,test,start,observe,cancel"


class Delegator(Actor):
    kind = "delegate"

    def __init__(self, *args: Any, ttl: str = "10s", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ttl = ttl
        self.sender, self.peer = 0, len(self.world.clones) - 1
        self.proc: Proc | None = None
        keys = self.world.root / "keys"
        keys.mkdir(exist_ok=True)
        self.keys = {name: keygen(keys / name) for name in ("laptop", "gpu")}
        peer, sender = self.world.clones[self.peer], self.world.clones[self.sender]
        for key, value in (("gitwork.signingKey", self.keys["gpu"][0]), ("gitwork.agent", "gpu-box"),
                           ("gitwork.peer.laptop.key", self.keys["laptop"][1]), ("gitwork.peer.laptop.allow", ALLOW),
                           ("gitwork.delegation.command", str(self.world.agent)),
                           ("gitwork.delegation.backend", "subprocess")):
            git(peer, "config", key, value)
        for key, value in (("gitwork.signingKey", self.keys["laptop"][0]),
                           ("gitwork.peer.gpu.key", self.keys["gpu"][1]), ("gitwork.peer.gpu.allow", ALLOW)):
            git(sender, "config", key, value)

    def serve(self) -> None:
        self.proc = self.world.procs.spawn(f"peer-serve{self.peer}", "serve",
                                           gw_argv("serve", "--bind", "127.0.0.1:0", "--json"),
                                           self.world.clones[self.peer], clone=self.peer, stdout=subprocess.PIPE)
        url = str(read_announcement(self.proc)["url"])
        git(self.world.clones[self.sender], "config", "gitwork.peer.gpu.url", url)

    def step(self) -> None:
        if self.proc is None or not self.proc.alive:
            try:
                self.serve()
            except (RuntimeError, OSError, ValueError, KeyError) as error:
                self.ledger.log(f"delegate: the peer's gw serve did not start: {error!r}")
                return
        item = self.rng.choice(list(self.world.agent_items))
        code, doc, err = self.gw(self.sender, "delegate", item, "--to", "gpu", "--ttl", self.ttl, "--as", "alice",
                                 kind="cli")
        self.ledger.count(f"delegate:{code}")
        if code == 0 and isinstance(doc, dict) and isinstance(doc.get("delegation"), str):
            # acknowledged: both sides must record it, once each (I3: delegation-sent, delegation-received)
            with self.ledger._lock:
                self.ledger.delegations.append((doc["delegation"], self.ledger.now()))
        elif code not in (3, 6, 7, 12, 75, -9):
            self.ledger.log(f"delegate {item} -> {code}: {(doc or {}).get('message', err.strip()[-200:])}")
