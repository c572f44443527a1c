"""The rule engine at run time: typed errors instead of silent skips, injection safety,
threads, and snapshot/restore reproducing decisions."""

from __future__ import annotations

import json
import threading
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stargraph import fathom
from stargraph.errors import RuleRuntimeError, RunError
from stargraph.fathom import Decision, RuleEngine, RulePack, default_termination_pack
from tests.support import spy


def test_public_api_is_pinned() -> None:
    assert sorted(fathom.__all__) == [
        "ALLOWED_FUNCTIONS",
        "Decision",
        "DecisionEngine",
        "DecisionKind",
        "EnginePool",
        "Fact",
        "PooledEngine",
        "RuleBounds",
        "RuleEngine",
        "RulePack",
        "default_termination_pack",
        "fact_fields",
        "validate_pack",
    ]
    engine = RuleEngine([])
    assert isinstance(engine, fathom.DecisionEngine)
    engine.close()


def test_fact_fields_lists_only_marked_fields() -> None:
    class S(BaseModel):
        a: Annotated[int, fathom.Fact()] = 0
        b: Annotated[str | None, fathom.Fact()] = None
        c: float = 0.0

    assert fathom.fact_fields(S) == {"a": int, "b": str | None}


# --------------------------------------------------------------------------- callbacks

CALLS_PYTHON = RulePack.from_clp(
    "cb",
    "1",
    "(defrule check\n"
    "  (sg-step (tool-result ?r&~nil))\n"
    "  (test (eq (risky ?r) TRUE))\n"
    "  =>\n"
    '  (assert (sg-decision (kind halt) (reason "risky") (rule check))))\n',
)


def risky(result: str) -> bool:
    """A callback rules call; raises on one input."""
    if result == "boom":
        raise ValueError("kaboom")
    return result == "bad"


def test_callback_that_raises_fails_the_step_with_a_typed_error() -> None:
    with RuleEngine([CALLS_PYTHON], functions={"risky": risky}) as engine:
        assert engine.decide(step=1, node="n", state_facts={}, tool_result="bad").kind == "halt"
        with pytest.raises(RuleRuntimeError) as info:
            engine.decide(step=2, node="n", state_facts={}, tool_result="boom")
        # the engine recovers: the next step decides normally
        assert engine.decide(step=3, node="n", state_facts={}, tool_result="ok").kind == (
            "continue"
        )
        assert engine.decide(step=4, node="n", state_facts={}, tool_result="bad").rule == (
            "cb/check"
        )
    error = info.value
    assert isinstance(error, RunError)
    assert isinstance(error.__cause__, ValueError)
    assert str(error.__cause__) == "kaboom"
    assert (error.step, error.node) == (2, "n")
    message = str(error)
    assert message.startswith(
        "a rule failed while deciding: [PYCODEFUN1] ValueError('kaboom') [PRCCODE4] "
        "Execution halted during the actions of deffunction 'risky'."
    )
    assert "in rule check" in message
    assert "Traceback" not in message
    assert message.endswith("; fix the rule or the Python function it calls (step 2, node 'n')")


def test_callback_returning_an_object_is_an_error_not_a_leak() -> None:
    expected = r"TypeError.*return a bool, int, float, str"
    engine = RuleEngine([CALLS_PYTHON], functions={"risky": lambda r: object()})
    with engine, pytest.raises(RuleRuntimeError, match=expected):
        engine.decide(step=1, node="n", state_facts={}, tool_result="x")


def test_clips_runtime_error_is_raised_not_skipped() -> None:
    pack = RulePack.from_clp(
        "math",
        "1",
        "(defrule r (sg-step (step ?s)) =>"
        " (assert (sg-decision (kind halt) (reason (str-cat (div 1 (- ?s 2)))) (rule r))))",
    )
    with RuleEngine([pack]) as engine:
        assert engine.decide(step=1, node="n", state_facts={}).reason == "-1"
        with pytest.raises(RuleRuntimeError, match=r"\[PRNTUTIL7\] Attempt to divide by zero"):
            engine.decide(step=2, node="n", state_facts={})


# --------------------------------------------------------------------------- limits, threads

SPINS = RulePack.from_clp(
    "spin",
    "1",
    "(deftemplate counter (slot n))\n"
    "(deffacts start (counter (n 0)))\n"
    "(defrule spin ?c <- (counter (n ?n)) (sg-step) => (modify ?c (n (+ ?n 1))))\n",
)


def test_self_retriggering_rule_is_stopped_by_run_limit() -> None:
    with RuleEngine([SPINS], run_limit=50) as engine, pytest.raises(RuleRuntimeError) as info:
        engine.decide(step=1, node="n", state_facts={})
    assert str(info.value) == (
        "rules fired 50 times without settling (run_limit=50); still pending: spin. A rule "
        "that re-triggers itself needs a condition that its own action makes false "
        "(step 1, node 'n')"
    )


def test_use_from_another_thread_is_refused() -> None:
    engine = RuleEngine([default_termination_pack(max_steps=3, error_budget=3)])
    errors: list[BaseException] = []

    def other() -> None:
        try:
            engine.decide(step=1, node="n", state_facts={})
        except RuleRuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert "a CLIPS environment is not thread-safe" in str(errors[0])
    assert engine.decide(step=1, node="n", state_facts={}).kind == "continue"
    engine.close()
    with pytest.raises(RuleRuntimeError, match="the rule engine is closed"):
        engine.decide(step=2, node="n", state_facts={})
    engine.close()  # idempotent


# --------------------------------------------------------------------------- goto at run time

DYNAMIC = RulePack.from_clp(
    "dyn",
    "1",
    "(defrule follow\n"
    "  (sg-step (last-event ?next&~nil))\n"
    "  =>\n"
    "  (assert (sg-decision (kind goto) (target ?next) (rule follow))))\n",
)


def test_dynamic_goto_to_non_successor_is_a_runtime_error() -> None:
    with RuleEngine([DYNAMIC], successors={"a": ["b", "c"], "b": []}) as engine:
        assert engine.decide(step=1, node="a", state_facts={}, last_event="b").target == "b"
        with pytest.raises(RuleRuntimeError) as info:
            engine.decide(step=2, node="b", state_facts={}, last_event="a")
    assert str(info.value) == (
        "rule dyn/follow asked to goto 'a' from node 'b' at step 2, but the allowed "
        "successors of 'b' are: none; change the rule or add the edge to the graph"
    )
    assert (info.value.step, info.value.node) == (2, "b")


def test_conflicting_gotos_are_an_error() -> None:
    two = RulePack.from_spec(
        {
            "id": "two",
            "version": "1",
            "rules": [
                {"name": "left", "when": [{"node": "a"}], "then": {"goto": "b"}},
                {"name": "right", "when": [{"node": "a"}], "then": {"goto": "c"}},
            ],
        }
    )
    engine = RuleEngine([two], successors={"a": ["b", "c"]})
    with engine, pytest.raises(RuleRuntimeError) as info:
        engine.decide(step=1, node="a", state_facts={})
    assert str(info.value) == (
        "rules disagree on where to go from node 'a' at step 1: two/left -> 'b', "
        "two/right -> 'c'; make their conditions exclusive or let one halt/interrupt"
    )


def test_state_fact_of_the_wrong_type_names_the_field() -> None:
    with RuleEngine([], fact_fields={"attempts": int}) as engine:
        with pytest.raises(RuleRuntimeError) as info:
            engine.decide(step=3, node="n", state_facts={"attempts": "three"})
        with pytest.raises(RuleRuntimeError, match="state_facts has no value for fact 'attempts'"):
            engine.decide(step=3, node="n", state_facts={})
    assert str(info.value) == (
        "fact 'attempts' = 'three' at step 3 (node 'n') is not a int as declared; fix the node "
        "that wrote it or the field's annotation (ints must fit in 64 bits)"
    )


# --------------------------------------------------------------------------- injection

ECHO = RulePack.from_clp(
    "echo",
    "1",
    "(defrule echo\n"
    "  (sg-step (tool-result ?r&~nil) (last-event ?e&~nil))\n"
    "  (sg-state (note ?n))\n"
    "  =>\n"
    "  (assert (sg-decision (kind interrupt) (reason (str-cat ?r ?e ?n)) (rule echo))))\n",
)
ROUTE = RulePack.from_spec(
    {
        "id": "route",
        "version": "1",
        "rules": [
            {"name": "go", "when": [{"node": "a"}], "then": {"goto": "b"}},
            {"name": "flag", "when": [{"state.note": "(assert (halt))"}], "then": {"halt": "!"}},
        ],
    }
)
NASTY = st.one_of(
    st.sampled_from(
        [
            '"',
            '")) (assert (sg-decision (kind halt) (rule go))) ("',
            "(assert (halt))",
            "a\nb\r\n",
            "nul\x00byte",
            "\x00",
            "\\",
            '\\"',
            "héllo wörld ✓ 漢字 🙂",
            "\ud800 lone surrogate",
            "\uf8ff0 looks escaped",
            "nil",
            "TRUE",
            "?x",
            ";comment",
        ]
    ),
    st.text(max_size=40),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(result=NASTY, event=NASTY, note=NASTY)
def test_hostile_strings_round_trip_and_change_no_decision(
    result: str, event: str, note: str
) -> None:
    fields = {"note": str}
    with RuleEngine([ECHO], fact_fields=fields) as echo:
        d = echo.decide(
            step=1, node="a", state_facts={"note": note}, tool_result=result, last_event=event
        )
        # read back through CLIPS, via the rule's string concatenation ...
        assert d.reason == result + event + note
        # ... and via the facts themselves
        facts = dict(echo.snapshot()["facts"])
        assert facts["sg-step"]["tool-result"] == result
        assert facts["sg-step"]["last-event"] == event
        assert facts["sg-state"]["note"] == note
    with RuleEngine([ROUTE], fact_fields=fields, successors={"a": ["b"]}) as route:
        d = route.decide(
            step=1, node="a", state_facts={"note": note}, tool_result=result, last_event=event
        )
    expected = (
        Decision(kind="halt", reason="!", rule="route/flag", fired=("route/flag", "route/go"))
        if note == "(assert (halt))"  # the one value the pack compares against, on purpose
        else Decision(kind="goto", target="b", rule="route/go", fired=("route/go",))
    )
    assert d == expected


# --------------------------------------------------------------------------- snapshot/restore

STATEFUL = RulePack.from_clp(
    "stateful",
    "1",
    "(defglobal ?*errors-seen* = 0)\n"
    "(deftemplate seen (slot step (type INTEGER)))\n"
    "(defrule note-error\n"
    '  (sg-step (step ?s) (tool-result "error"))\n'
    "  =>\n"
    "  (bind ?*errors-seen* (+ ?*errors-seen* 1))\n"
    "  (assert (seen (step ?s))))\n"
    "(defrule first-error\n"
    "  (seen)\n"
    "  =>\n"
    '  (assert (sg-decision (kind interrupt) (reason "first error") (rule first-error))))\n'
    "(defrule third-error\n"
    "  (sg-step)\n"
    "  (test (>= ?*errors-seen* 3))\n"
    "  =>\n"
    '  (assert (sg-decision (kind halt) (reason "three errors") (rule third-error))))\n'
    "(defrule route\n"
    '  (sg-step (node "a"))\n'
    "  =>\n"
    '  (assert (sg-decision (kind goto) (target "b") (rule route))))\n',
)


def inputs(step: int) -> dict[str, Any]:
    """Deterministic decide() arguments for a step."""
    return {
        "step": step,
        "node": "a" if step % 2 else "b",
        "state_facts": {"attempts": step * 3, "done": False},
        "tool_result": "error" if step in (2, 5, 7) else "ok",
        "error_count": step // 3,
    }


def make_engine() -> RuleEngine:
    """An engine with the default pack, a stateful pack, and a declarative pack."""
    spec = RulePack.from_spec(
        {
            "id": "spec",
            "version": "1",
            "rules": [
                {
                    "name": "mark",
                    "when": [{"state.attempts": {">=": 9}}],
                    "then": {"assert": {"name": "late", "value": True}},
                },
                {
                    "name": "late",
                    "when": [{"fact.late": True}, {"node": "b"}],
                    "then": {"goto": "a"},
                },
            ],
        }
    )
    return RuleEngine(
        [default_termination_pack(max_steps=9, error_budget=100), STATEFUL, spec],
        fact_fields={"attempts": int, "done": bool},
        successors={"a": ["b"], "b": ["a"]},
    )


@pytest.mark.parametrize("crash_after", [0, 1, 2, 3, 5, 8])
def test_restore_in_a_new_engine_reproduces_the_decisions(crash_after: int) -> None:
    with make_engine() as original:
        decisions = [original.decide(**inputs(s)) for s in range(1, 10)]
    # the "crash": run to crash_after, checkpoint the snapshot as JSON, resume elsewhere
    with make_engine() as first:
        for s in range(1, crash_after + 1):
            first.decide(**inputs(s))
        stored = json.dumps(first.snapshot())
    with make_engine() as resumed:
        resumed.restore(json.loads(stored))
        replayed = [resumed.decide(**inputs(s)) for s in range(crash_after + 1, 10)]
    assert replayed == decisions[crash_after:]
    # and the run is genuinely rule-routed: interrupts, gotos and the final halt all occur
    assert {d.kind for d in decisions} == {"goto", "interrupt", "halt"}
    assert decisions[-1].rule == "termination/max_steps"


def test_restore_does_not_refire_rules_that_already_fired() -> None:
    with make_engine() as a:
        a.decide(**inputs(1))
        assert a.decide(**inputs(2)).rule == "stateful/first-error"  # fires once, on (seen)
        snap = a.snapshot()
        after = a.decide(**inputs(3))
    with make_engine() as b:
        b.restore(snap)
        assert b.decide(**inputs(3)) == after
    assert after.rule != "stateful/first-error"


def test_snapshot_from_other_packs_is_refused() -> None:
    with RuleEngine([default_termination_pack(max_steps=3, error_budget=3)]) as a:
        snap = a.snapshot()
    b = RuleEngine([default_termination_pack(max_steps=4, error_budget=3)])
    with b, pytest.raises(RuleRuntimeError, match="snapshot was taken with different rule packs"):
        b.restore(snap)


def test_issue19_snapshot_is_read_once_until_the_facts_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run stores the facts with every step, most of which ask no rule: the engine reads
    its facts out of CLIPS once per change (decide, restore, reset), not once per step."""
    from stargraph.fathom import _engine

    reads = spy(monkeypatch, _engine, "iter_facts")
    with make_engine() as engine:
        engine.decide(**inputs(1))
        first = engine.snapshot()
        assert engine.snapshot() == first
        assert engine.snapshot() == first
        assert len(reads) == 1
        engine.decide(**inputs(2))
        second = engine.snapshot()
        assert second != first
        assert len(reads) == 2
        engine.restore(first)
        assert engine.snapshot() == first
        assert len(reads) == 3
        engine.reset()
        assert engine.snapshot() != first
        assert len(reads) == 4


QUIET = default_termination_pack(max_steps=10**9, error_budget=10**9)
"""The termination pack with limits no test reaches: no rule fires unless done is set."""


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    event=st.none() | NASTY,
    result=st.none() | NASTY,
    state=st.fixed_dictionaries(
        {
            "note": NASTY,
            "maybe": st.none() | NASTY,
            "count": st.integers(min_value=-(2**63), max_value=2**63 - 1),
            "ratio": st.floats(allow_nan=False, allow_infinity=False),
            "flag": st.booleans(),
            "level": st.none() | st.integers(min_value=-5, max_value=5),
        }
    ),
    steps=st.integers(min_value=1, max_value=3),
)
def test_issue19_the_snapshot_after_a_quiet_decision_equals_the_facts_read_back(
    event: str | None, result: str | None, state: dict[str, Any], steps: int
) -> None:
    """After a decision in which no rule fired, the engine works the snapshot out from the
    one before instead of reading CLIPS: it must be what reading CLIPS gives, key order
    included (the stored bytes of every step depend on it)."""
    fields = {"note": str, "maybe": str | None, "count": int, "ratio": float, "flag": bool}
    fields["level"] = int | None
    with RuleEngine([QUIET], fact_fields=fields) as engine:
        engine.snapshot()
        for step in range(1, steps + 1):
            decision = engine.decide(
                step=step,
                node="n\u00e9",
                state_facts=state,
                last_event=event,
                tool_result=result,
                error_count=step,
            )
            assert decision.kind == "continue"
            worked_out = engine.snapshot()
            engine._snapshot = None  # what a read from CLIPS gives
            read = engine.snapshot()
            assert worked_out == read
            assert json.dumps(worked_out) == json.dumps(read)


def test_issue19_a_quiet_decision_leaves_no_facts_to_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from stargraph.fathom import _engine

    reads = spy(monkeypatch, _engine, "iter_facts")
    with RuleEngine([QUIET], fact_fields={"attempts": int}) as engine:
        first = engine.snapshot()
        assert len(reads) == 1
        for step in range(1, 4):
            engine.decide(step=step, node="a", state_facts={"attempts": step})
            assert engine.snapshot()["facts"][1][1]["attempts"] == step
        assert len(reads) == 1  # worked out from the one read, step after step
        engine.decide(step=4, node="a", state_facts={"attempts": 4, "done": True})
        assert engine.snapshot() != first  # the done rule fired: read again
        assert len(reads) == 2
        engine.decide(step=5, node="a", state_facts={"attempts": 5})
        engine.snapshot()
        assert len(reads) == 2
        # Without a snapshot taken after the last change, the next one is read.
        engine.decide(step=6, node="a", state_facts={"attempts": 6, "done": True})
        engine.decide(step=7, node="a", state_facts={"attempts": 7})
        engine.snapshot()
        assert len(reads) == 3
