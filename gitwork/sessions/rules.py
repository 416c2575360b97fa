"""The orchestration rules of multi-step sessions: the ``sessions:`` mapping of the tracked ``.workplane``.

::

    sessions:
      operators:                      # who does a step: an agent command, or the built-ins user / external
        planner:
          command: [python3, tools/plan.py]   # a list, or one string split like a shell would
          validate: python3 tools/check-plan.py   # optional extra gate (sh -c, in the branch folder)
          writes_source: false
      steps:                          # a step key: its operator, how many parallel branches, source or not
        plan: {operator: planner}
        build: {operator: coder, parallel: 2, writes_source: true}
        review: {operator: user, needs: [plan, code]}   # needs: the field kinds handed to it (default: all)
        check: {operator: reviewer, distinct_operator: true, max_rounds: 2, seal: true}   # a review step
      chains:                         # a chain: a list of step keys, run in order
        feature: [plan, build, review]
      backend: subprocess             # optional: where the coordinator launches operators (or tmux)

Checked when a session uses them (``Invalid``, exit 5, naming the entry), never on everyday commands.
"""

from __future__ import annotations

import re
import shlex

from ..errors import Invalid

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

BUILTIN = ("user", "external")  # operators that are people or outside systems: nothing is launched
MAX_PARALLEL = 16
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
_OPERATOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")


class Operator:
    __slots__ = ("name", "command", "validate", "writes_source")

    def __init__(self, name: str, command: list[str] | None, validate: str | None, writes_source: bool) -> None:
        self.name, self.command, self.validate, self.writes_source = name, command, validate, writes_source

    @property
    def launched(self) -> bool:
        return self.command is not None


class Step:
    __slots__ = ("name", "operator", "parallel", "writes_source", "needs", "review")

    def __init__(self, name: str, operator: str, parallel: int, writes_source: bool,
                 needs: list[str] | None = None, review: dict[str, Any] | None = None) -> None:
        self.name, self.operator, self.parallel, self.writes_source = name, operator, parallel, writes_source
        self.needs = needs
        # review steps: distinctOperator (not an earlier step's operator), maxRounds (nested exchanges per
        # branch), seal (the inputs' sha256 in the request, sealed into the response)
        self.review = review or {}


BACKENDS = ("subprocess", "tmux")


class Rules:
    def __init__(self, operators: dict[str, Operator], steps: dict[str, Step], chains: dict[str, list[str]],
                 backend: str = "subprocess") -> None:
        self.operators, self.steps, self.chains, self.backend = operators, steps, chains, backend

    def chain(self, name: str) -> list[str]:
        if name not in self.chains:
            known = ", ".join(sorted(self.chains)) or "none: add sessions.chains to .workplane"
            raise Invalid(f"no chain {name[:64]!r} in the sessions rules (known: {known})")
        plan = self.chains[name]
        for index, key in enumerate(plan):
            step = self.steps[key]
            earlier = {self.steps[k].operator for k in plan[:index]}
            if step.review.get("distinctOperator") and step.operator in earlier:
                raise _bad(f"chains.{name}", f"step {key} must be done by another operator than the steps it "
                                             f"reviews, and {step.operator} does an earlier one (distinct_operator)")
        return plan

    def operator(self, name: str) -> Operator:
        found = self.operators.get(name)
        if found is None:
            if name in BUILTIN:
                return Operator(name, None, None, False)
            raise Invalid(f"no operator {name[:64]!r} in the sessions rules")
        return found


def _bad(where: str, why: str) -> Invalid:
    return Invalid(f"bad sessions rule {where} in .workplane: {why}")


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(where, "expected a mapping")
    return value


def _bool(value: Any, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(where, "expected true or false")
    return value


def _entry(section: str, name: Any, spec: Any, pattern: re.Pattern[str], names: str,
           keys: set[str]) -> tuple[str, dict[str, Any]]:
    """One entry of ``operators`` or ``steps``: its name, a mapping, only known keys."""
    if not isinstance(name, str) or not pattern.match(name):
        raise _bad(f"{section}.{str(name)[:40]}", f"{section} names are {names}")
    where = f"{section}.{name}"
    spec = _mapping(spec, where)
    unknown = set(spec) - keys
    if unknown:
        raise _bad(where, f"unknown keys {', '.join(sorted(map(str, unknown)))}")
    return where, spec


def _operator(name: str, spec: Any) -> Operator:
    where, spec = _entry("operators", name, spec, _OPERATOR, "letters, digits, _ . -",
                         {"command", "validate", "writes_source"})
    command = spec.get("command")
    if name in BUILTIN:
        if command is not None:
            raise _bad(where, f"{name} is a person or an outside system: it has no command")
    elif isinstance(command, str):
        try:
            command = shlex.split(command)
        except ValueError as exc:
            raise _bad(f"{where}.command", str(exc)) from None
    if command is not None and (not isinstance(command, list) or not command
                                or not all(isinstance(part, str) and part for part in command)):
        raise _bad(f"{where}.command", "a non-empty list of words, or one string")
    if command is None and name not in BUILTIN:
        raise _bad(where, "an agent operator needs a command (or use the built-in operator user)")
    validate = spec.get("validate")
    if validate is not None and (not isinstance(validate, str) or not validate.strip()):
        raise _bad(f"{where}.validate", "a command (run with sh -c)")
    return Operator(name, command, validate, _bool(spec.get("writes_source"), f"{where}.writes_source"))


def load(settings: Any) -> Rules:
    doc = _mapping(getattr(settings, "sessions", None), "sessions")
    unknown = set(doc) - {"operators", "steps", "chains", "backend"}
    if unknown:
        raise _bad("sessions", f"unknown keys {', '.join(sorted(map(str, unknown)))}")
    operators = {name: _operator(name, spec) for name, spec in _mapping(doc.get("operators"), "operators").items()}
    steps: dict[str, Step] = {}
    for name, spec in _mapping(doc.get("steps"), "steps").items():
        where, spec = _entry("steps", name, spec, _NAME, "letters, digits, _ and -",
                             {"operator", "parallel", "writes_source", "needs", "distinct_operator", "max_rounds",
                              "seal"})
        operator = spec.get("operator")
        if not isinstance(operator, str) or (operator not in operators and operator not in BUILTIN):
            raise _bad(f"{where}.operator", f"{operator!r} is not an operator (define it under sessions.operators)")
        parallel = spec.get("parallel", 1)
        if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= MAX_PARALLEL:
            raise _bad(f"{where}.parallel", f"a whole number from 1 to {MAX_PARALLEL}")
        writes = _bool(spec.get("writes_source"), f"{where}.writes_source") or \
            (operator in operators and operators[operator].writes_source)
        if writes and operator in BUILTIN:
            raise _bad(where, f"the {operator} operator cannot write source through a session")
        needs = spec.get("needs")
        if needs is not None and (not isinstance(needs, list) or len(needs) > 64
                                  or not all(isinstance(k, str) and _OPERATOR.match(k) for k in needs)):
            raise _bad(f"{where}.needs", "a list of field kinds (letters, digits, _ . and -)")
        review: dict[str, Any] = {}
        if _bool(spec.get("distinct_operator"), f"{where}.distinct_operator"):
            review["distinctOperator"] = True
        if _bool(spec.get("seal"), f"{where}.seal"):
            review["seal"] = True
        rounds = spec.get("max_rounds")
        if rounds is not None:
            if isinstance(rounds, bool) or not isinstance(rounds, int) or not 0 <= rounds <= 64:
                raise _bad(f"{where}.max_rounds", "a whole number from 0 to 64 (nested exchanges per branch)")
            review["maxRounds"] = rounds
        steps[name] = Step(name, operator, parallel, writes, sorted(set(needs)) if needs is not None else None,
                           review)
    chains: dict[str, list[str]] = {}
    for name, spec in _mapping(doc.get("chains"), "chains").items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise _bad(f"chains.{str(name)[:40]}", "chain names are letters, digits, _ and -")
        if not isinstance(spec, list) or not spec or len(spec) > 64:
            raise _bad(f"chains.{name}", "a list of 1 to 64 step keys")
        for step in spec:
            if step not in steps:
                raise _bad(f"chains.{name}", f"{step!r} is not a step (define it under sessions.steps)")
        chains[name] = list(spec)
    backend = doc.get("backend", "subprocess")
    if backend not in BACKENDS:
        raise _bad("sessions.backend", f"one of {', '.join(BACKENDS)}")
    return Rules(operators, steps, chains, backend)
