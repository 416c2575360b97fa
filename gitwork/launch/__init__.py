"""Running agents under a lease: the backend seam (``backend.py``), one module per backend
(``tmux.py``, ``process.py``), the exit-code wrapper (``wrapper.py``) and ``gw run`` itself
(``run.py``). See docs/launch.md."""
