"""The benchmark workloads compute the same final state on every engine (no timing here).

Each workload is built at tiny sizes on stargraph, LangGraph and plain Python and must reach
its expected ``(counter, items)``; the harness must refuse to time engines that disagree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

# `benchmarks` is a top-level package of the repository, importable from its root (stargraph
# also resolves the node refs `benchmarks.workloads:...` by import).
ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.core_harness import StateMismatch, check_agreement, main  # noqa: E402
from benchmarks.workloads import ENGINES, State, Workload, all_workloads, snapshot  # noqa: E402

WORKLOADS = {w.name: w for w in all_workloads()}


def test_core_workloads_are_registered() -> None:
    assert {"chain10", "chain100", "selfloop", "fanout", "send"} <= set(WORKLOADS)
    for workload in WORKLOADS.values():
        assert set(workload.builders) == set(ENGINES), workload.name


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_engines_agree_on_final_state(name: str, size: int) -> None:
    workload = WORKLOADS[name]
    finals = check_agreement(workload, size)
    assert set(finals.values()) == {workload.expected(size)}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_node_count_matches_executions(name: str) -> None:
    # Every node of the core workloads appends exactly one item, so the items count the
    # node executions the timing divides by.
    workload = WORKLOADS[name]
    _, items = workload.expected(4)
    assert len(items) == workload.nodes(4)


def test_repeated_invocations_do_not_leak_state() -> None:
    runner = WORKLOADS["chain10"].builders["stargraph"](3)
    assert snapshot(runner()) == snapshot(runner()) == (3, ("0", "1", "2"))


def _wrong(size: int) -> Callable[[], State]:
    """A builder whose runner returns a wrong final state."""
    return lambda: State(counter=size, items=["nope"])


def test_disagreeing_engine_aborts() -> None:
    workload = WORKLOADS["chain10"]
    broken: Workload = replace(workload, builders={**workload.builders, "plain": _wrong})
    with pytest.raises(StateMismatch, match=r"'chain10'.*engines disagree"):
        check_agreement(broken, 2)


def test_quick_run_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--quick", "--rounds", "1", "--only", "chain10,send", "--no-import-time"])
    out = capsys.readouterr().out
    assert status == 0
    assert "LangGraph/stargraph" in out
    assert "stargraph/plain" in out
    assert "chain10" in out
    assert "send" in out


def test_unknown_workload_is_rejected() -> None:
    with pytest.raises(SystemExit, match="unknown workload"):
        main(["--only", "nope"])
