"""Record formats: what the state ref holds beyond items and leases, and how to read it.

Executions and coordinators (``executions``), sessions (``sessions``), delegation records and the
delegation protocol's signed documents (``delegations``, ``protocol``). The ops that write these
records (``gitwork/ops``) and the procedures that read them (``launch``, ``sessions``, ``publish``,
``delegation``, ``serve``) both import them from here: below ``ops/``, above the engine (readers take
an ``engine.View``), so no procedure imports an op module and no op module imports a procedure.
"""
