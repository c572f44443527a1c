"""Docstring examples in stargraph.fathom run as tests, and a failed load runs nothing."""

from __future__ import annotations

import doctest
import importlib

import pytest

from stargraph.errors import RuleCompileError
from stargraph.fathom import RuleEngine, RulePack

MODULES = [
    "stargraph.fathom",
    "stargraph.fathom._engine",
    "stargraph.fathom._load",
    "stargraph.fathom._pack",
    "stargraph.fathom._sexpr",
    "stargraph.fathom._spec",
    "stargraph.fathom._values",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_a_pack_that_fails_to_load_runs_nothing() -> None:
    """CLIPS's load() is not atomic; the engine builds construct by construct into a fresh
    environment and drops it on any error, before a single fact exists."""
    calls: list[int] = []

    def record() -> bool:
        calls.append(1)
        return True

    pack = RulePack.from_clp(
        "half",
        "1",
        "(defrule first (sg-step) (test (record))\n"
        "  => (assert (sg-decision (kind halt) (rule first))))\n"
        "(defrule second (sg-step (bogus 1)) => )\n",
    )
    with pytest.raises(RuleCompileError, match=r"rule 'second', line 3: CLIPS: \[TMPLTDEF1\]"):
        RuleEngine([pack], functions={"record": record})
    assert calls == []
