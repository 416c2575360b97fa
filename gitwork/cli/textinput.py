"""Text from stdin, a file or an editor for ``new`` and ``edit`` (``-d -``, ``--description-file F``,
``-e``).

Reads are bounded (a description is at most ``MAX_TEXT``; one byte more is refused before the rest
is read). The editor is chosen and started as git does: ``$VISUAL``, then ``$EDITOR``, then git's own
choice (``git var GIT_EDITOR``: ``core.editor``, else vi), run through ``sh -c '<editor> "$@"'`` so an
editor with arguments (``code --wait``, ``emacs -nw``) works.
"""

from __future__ import annotations

import os
import sys

from ..errors import Invalid, UsageError

LIMIT = 64 * 1024  # commands.MAX_TEXT: the op refuses longer texts; stop reading one byte past it

SCISSORS = "# ------------------------ >8 ------------------------"
HELP = (f"{SCISSORS}\n# Do not modify or remove the line above: everything below it is ignored.\n"
        "# The first line is the title; the description follows after a blank line (Markdown is fine).\n"
        "# An empty title aborts; nothing is written.\n")


def read_text(source: str, what: str) -> str:
    """The whole of ``source`` (``-``: stdin) as UTF-8 text, at most ``LIMIT`` bytes."""
    try:
        if source == "-":
            data = sys.stdin.buffer.read(LIMIT * 4 + 1)
        else:
            with open(source, "rb") as handle:
                data = handle.read(LIMIT * 4 + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what} from {source}: {exc.strerror or exc}") from exc
    if len(data) > LIMIT * 4:
        raise Invalid(f"{what} from {'stdin' if source == '-' else source} is too long (over {LIMIT} characters)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} from {'stdin' if source == '-' else source} is not UTF-8 text") from exc


def description(text: str | None, path: str | None) -> str | None:
    """``-d TEXT`` (``-d -`` reads stdin) or ``--description-file PATH`` (``-`` is stdin), not both."""
    if text is not None and path is not None:
        raise UsageError("give the description with -d or --description-file, not both")
    if path is not None:
        return read_text(path, "the description")
    if text == "-":
        return read_text("-", "the description")
    return text


def editor_command() -> str:
    for name in ("VISUAL", "EDITOR"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    from .. import gitcmd

    done = gitcmd.run(("var", "GIT_EDITOR"), check=False)
    chosen = done.out.strip()
    if done.returncode != 0 or not chosen:
        raise UsageError("no editor: set VISUAL or EDITOR (or git's core.editor)")
    return chosen


def edit_form(title: str, body: str) -> tuple[str, str]:
    """Open the editor on a title-and-description form; return what was saved as (title, description)."""
    import subprocess
    import tempfile

    editor = editor_command()
    handle, path = tempfile.mkstemp(prefix="gw-item-", suffix=".md")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as form:
            form.write(f"{title}\n\n{body.rstrip()}\n{'' if not body.strip() else chr(10)}{HELP}")
        try:
            code = subprocess.run(("sh", "-c", f'{editor} "$@"', editor, path)).returncode
        except OSError as exc:
            raise UsageError(f"cannot start the editor {editor!r}: {exc.strerror or exc}") from exc
        if code != 0:
            raise UsageError(f"the editor {editor!r} exited with {code}; nothing was written")
        text = read_text(path, "the form")
    finally:
        os.unlink(path)
    return parse_form(text)


def parse_form(text: str) -> tuple[str, str]:
    kept = text.split(SCISSORS, 1)[0]
    lines = kept.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines or not lines[0].strip():
        raise Invalid("aborted: the form has an empty title; nothing was written")
    return lines[0].strip(), "\n".join(lines[1:]).strip("\n")
