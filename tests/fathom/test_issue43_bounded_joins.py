"""A small rule pack can neither take more than the engine's memory limit nor hold a
decision past its budget: pattern matching (which CLIPS does inside one C call per assert,
where no check runs) is bounded statically, and every reset runs under the budget.

The attacks run in a child process under an address-space ceiling and a hard deadline, so
an engine that does blow up fails the test without taking the machine down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import stargraph
from stargraph.errors import RuleBudgetError, RuleCompileError
from stargraph.fathom import EnginePool, RuleBounds, RuleEngine, RulePack, validate_pack

SRC = str(Path(stargraph.__file__).resolve().parents[1])
MEMORY_LIMIT = 32 * 2**20
BUDGET_S = 1.0
# Far above what a bounded engine needs, far below what the machine has.
CEILING = 3 * 2**30
HARD_DEADLINE_S = 60
# What the child may hold beyond the memory limit (CLIPS's own structures, the allocator).
SLACK = 48 * 2**20


def _facts(n: int, template: str = "f") -> str:
    return " ".join(f"({template} (v {i}))" for i in range(n))


# Sixty literal facts and one rule joining four unconstrained patterns: 60**4 matches.
AT_START = f"(deftemplate f (slot v))\n(deffacts d {_facts(60)})\n(defrule j (f) (f) (f) (f) =>)"
# The same join, empty until a rule asserts the fact the first pattern needs.
AT_DECIDE = (
    "(deftemplate f (slot v))\n(deftemplate g (slot v))\n"
    f"(deffacts d {_facts(60)})\n"
    "(defrule go (sg-step) => (assert (g (v 1))))\n"
    "(defrule j (g) (f) (f) (f) (f) =>)"
)
# A rule asserting the facts it matches itself, 150 of them, then the trigger of a join.
LOOPING = (
    "(deftemplate f (slot v))\n(deftemplate g (slot v))\n(deffacts d (f (v 0)))\n"
    "(defrule grow (f (v ?v)) (test (< ?v 150)) => (assert (f (v (+ ?v 1)))))\n"
    "(defrule trigger (f (v 150)) => (assert (g (v 1))))\n"
    "(defrule j (g) (f) (f) (f) =>)"
)


def _attack(body: str) -> dict[str, object]:
    """Run ``body`` (which sets ``pack``'s attack going) in a child; report what it raised,
    how long it took and how much memory it added."""
    code = "\n".join(
        [
            "import json, resource, sys, time",
            f"resource.setrlimit(resource.RLIMIT_AS, ({CEILING}, {CEILING}))",
            f"sys.path.insert(0, {SRC!r})",
            "from stargraph import fathom",
            "from stargraph.errors import StargraphError",
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024",
            "start = time.monotonic()",
            "try:",
            textwrap.indent(body, "    "),
            "    outcome = 'no error'",
            "except StargraphError as exc:",
            "    outcome = type(exc).__name__ + ': ' + str(exc)",
            "except MemoryError:",
            "    outcome = 'MemoryError'",
            "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024",
            "print(json.dumps({'outcome': outcome, 'seconds': time.monotonic() - start,",
            "                  'grew': peak - before}))",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=HARD_DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def _bounded(report: dict[str, object], error: str) -> str:
    outcome = str(report["outcome"])
    assert outcome.startswith(error + ": "), outcome
    assert float(str(report["seconds"])) < BUDGET_S * 10, report
    assert int(str(report["grew"])) < MEMORY_LIMIT + SLACK, report
    return outcome


def _engine(pack: str, extra: str = "") -> str:
    assert len(pack.encode()) <= 1024  # the attack is a small pack
    return (
        f"pack = fathom.RulePack.from_clp('p', '1', {pack!r})\n"
        f"engine = fathom.RuleEngine([pack], memory_limit={MEMORY_LIMIT}, "
        f"decide_timeout_s={BUDGET_S}, run_limit=100_000)\n"
        f"{extra}"
    )


def test_issue43_a_deffacts_join_cannot_blow_up_construction() -> None:
    outcome = _bounded(_attack(_engine(AT_START)), "RuleCompileError")
    assert "rule 'j'" in outcome
    assert "max_matches" in outcome


def test_issue43_a_join_triggered_at_decide_cannot_blow_up_the_decision() -> None:
    outcome = _bounded(
        _attack(_engine(AT_DECIDE, "engine.decide(step=1, node='n', state_facts={})")),
        "RuleCompileError",
    )
    assert "rule 'j'" in outcome
    assert "1,296,000,000 partial matches" in outcome


def test_issue43_facts_a_looping_rule_asserts_count_towards_the_bound() -> None:
    outcome = _bounded(
        _attack(_engine(LOOPING, "engine.decide(step=1, node='n', state_facts={})")),
        "RuleCompileError",
    )
    assert "rule 'j'" in outcome
    assert "max_matches" in outcome


def test_issue43_a_pooled_engine_is_bounded_on_every_run() -> None:
    body = (
        f"pack = fathom.RulePack.from_clp('p', '1', {AT_START!r})\n"
        f"pool = fathom.EnginePool(lambda: fathom.RuleEngine([pack], "
        f"memory_limit={MEMORY_LIMIT}, decide_timeout_s={BUDGET_S}))\n"
        "for _ in range(3):\n"
        "    try:\n"
        "        pool.acquire().close()\n"
        "    except StargraphError as exc:\n"
        "        last = exc\n"
        "raise last\n"
    )
    _bounded(_attack(body), "RuleCompileError")


# A join within the static bounds (300 x 300 matches, about 20 MB) that is over a 4 MiB limit.
WIDE = f"(deftemplate f (slot v))\n(deffacts d {_facts(300)})\n(defrule pair (f) (f) =>)"


def test_issue43_the_reset_of_a_new_engine_runs_under_the_memory_limit() -> None:
    pack = RulePack.from_clp("p", "1", WIDE)
    with pytest.raises(RuleBudgetError) as info:
        RuleEngine([pack], memory_limit=4 * 2**20)
    message = str(info.value)
    assert "the rules failed while the engine started" in message
    assert "over the engine's memory_limit of 4,194,304" in message
    assert "while it matched the packs' facts" in message


def test_issue43_a_pooled_reset_runs_under_the_memory_limit() -> None:
    pack = RulePack.from_clp("p", "1", WIDE)
    pool = EnginePool(lambda: RuleEngine([pack], memory_limit=4 * 2**20))
    for _ in range(2):  # no broken engine is kept for the next run
        with pytest.raises(RuleBudgetError, match="memory_limit of 4,194,304"):
            pool.acquire()


# --------------------------------------------------------------------------- static bounds


def _refusal(source: str, bounds: RuleBounds | None = None) -> str:
    pack = RulePack.from_clp("p", "1", source)
    with pytest.raises(RuleCompileError) as info:
        validate_pack(pack) if bounds is None else validate_pack(pack, bounds=bounds)
    return str(info.value)


def test_issue43_the_match_bound_names_pack_rule_line_and_bound() -> None:
    message = _refusal(AT_START)
    assert (
        "pack 'p' v1, rule 'j', line 3: the rule can hold up to 12,960,000 partial matches "
        "(4 patterns, each multiplying by the facts it can match), over the bound of 100,000 "
        "(max_matches)"
    ) in message
    assert "bounds=RuleBounds(max_matches=...)" in message


def test_issue43_literal_slot_values_narrow_the_count() -> None:
    # Each pattern can match one fact of the sixty: a product of 1.
    validate_pack(
        RulePack.from_clp(
            "p",
            "1",
            f"(deftemplate f (slot v))\n(deffacts d {_facts(60)})\n"
            "(defrule j (f (v 1)) (f (v 2)) (f (v 3|4)) (f (v ?x)) =>)",
        )
    )
    # A shared variable does not narrow it: every fact may hold the same value.
    message = _refusal(
        "(deftemplate f (slot k) (slot v))\n"
        f"(deffacts d {' '.join(f'(f (k 1) (v {i}))' for i in range(60))})\n"
        "(defrule j (f (k ?k)) (f (k ?k)) (f (k ?k)) (f (k ?k)) =>)"
    )
    assert "rule 'j'" in message
    assert "12,960,000 partial matches" in message


def test_issue43_the_bound_is_configurable() -> None:
    validate_pack(RulePack.from_clp("p", "1", AT_START), bounds=RuleBounds(max_matches=2 * 10**7))


def test_issue43_the_pattern_bound_names_the_rule() -> None:
    rule = "(defrule long " + " ".join(["(sg-step)"] * 17) + " =>)"
    message = _refusal(rule)
    assert (
        "pack 'p' v1, rule 'long', line 1: the rule has 17 patterns, over the bound of 16 "
        "(max_patterns)"
    ) in message


def test_issue43_the_fact_bound_names_the_deffacts() -> None:
    message = _refusal(
        f"(deftemplate f (slot v))\n(deffacts few {_facts(10)})\n(deffacts many {_facts(1000)})"
    )
    assert (
        "pack 'p' v1, deffacts 'many', line 3: the packs' deffacts assert 1,010 facts, over "
        "the bound of 1,000 (max_facts)"
    ) in message


def test_issue43_the_bound_holds_over_all_rules_and_packs_together() -> None:
    rules = "\n".join(f"(defrule r{i} (f) (f) =>)" for i in range(11))
    facts = f"(deftemplate f (slot v))\n(deffacts d {_facts(100)})"
    # Alone, the rules match nothing and the facts feed no rule.
    validate_pack(RulePack.from_clp("facts", "1", facts))
    with pytest.raises(RuleCompileError) as info:
        RuleEngine([RulePack.from_clp("facts", "1", facts), RulePack.from_clp("rules", "1", rules)])
    message = str(info.value)
    assert "pack 'rules' v1, rule 'r0', line 1: the rules together can hold up to " in message
    assert "110,000 partial matches, over the bound of 100,000 (max_matches)" in message
