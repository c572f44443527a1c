"""The rule-engine pool lives in ``stargraph.fathom`` and fathom implements the runtime's one
rule-decision seam."""

from __future__ import annotations

import threading
import typing

from stargraph import fathom
from stargraph.fathom import Decision, EnginePool, RuleEngine, default_termination_pack
from stargraph.runtime._rules import RANK, DecisionMaker, EngineDecision, StepDecision


def _pack() -> fathom.RulePack:
    return default_termination_pack(max_steps=100, error_budget=3)


def _pool(made: list[RuleEngine]) -> EnginePool:
    def make() -> RuleEngine:
        engine = RuleEngine([_pack()])
        made.append(engine)
        return engine

    return EnginePool(make)


def test_a_closed_engine_goes_back_to_its_pool_reset() -> None:
    made: list[RuleEngine] = []
    pool = _pool(made)
    first = pool.acquire()
    assert first.decide(step=1, node="n", state_facts={"done": True}).kind == "finish"
    snapshot = first.snapshot()
    first.close()
    again = pool.acquire()
    assert again is first
    assert len(made) == 1
    # Reset: it holds a new engine's facts again, not those of the run that used it.
    fresh = RuleEngine([_pack()])
    try:
        assert again.snapshot() == fresh.snapshot()
        again.restore(snapshot)
        assert again.snapshot() == snapshot
    finally:
        fresh.close()
        made[0].close()


def test_each_thread_gets_engines_made_on_it() -> None:
    made: list[RuleEngine] = []
    pool = _pool(made)
    here = pool.acquire()
    here.close()
    there: list[object] = []

    def other() -> None:
        engine = pool.acquire()
        there.append(engine)
        engine.close()
        made[-1].close()  # closed on the thread that made it

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert len(made) == 2
    assert there[0] is not here
    made[0].close()


def test_fathom_implements_the_runtime_decision_seam() -> None:
    # One protocol: fathom's name for the seam is the runtime's protocol itself.
    assert fathom.DecisionEngine is DecisionMaker
    engine = RuleEngine([_pack()])
    pool = EnginePool(lambda: RuleEngine([]))
    pooled = pool.acquire()
    try:
        assert isinstance(engine, DecisionMaker)
        assert isinstance(pooled, DecisionMaker)
        # Checked by mypy too: fathom's Decision is what the step loop folds.
        decision: EngineDecision = engine.decide(step=1, node="n", state_facts={"done": True})
        combined = StepDecision()
        combined.add(decision)
        combined.add(Decision(kind="goto", target="b", rule="p/go"))
        assert (combined.kind, combined.rule, combined.targets) == ("finish", decision.rule, ["b"])
        assert set(RANK) == set(typing.get_args(fathom.DecisionKind))
    finally:
        engine.close()
        pooled._engine.close()
