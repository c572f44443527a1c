"""Docstring examples in stargraph.fathom run as tests, and a failed load runs nothing."""

from __future__ import annotations

import doctest
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stargraph.errors import RuleCompileError
from stargraph.fathom import RuleEngine, RulePack

MODULES = [
    "stargraph.fathom",
    "stargraph.fathom._allow",
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


TRUST_PAGE = Path(__file__).resolve().parents[2] / "docs" / "trust.md"


@pytest.mark.parametrize("index", [0, 1])
def test_trust_page_examples_run_and_print_what_they_say(index: int, tmp_path: Path) -> None:
    """Each Python block of docs/trust.md ends with a ``# prints:`` comment; the block runs
    (in a fresh interpreter, in an empty directory) and prints exactly that."""
    blocks = re.findall(r"```python\n(.*?)```", TRUST_PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 2
    code = blocks[index]
    code_part, _, said = code.partition("# prints:\n")
    expected = " ".join(line.removeprefix("#").strip() for line in said.splitlines())
    result = subprocess.run(
        [sys.executable, "-c", code_part],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert " ".join(result.stdout.split()) == expected
    assert list(tmp_path.iterdir()) == []  # the hostile examples created nothing
