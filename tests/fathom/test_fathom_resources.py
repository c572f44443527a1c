"""Resource hazards of clipspy 1.0.6 the engine designs around: per-step cost that grows,
environments that leak, and construction cost."""

from __future__ import annotations

import gc
import os
from typing import Any

import clips
import pytest

from stargraph.fathom import RuleEngine, RulePack, default_termination_pack

PAGE = os.sysconf("SC_PAGE_SIZE")
ROUTE = RulePack.from_spec(
    {
        "id": "route",
        "version": "1",
        "rules": [
            {"name": "a_b", "when": [{"node": "a"}], "then": {"goto": "b"}},
            {"name": "b_a", "when": [{"node": "b"}], "then": {"goto": "a"}},
            {
                "name": "mark",
                "when": [{"error_count": {">=": 1}}],
                "then": {"assert": {"name": "erred", "value": True}},
            },
        ],
    }
)


def rss() -> int:
    """Resident set size in bytes, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def live_environments() -> int:
    """clipspy's module-global table holds one entry per live environment (counted after a
    collection, since earlier tests may leave engines in reference cycles)."""
    gc.collect()
    return len(clips.common.ENVIRONMENT_DATA)


def one_run() -> None:
    """Create an engine, take a few decisions and a snapshot, discard it."""
    packs = [default_termination_pack(max_steps=50, error_budget=3), ROUTE]
    with RuleEngine(packs, fact_fields={"n": int}, successors={"a": ["b"], "b": ["a"]}) as e:
        node = "a"
        for step in range(1, 6):
            d = e.decide(step=step, node=node, state_facts={"n": step}, tool_result="x" * step)
            node = d.target or node
        e.snapshot()


@pytest.mark.slow
def test_thousand_engines_created_and_discarded_leave_rss_flat() -> None:
    baseline_envs = live_environments()
    for _ in range(200):  # warm-up: allocator pools, caches, lazily imported code
        one_run()
    gc.collect()
    before = rss()
    for _ in range(1000):
        one_run()
    gc.collect()
    after = rss()
    assert live_environments() == baseline_envs
    assert after <= before * 1.10, f"RSS grew from {before} to {after} bytes"


class Owner:
    """Holds an engine and hands a bound method of itself to it as a rule function: the
    cycle clipspy's global function table would otherwise keep alive forever."""

    def __init__(self) -> None:
        pack = RulePack.from_clp(
            "own",
            "1",
            "(defrule r (sg-step (step ?s)) (test (check ?s)) =>"
            ' (assert (sg-decision (kind halt) (reason "checked") (rule r))))',
        )
        self.calls = 0
        self.engine = RuleEngine([pack], functions={"check": self.check})

    def check(self, step: int) -> bool:
        """A rule function with a reference back to the engine's owner."""
        self.calls += 1
        return step >= 2


def test_bound_method_callback_does_not_leak_the_environment_once_closed() -> None:
    baseline = live_environments()
    owners = [Owner() for _ in range(20)]
    for owner in owners:
        assert owner.engine.decide(step=2, node="n", state_facts={}).reason == "checked"
        assert owner.calls == 2  # once for the initial step fact, once for step 2
    assert live_environments() == baseline + 20
    for owner in owners:
        owner.engine.close()
    del owners, owner
    gc.collect()
    assert live_environments() == baseline


def test_engine_without_callbacks_is_freed_without_close() -> None:
    baseline = live_environments()
    engine = RuleEngine([default_termination_pack(max_steps=3, error_budget=3)])
    engine.decide(step=1, node="n", state_facts={})
    assert live_environments() == baseline + 1
    del engine
    gc.collect()
    assert live_environments() == baseline


def _steps(engine: RuleEngine, first: int, count: int) -> None:
    """``count`` decisions from step ``first``, snapshotted every tenth step like a
    checkpointing executor would, and restored from that snapshot every hundredth like a
    resumed run."""
    for step in range(first, first + count):
        engine.decide(step=step, node="a" if step % 2 else "b", state_facts={"n": step})
        if step % 10 == 0:
            snapshot = engine.snapshot()
            if step % 100 == 0:
                engine.restore(snapshot)


@pytest.mark.slow
def test_per_step_cost_stays_flat_over_many_steps() -> None:
    """clipspy never releases facts Python held and then retracted, so a naive engine slows
    linearly (50 us -> 470 us after 15k steps): CLIPS keeps every such fact as busy garbage
    that each later retract walks past. This one never holds such facts, even when it is
    snapshotted every tenth step and restored every hundredth, so the memory CLIPS holds
    (the garbage a decision walks) stays flat. Measured in bytes, not time: a timing bound
    fails on a loaded machine."""
    packs = [default_termination_pack(max_steps=10**9, error_budget=10**9), ROUTE]
    with RuleEngine(packs, fact_fields={"n": int}, successors={"a": ["b"], "b": ["a"]}) as e:
        _steps(e, 1, 200)
        before = clips_memory(e)
        _steps(e, 201, 3000)
        after = clips_memory(e)
    assert after - before < 4096, f"CLIPS memory grew by {after - before} bytes in 3000 steps"


def clips_memory(engine: RuleEngine) -> int:
    """Bytes CLIPS holds for the engine's environment, from ``(mem-used)`` (constant text)."""
    env = engine._env
    assert env is not None
    used = env.eval("(mem-used)")
    assert isinstance(used, int)
    return used


def test_snapshot_restore_and_reset_hold_no_clips_memory() -> None:
    """clipspy wraps every fact it hands to Python in an object whose release fails silently,
    so a restore through ``Template.assert_fact`` (or a snapshot through ``facts()``) kept
    each fact busy forever once the next step retracted it: ~750 bytes per cycle, and every
    later decision walked that garbage (decide() went from 22 µs to 150 µs after 5,000
    pooled-engine restores). Restores, snapshots and resets now go through the C API."""
    packs = [default_termination_pack(max_steps=10**9, error_budget=10**9), ROUTE]
    with RuleEngine(packs, fact_fields={"n": int}, successors={"a": ["b"], "b": ["a"]}) as e:
        initial = e.snapshot()

        def cycles(count: int) -> None:
            for step in range(1, count + 1):
                e.decide(step=step, node="a", state_facts={"n": step}, error_count=1)
                e.restore(e.snapshot())
                e.decide(step=step + 1, node="b", state_facts={"n": step})
                e.restore(initial)
                e.decide(step=step + 2, node="a", state_facts={"n": step})
                e.reset()

        cycles(20)
        before = clips_memory(e)
        cycles(300)
        after = clips_memory(e)
    assert after - before < 4096, f"CLIPS memory grew by {after - before} bytes in 300 cycles"


def test_reset_gives_the_state_and_decisions_of_a_new_engine() -> None:
    """What a pooled engine does between runs: after reset() it holds exactly a new engine's
    facts and decides exactly as a new engine would, deffacts-triggered rules included."""
    greet = RulePack.from_clp(
        "greet",
        "1",
        """
        (deftemplate pending-greeting (slot to (default "world")))
        (deffacts initial-greeting (pending-greeting))
        (defrule greet
          ?p <- (pending-greeting)
          =>
          (retract ?p)
          (assert (sg-decision (kind halt) (reason "greeted") (rule greet))))
        """,
    )
    packs = [greet, ROUTE]
    kwargs: dict[str, Any] = {"fact_fields": {"n": int}, "successors": {"a": ["b"], "b": ["a"]}}
    with RuleEngine(packs, **kwargs) as fresh, RuleEngine(packs, **kwargs) as used:
        for step in range(1, 6):
            used.decide(step=step, node="a", state_facts={"n": step}, error_count=2)
        assert used.snapshot() != fresh.snapshot()
        used.reset()
        assert used.snapshot() == fresh.snapshot()
        first = [e.decide(step=1, node="a", state_facts={"n": 1}) for e in (fresh, used)]
    assert first[0] == first[1]
    assert (first[0].kind, first[0].rule) == ("halt", "greet/greet")
