"""Several machines: a git remote as the single arbiter of leases, offline work replayed on sync.

The remote's state ref is the truth. A command the arbiter decides succeeds only once its commit is
on the remote's state ref; everything else can be done offline and is replayed on the remote's tip
by ``sync``. Three modules, arrows pointing down:

- :mod:`.cas`: :class:`Arbiter` (``submit``) and :class:`ArbiterRef`, the compare-and-swap
  :func:`engine.run` drives round by round; the back-off policy; outcome-unknown commands (``gw retry``).
- :mod:`.replay`: :class:`Replay`: the chain to push (``rebuild``), adopting what landed onto the
  local ref without ever dropping a local command (``adopt``), ``catch_up``, ``sync``, ``status``.
- :mod:`.transport`: :class:`Remote`: ``git fetch``/``git push --force-with-lease`` through
  :func:`gitcmd.run`, and reading what the remote said.

``from gitwork import sync`` / ``gitwork.sync.X`` keep naming what they named when this was one module.
"""

from __future__ import annotations

from .cas import (
                        Arbiter,
                        ArbiterRef,
                        Round,
                        _carry_key,
                        after_a_win,
                        backoff,
                        remember_unknown,
                        retry,
)
from .replay import FILLED_IN, MAX_ROUNDS, Replay, same_command, unique
from .transport import (
                        _ESCAPE,
                        _UNPRINTABLE,
                        OUTPUT_KEPT,
                        REMOTE_TIMEOUT,
                        Remote,
                        Rider,
                        RiderMoved,
                        _clean,
                        configure_remote,
                        git_reason,
                        remote_said,
                        tracking_ref,
)

__all__ = [
                        "FILLED_IN",
                        "MAX_ROUNDS",
                        "OUTPUT_KEPT",
                        "REMOTE_TIMEOUT",
                        "_ESCAPE",
                        "_UNPRINTABLE",
                        "Arbiter",
                        "ArbiterRef",
                        "Remote",
                        "Replay",
                        "Rider",
                        "RiderMoved",
                        "Round",
                        "_carry_key",
                        "_clean",
                        "after_a_win",
                        "backoff",
                        "configure_remote",
                        "git_reason",
                        "remember_unknown",
                        "remote_said",
                        "retry",
                        "same_command",
                        "tracking_ref",
                        "unique",
]
