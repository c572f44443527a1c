"""Termination and routing decisions: the acceptance loop tests of issue 5.

Each test drives ``decide()`` the way the executor will: run a node (simulated), then ask the
rules what happens next, with ``step`` counting the steps already taken.
"""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel

from stargraph import fathom
from stargraph.fathom import Decision, RuleEngine, RulePack, default_termination_pack

CYCLE = RulePack.from_spec(
    {
        "id": "cycle",
        "version": "1",
        "rules": [
            {"name": "a_to_b", "when": [{"node": "a"}], "then": {"goto": "b"}},
            {"name": "b_to_a", "when": [{"node": "b"}], "then": {"goto": "a"}},
        ],
    }
)
SUCCESSORS = {"a": {"b"}, "b": {"a"}}


class State(BaseModel):
    """A state with the done flag the termination pack reads."""

    done: Annotated[bool, fathom.Fact()] = False
    attempts: Annotated[int, fathom.Fact()] = 0
    note: str = "not a fact"


def run_loop(engine: RuleEngine, *, start: str = "a", **per_step: object) -> list[Decision]:
    """Simulate the executor: take a step, ask for a decision, follow gotos until a halt."""
    decisions: list[Decision] = []
    node, step = start, 0
    while step < 10_000:
        step += 1
        args = {k: (v(step) if callable(v) else v) for k, v in per_step.items()}
        decision = engine.decide(step=step, node=node, **args)  # type: ignore[arg-type]
        decisions.append(decision)
        if decision.kind in ("halt", "finish"):
            return decisions
        if decision.kind == "goto":
            assert decision.target is not None
            node = decision.target
    raise AssertionError("the loop never halted")


@pytest.mark.parametrize("max_steps", [1, 2, 7, 50])
def test_goto_cycle_without_halt_stops_at_exactly_max_steps(max_steps: int) -> None:
    pack = default_termination_pack(max_steps=max_steps, error_budget=3)
    with RuleEngine([pack, CYCLE], successors=SUCCESSORS) as engine:
        decisions = run_loop(engine, state_facts={})
    assert len(decisions) == max_steps
    last = decisions[-1]
    assert (last.kind, last.reason, last.rule) == (
        "halt",
        "max_steps_exceeded",
        "termination/max_steps",
    )
    # the cycle rule fired too at the last step; halt takes precedence over its goto
    cycle_rule = "cycle/a_to_b" if max_steps % 2 else "cycle/b_to_a"
    assert sorted(last.fired) == sorted(["termination/max_steps", cycle_rule])
    for d in decisions[:-1]:
        assert d.kind == "goto"
        assert d.rule in ("cycle/a_to_b", "cycle/b_to_a")


def test_done_flag_stops_at_the_next_step_boundary() -> None:
    pack = default_termination_pack(max_steps=100, error_budget=3)
    fields = fathom.fact_fields(State)
    with RuleEngine([pack, CYCLE], fact_fields=fields, successors=SUCCESSORS) as engine:
        # the node that runs as step 4 sets done; the decision after it finishes the run
        decisions = run_loop(
            engine,
            state_facts=lambda step: State(done=step >= 4).model_dump(),
        )
    assert len(decisions) == 4
    assert decisions[-1].kind == "finish"
    assert decisions[-1].reason == "done"
    assert decisions[-1].rule == "termination/done"


@pytest.mark.parametrize("budget", [1, 3, 5])
def test_n_tool_failures_stop_when_the_error_budget_is_exhausted(budget: int) -> None:
    pack = default_termination_pack(max_steps=100, error_budget=budget)
    with RuleEngine([pack, CYCLE], successors=SUCCESSORS) as engine:
        # one tool failure every other step
        decisions = run_loop(
            engine,
            state_facts={},
            error_count=lambda step: step // 2,
            tool_result=lambda step: "error: timeout" if step % 2 == 0 else "ok",
        )
    assert len(decisions) == 2 * budget
    assert decisions[-1].reason == "error_budget_exhausted"
    assert decisions[-1].rule == "termination/error_budget"


def test_done_is_reported_before_a_limit_reached_at_the_same_step() -> None:
    pack = default_termination_pack(max_steps=2, error_budget=1)
    with RuleEngine([pack]) as engine:
        d = engine.decide(step=2, node="a", state_facts={"done": True}, error_count=1)
    assert d.rule == "termination/done"
    assert d.fired == ("termination/done", "termination/error_budget", "termination/max_steps")


def test_no_rule_firing_means_continue_without_a_rule() -> None:
    with RuleEngine([default_termination_pack(max_steps=5, error_budget=5)]) as engine:
        assert engine.decide(step=1, node="a", state_facts={}) == Decision(kind="continue")


PRECEDENCE = RulePack.from_spec(
    {
        "id": "votes",
        "version": "1",
        "rules": [
            {"name": "v_continue", "when": [], "then": {"assert": {"name": "x", "value": 1}}},
            {
                "name": "v_goto",
                "when": [{"last_event": {"in": ["goto", "interrupt", "halt"]}}],
                "then": {"goto": "b"},
            },
            {
                "name": "v_interrupt",
                "when": [{"last_event": {"in": ["interrupt", "halt"]}}],
                "then": {"interrupt": "ask"},
            },
            {"name": "v_halt", "when": [{"last_event": "halt"}], "then": {"halt": "stop"}},
        ],
    }
)


@pytest.mark.parametrize(
    ("event", "kind", "rule"),
    [
        ("none", "continue", "votes/v_continue"),
        ("goto", "goto", "votes/v_goto"),
        ("interrupt", "interrupt", "votes/v_interrupt"),
        ("halt", "halt", "votes/v_halt"),
    ],
)
def test_precedence_is_halt_interrupt_goto_continue(event: str, kind: str, rule: str) -> None:
    with RuleEngine([PRECEDENCE], successors={"a": {"b"}}) as engine:
        d = engine.decide(step=1, node="a", state_facts={}, last_event=event)
    assert (d.kind, d.rule) == (kind, rule)
    assert rule in d.fired
    assert "votes/v_continue" in d.fired


def test_default_termination_pack_is_deterministic_and_named() -> None:
    a = default_termination_pack(max_steps=10, error_budget=2)
    b = default_termination_pack(max_steps=10, error_budget=2)
    c = default_termination_pack(max_steps=11, error_budget=2)
    assert a == b
    assert a.source_hash == b.source_hash != c.source_hash
    assert a.id == "termination"
    for name in ("done", "error_budget", "max_steps"):
        assert f"(defrule {name}\n" in a.source
