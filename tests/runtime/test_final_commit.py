"""A durable run ends in its last commit: the step, status ``done`` and the lease released
in one transaction, with no status change of its own after it."""

from __future__ import annotations

import itertools
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import CheckpointStore, RunStatus
from stargraph.errors import NodeError
from stargraph.graph import END, START, Graph

pytestmark = pytest.mark.stores("memory", "sqlite")


class S(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    n: int = 0


def bump(state: S) -> dict[str, Any]:
    return {"log": [f"s{state.n}"], "n": state.n + 1}


def boom(state: S) -> dict[str, Any]:
    raise RuntimeError("boom")


def chain(n: int, *, failing: str | None = None) -> Graph[S]:
    names = [f"c{i}" for i in range(n)]
    graph = Graph("chain", state=S)
    for name in names:
        graph = graph.with_node(name, boom if name == failing else bump)
    graph = graph.with_edge(START, names[0]).with_edge(names[-1], END)
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph


def counting(store: CheckpointStore, monkeypatch: pytest.MonkeyPatch) -> list[RunStatus]:
    """The statuses the store is given by ``set_status`` from now on, in order."""
    statuses: list[RunStatus] = []
    original = store.set_status

    def set_status(run_id: str, status: RunStatus, **fields: Any) -> None:
        statuses.append(status)
        original(run_id, status, **fields)

    monkeypatch.setattr(store, "set_status", set_status)
    return statuses


def test_issue19_a_finished_run_is_done_and_released_after_its_last_commit(
    store: CheckpointStore,
) -> None:
    # What the last commit costs (it also ends the run) is the chain1.sqlite CPU budget.
    app = chain(3).compile(store=store)
    final = app.invoke({}, run_id="r")
    assert final == S(log=["s0", "s1", "s2"], n=3)
    run = app.get_run("r")
    assert (run.status, run.last_step, run.owner, run.lease_expires) == ("done", 3, None, None)
    assert [s.step for s in app.history("r")] == [0, 1, 2, 3]
    assert app.get_state("r") == final


def test_issue19_a_run_that_stops_early_still_ends_with_a_status_change(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing run is not folded: its last commit says running, then it is marked failed."""
    statuses = counting(store, monkeypatch)
    app = chain(2, failing="c1").compile(store=store)
    with pytest.raises(NodeError, match="boom"):
        app.invoke({}, run_id="r")
    assert statuses == ["failed"]
    run = app.get_run("r")
    assert (run.status, run.last_step, run.owner) == ("failed", 1, None)
