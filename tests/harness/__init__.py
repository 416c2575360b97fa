"""The system-level invariant harness (issue 24): gitwork's features run together under faults.

Modules, each with one job:

- ``world``: the arbiter (a bare repository served by ``git daemon``, with the server hook), the clones,
  and the registry of every process the harness starts (killed by process group at teardown);
- ``actors``: what runs against the world (CLI workers that also defer, undefer and force-claim items
  with path globs, syncers, ``gw run`` launchers on both backends under a budget, a reporter of costs
  with retries, a holder queueing sessions and the publisher, coordinators, a REST client over ``gw
  serve`` in a clone and one over the command service at the arbiter (``gw serve`` on the arbiter's own
  bare repository, racing the clones' pushes on the state ref), an MCP client, delegating peers), each recording what
  was acknowledged to it in the :class:`~harness.ledger.Ledger`;
- ``faults``: kill -9, arbiter stop/restart, SIGSTOP/SIGCONT;
- ``invariants``: I1-I5, and :func:`~harness.invariants.replay_mismatches` (I4), reusable on any
  repository holding a state ref;
- ``history``: I6 (no grant while a wait is open), I7 (a queued session lands once, under the lease it
  was queued under; the code branch moves only by landings), I8 (each reported cost counted once, no
  launch past a spent budget) and IP (no two live leases of different holders with overlapping globs),
  judged on facts read once from the arbiter's state history (and its ``main`` reflog);
- ``webhooks``: IW (every post the REST clone's ``gw serve`` delivers is signed, and names a commit that
  clone has, with its command's op), over a receiver that answers every fifth post 503;
- ``run``: one seeded run: builds the world, drives the actors and faults for a bounded time, settles,
  checks, tears down.

Every actor and fault is switchable (:class:`~harness.run.Switches`), so a run can be bisected.
"""
