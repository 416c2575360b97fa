"""``gw serve``: the REST face and the board (docs/serve.md).

A face like ``gitwork/cli``: it builds command documents and hands them to ``Workplane.submit``, and
reads through the library's read functions. Installed with the ``gitwork[serve]`` extra; nothing here
is imported by the CLI's hot path (``gw serve`` imports it lazily). ``app.create_app`` builds the
ASGI application; ``tokens`` is standard library only (``gw serve token ...``).
"""
