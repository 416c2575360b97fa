"""Delegation to authorised peers, with signed requests and signed receipts (docs/security.md).

- ``peers.py``: who the peers are, from the repository's local, untracked git config only;
- ``signing.py``: ``ssh-keygen -Y sign|verify`` under gitwork's namespace, and replay protection;
- ``gitwork/records/protocol.py`` (below ``ops/``, which records them): the request and receipt documents, their canonical bytes and digests;
- ``client.py``: the sender's side (``gw delegate``), ``peer_api.py`` the peer's REST endpoints;
- ``receipts.py``: ``gw receipts verify``, the chain request -> receipt of every stored record.

Nothing here exists for a repository with no peer configured: the CLI does not declare the verbs and
``peer_api.maybe_router`` gives no router.
"""
