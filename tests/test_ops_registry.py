"""The lazy op loader must know every op the modules register (or a command would be refused)."""

from __future__ import annotations

import importlib

from gitwork import engine, ops
from gitwork.ops import __main__ as opsgen


def test_the_op_table_is_generated_from_the_modules() -> None:
    assert opsgen.PATH.read_text(encoding="utf-8") == opsgen.render(), "gitwork/ops/table.py is stale: run " \
                                                                       "python -m gitwork.ops"


def test_op_modules_name_every_registered_op_and_its_module() -> None:
    for module in ops.MODULES:
        importlib.import_module(f"gitwork.ops.{module}")
    registered = {name: spec.func.__module__.rsplit(".", 1)[1] for name, spec in engine.OPS.items()}
    assert registered == ops.OP_MODULES
