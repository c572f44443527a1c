"""Benchmark stargraph.fathom: per-step decision cost over 100,000 steps, engine creation.

Run: ``python benchmarks/bench_fathom.py``. Targets (issue 5): per-step median under 50 us
and flat from step 1 to step 100,000; environment creation + default pack load under 5 ms.
"""

from __future__ import annotations

import statistics
import sys
import time

from stargraph.fathom import RuleEngine, RulePack, default_termination_pack

STEPS = 100_000
WINDOWS = ((1, 100), (9_951, 10_050), (99_901, 100_000))
ROUTE = RulePack.from_spec(
    {
        "id": "route",
        "version": "1",
        "rules": [
            {"name": "a_b", "when": [{"node": "a"}], "then": {"goto": "b"}},
            {"name": "b_a", "when": [{"node": "b"}], "then": {"goto": "a"}},
            {
                "name": "slow_down",
                "when": [{"state.attempts": {">=": 10**9}}],
                "then": {"interrupt": "too many attempts"},
            },
        ],
    }
)
SUCCESSORS = {"a": ["b"], "b": ["a"]}
FIELDS = {"attempts": int, "done": bool, "note": str}


def per_step() -> dict[tuple[int, int], list[float]]:
    """decide() time per step (us), one engine driven through STEPS steps of a goto cycle."""
    packs = [default_termination_pack(max_steps=STEPS + 1, error_budget=STEPS + 1), ROUTE]
    times: list[float] = []
    with RuleEngine(packs, fact_fields=FIELDS, successors=SUCCESSORS) as engine:
        node = "a"
        clock = time.perf_counter_ns
        for step in range(1, STEPS + 1):
            facts = {"attempts": step, "done": False, "note": f"step {step}"}
            t0 = clock()
            decision = engine.decide(
                step=step, node=node, state_facts=facts, tool_result="ok", error_count=0
            )
            times.append((clock() - t0) / 1000)
            assert decision.kind == "goto", decision
            node = decision.target or node
    return {w: times[w[0] - 1 : w[1]] for w in WINDOWS}


def creation(repeats: int = 300) -> tuple[float, list[float]]:
    """(first creation ms, repeated creation ms): environment + default pack, ready to decide.

    The first engine for a configuration runs every static check; later engines with the
    same packs (one per run) reuse that result and build with CLIPS routers off.
    """
    pack = default_termination_pack(max_steps=25, error_budget=3)
    t0 = time.perf_counter_ns()
    RuleEngine([pack]).close()
    first = (time.perf_counter_ns() - t0) / 1e6
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        engine = RuleEngine([pack])
        samples.append((time.perf_counter_ns() - t0) / 1e6)
        engine.close()
    return first, samples


def snapshot_cost(repeats: int = 2000) -> list[float]:
    """snapshot() time (us) for a small engine, as taken with every checkpoint."""
    packs = [default_termination_pack(max_steps=10**6, error_budget=10**6), ROUTE]
    out = []
    with RuleEngine(packs, fact_fields=FIELDS, successors=SUCCESSORS) as engine:
        for step in range(1, repeats + 1):
            node = "a" if step % 2 else "b"
            facts = {"attempts": step, "done": False, "note": ""}
            engine.decide(step=step, node=node, state_facts=facts)
            t0 = time.perf_counter_ns()
            engine.snapshot()
            out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def main() -> int:
    """Print the figures; exit 1 if a target is missed."""
    print(f"python {sys.version.split()[0]}, clipspy engine, {STEPS:,} steps")
    windows = per_step()
    medians = []
    for (lo, hi), samples in windows.items():
        med = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        medians.append(med)
        print(f"decide() steps {lo:>6,}..{hi:>7,}: median {med:6.1f} us   p90 {p90:6.1f} us")
    drift = medians[-1] / medians[0]
    print(f"drift (last window / first window): {drift:.2f}x")
    first, samples = creation()
    med_create = statistics.median(samples)
    print(f"engine creation + default pack, first for its packs: {first:.2f} ms")
    print(
        f"engine creation + default pack, repeated:           median {med_create:.2f} ms   "
        f"max {max(samples):.2f} ms"
    )
    snaps = snapshot_cost()
    print(f"snapshot(): median {statistics.median(snaps):.1f} us")
    ok = max(medians) < 50 and drift < 1.5 and med_create < 5 and first < 5
    print("targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
