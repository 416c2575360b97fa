"""One plain function per verb, grouped by topic (as pre-commit's ``commands/``).

Each function is what a verb does once its arguments are parsed: ``(wp, as_json, **options)``, the
options under the names ``cli/verbs/*.py`` declare them with. They build a command document (or call
a procedure: sessions, publish, sync), submit it and print the result; no typer here, so the fast
path (``cli/fast.py``) calls the very same functions. ``cli/actions.invoke`` opens the work plane
and maps errors to exit codes around each call.
"""
