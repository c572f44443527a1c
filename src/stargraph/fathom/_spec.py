"""Compile the declarative ``when``/``then`` rule form into CLIPS text.

The form (a dict, usually parsed from JSON)::

    {"id": "routing", "version": "1", "rules": [
        {"name": "to_search", "salience": 5,
         "when": [{"node": "plan"}, {"state.attempts": {"<": 3}}, {"no_fact": "escalated"}],
         "then": {"goto": "search"}},
        {"name": "escalate", "when": [{"error_count": {">=": 2}}],
         "then": {"assert": {"name": "escalated", "value": true}, "interrupt": "ask a human"}}]}

Conditions (all must hold) name a subject and either a literal (equality) or operators:
``step``, ``node``, ``last_event``, ``tool_result``, ``error_count`` (engine facts),
``state.<field>`` (a state field marked ``Fact()``), ``fact.<name>`` (a fact asserted by a
rule), or ``{"no_fact": "<name>"}``. Operators: ``==  !=  <  <=  >  >=  in  not_in``.
Actions: ``goto`` (node), ``halt`` (reason: stop the run before its end, status
``halted``), ``finish`` (reason: the task is complete, end the run ``done``), ``interrupt``
(reason), ``assert`` (``{"name", "value"}``). Spec values are the pack author's constants,
rendered as CLIPS literals with escaping; run-time values never pass through here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from stargraph.errors import Problem, RuleCompileError
from stargraph.fathom._values import encode_string

__all__ = ["compile_spec", "literal"]

_RULE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_ENGINE_SLOTS: Final = {
    "step": "step",
    "node": "node",
    "last_event": "last-event",
    "tool_result": "tool-result",
    "error_count": "error-count",
}
_OPS: Final = frozenset({"==", "!=", "<", "<=", ">", ">=", "in", "not_in"})
_ACTIONS: Final = frozenset({"goto", "halt", "finish", "interrupt", "assert"})
_DECIDING: Final = ("goto", "halt", "finish", "interrupt")


class _SpecError(Exception):
    """One problem inside a rule; collected into a RuleCompileError by compile_spec."""

    def __init__(self, message: str, hint: str) -> None:
        self.hint = hint
        super().__init__(message)


def literal(value: Any) -> str:
    """A Python constant as CLIPS source: strings quoted and escaped, bools as TRUE/FALSE."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        # Same escaping the engine applies to run-time strings, so the literal matches them.
        text = encode_string(value).replace("\\", "\\\\").replace('"', '\\"')
        return f'"{text}"'
    raise _SpecError(f"{value!r} is not a literal", "use a string, number, bool or null")


class _Vars:
    """Fresh CLIPS variable names within one rule."""

    def __init__(self) -> None:
        self.n = 0

    def new(self) -> str:
        self.n += 1
        return f"?v{self.n}"


def _predicate(var: str, op: str, value: Any) -> str:
    if op in ("in", "not_in"):
        if not isinstance(value, list) or not value:
            raise _SpecError(f"'{op}' needs a non-empty list", 'write {"in": ["a", "b"]}')
        members = " ".join(literal(v) for v in value)
        test = f"(member$ {var} (create$ {members}))"
        return test if op == "in" else f"(not {test})"
    lit = literal(value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if op in ("==", "!="):
        test = f"(and (numberp {var}) (= {var} {lit}))" if number else f"(eq {var} {lit})"
        return test if op == "==" else f"(not {test})"
    if not number:
        raise _SpecError(f"'{op}' compares numbers, got {value!r}", "compare with a number")
    return f"(and (numberp {var}) ({op} {var} {lit}))"


def _all_strings(values: Any) -> bool:
    return isinstance(values, list) and bool(values) and all(isinstance(v, str) for v in values)


def _constraint(test: Any, names: _Vars) -> str:
    """A slot constraint; equality to a literal (or ``in`` strings) stays literal so the
    static goto check can read the node a rule is for."""
    if not isinstance(test, dict):
        return literal(test)
    if not test or set(test) - _OPS:
        raise _SpecError(
            f"unknown operators {sorted(set(test) - _OPS) or '(none)'}",
            f"use one of {' '.join(sorted(_OPS))}",
        )
    if list(test) == ["=="]:
        return literal(test["=="])
    # `in` over strings stays literal too, e.g. (node "a"|"b"), readable by the goto check.
    if list(test) == ["in"] and _all_strings(test["in"]):
        return "|".join(literal(s) for s in test["in"])
    var = names.new()
    return var + "".join(f"&:{_predicate(var, op, value)}" for op, value in test.items())


def _patterns(when: Any) -> Iterator[str]:
    if not isinstance(when, list):
        raise _SpecError("'when' must be a list of conditions", 'write "when": [{"node": "a"}]')
    names = _Vars()
    step: list[str] = []
    state: list[str] = []
    other: list[str] = []
    for cond in when:
        if not isinstance(cond, dict) or len(cond) != 1:
            raise _SpecError(
                f"condition {cond!r} must be an object with one key", 'write {"node": "a"}'
            )
        ((subject, test),) = cond.items()
        if subject == "no_fact":
            other.append(f"(not (sg-fact (name {literal(str(test))})))")
        elif subject in _ENGINE_SLOTS:
            step.append(f"({_ENGINE_SLOTS[subject]} {_constraint(test, names)})")
        elif subject.startswith("state.") and _RULE_NAME.fullmatch(subject[6:]):
            state.append(f"({subject[6:]} {_constraint(test, names)})")
        elif subject.startswith("fact.") and subject[5:]:
            name = literal(subject[5:])
            other.append(f"(sg-fact (name {name}) (value {_constraint(test, names)}))")
        else:
            raise _SpecError(
                f"unknown condition subject {subject!r}",
                "use step, node, last_event, tool_result, error_count, state.<field>, "
                "fact.<name> or no_fact",
            )
    # Every rule matches the step fact, so it is re-evaluated at every step.
    yield "(sg-step" + "".join(" " + s for s in step) + ")"
    if state:
        yield f"(sg-state {' '.join(state)})"
    yield from other


def _actions(name: str, then: Any) -> Iterator[str]:
    if not isinstance(then, dict) or not then or set(then) - _ACTIONS:
        raise _SpecError(
            f"'then' must be an object with actions from {sorted(_ACTIONS)}, got {then!r}",
            'write "then": {"halt": "reason"}',
        )
    if sum(k in then for k in _DECIDING) > 1:
        raise _SpecError("a rule takes at most one of goto/halt/finish/interrupt", "split the rule")
    if "assert" in then:
        fact = then["assert"]
        if not isinstance(fact, dict) or set(fact) != {"name", "value"}:
            raise _SpecError("'assert' needs {name, value}", 'write {"name": "x", "value": 1}')
        name_lit, value_lit = literal(str(fact["name"])), literal(fact["value"])
        yield f"(assert (sg-fact (name {name_lit}) (value {value_lit})))"
    if "goto" in then:
        if not isinstance(then["goto"], str):
            raise _SpecError("'goto' names a node", 'write {"goto": "node_name"}')
        yield f"(assert (sg-decision (kind goto) (target {literal(then['goto'])}) (rule {name})))"
    for kind in ("halt", "finish", "interrupt"):
        if kind in then:
            reason = literal(str(then[kind]))
            yield f"(assert (sg-decision (kind {kind}) (reason {reason}) (rule {name})))"
    if not set(_DECIDING) & set(then):
        # A vote to continue records that the rule fired, so the decision names it.
        yield f"(assert (sg-decision (kind continue) (rule {name})))"


def compile_spec(pack_id: str, spec: Mapping[str, Any]) -> str:
    """CLIPS text for a spec; raises RuleCompileError naming every bad rule at once."""
    rules = spec.get("rules")
    if not isinstance(rules, list):
        raise RuleCompileError.at(
            f"pack {pack_id!r}",
            "'rules' must be a list",
            'add "rules": [...]',
            subject=f"rule pack {pack_id!r}",
        )
    problems: list[Problem] = []
    out = [f"; fathom-pack: id={pack_id} (compiled from a declarative spec)"]
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        name = rule.get("name") if isinstance(rule, dict) else None
        where = f"pack {pack_id!r}, rule {name!r} (rules[{index}])"
        try:
            if not isinstance(rule, dict) or set(rule) - {"name", "when", "then", "salience"}:
                raise _SpecError(
                    "a rule is an object with name, when, then and optional salience",
                    "remove other keys",
                )
            if not isinstance(name, str) or not _RULE_NAME.fullmatch(name):
                raise _SpecError("'name' must look like 'stop_on_done'", "rename the rule")
            if name.startswith("sg-") or name in seen:
                raise _SpecError("the name is reserved or already used", "rename the rule")
            seen.add(name)
            salience = rule.get("salience", 0)
            if not isinstance(salience, int) or isinstance(salience, bool):
                raise _SpecError("'salience' must be an int", "use -10000..10000")
            if not -10000 <= salience <= 10000:
                raise _SpecError("'salience' must be in -10000..10000", "use -10000..10000")
            lhs = list(_patterns(rule.get("when", [])))
            rhs = list(_actions(name, rule.get("then")))
        except _SpecError as exc:
            problems.append(Problem(where, str(exc), exc.hint))
            continue
        body = [f"(defrule {name}", f'  "rules[{index}]"']
        if salience:
            body.append(f"  (declare (salience {salience}))")
        body += [f"  {p}" for p in lhs] + ["  =>"] + [f"  {a}" for a in rhs]
        out.append("\n".join(body) + ")")
    if problems:
        raise RuleCompileError(problems, subject=f"rule pack {pack_id!r}")
    return "\n\n".join(out) + "\n"
