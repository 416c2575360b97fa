"""The verbs' declarations (typed signatures, help), one module per topic, registered on ``declare.app``
when imported (``app.py`` imports them all, in the order ``gw --help`` lists them)."""
