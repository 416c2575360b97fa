"""The system-level invariant harness (issue 24): gitwork's features run together under faults.

Modules, each with one job:

- ``world``: the arbiter (a bare repository served by ``git daemon``, with the server hook), the clones,
  and the registry of every process the harness starts (killed by process group at teardown);
- ``actors``: what runs against the world (CLI workers, syncers, ``gw run`` launchers on both backends,
  coordinators, a REST client over ``gw serve``, an MCP client, delegating peers), each recording what
  was acknowledged to it in the :class:`~harness.ledger.Ledger`;
- ``faults``: kill -9, arbiter stop/restart, SIGSTOP/SIGCONT;
- ``invariants``: I1-I5, and :func:`~harness.invariants.replay_mismatches` (I4), reusable on any
  repository holding a state ref;
- ``run``: one seeded run: builds the world, drives the actors and faults for a bounded time, settles,
  checks, tears down.

Every actor and fault is switchable (:class:`~harness.run.Switches`), so a run can be bisected.
"""
