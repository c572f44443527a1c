"""Stores declare what they can do in ``features``; the runtime reads that and nothing else
(a store without the attribute gets the plain protocol), and every step reaches every store
through ``commit_step``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stargraph.checkpoint import (
    CheckpointStore,
    MemoryStore,
    SqliteStore,
    StepRecord,
    TaskRecord,
    WriteRecord,
)
from stargraph.checkpoint._records import trusted_fields
from stargraph.graph import END, START, Graph


class _Count(BaseModel):
    n: int = 0


def _bump(state: _Count) -> dict[str, Any]:
    return {"n": state.n + 1}


def _chain() -> Graph[_Count]:
    graph = Graph("features-chain", state=_Count)
    for node in ("a", "b", "c"):
        graph = graph.with_node(node, _bump)
    return graph.with_edge(START, "a").with_edge("a", "b").with_edge("b", "c").with_edge("c", END)


_PROTOCOL = frozenset(name for name in vars(CheckpointStore) if not name.startswith("_"))


class _ThirdParty:
    """A store written outside stargraph, on top of a ``MemoryStore``: it notes the steps
    and status changes it is given, and declares ``features`` only when told to."""

    def __init__(self, inner: MemoryStore, features: frozenset[str] | None = None) -> None:
        self._inner = inner
        self.commits: list[tuple[object, str]] = []
        self.statuses: list[str] = []
        if features is not None:
            self.features = features

    def __getattr__(self, name: str) -> Any:
        # The protocol's methods only: the inner store's features are not this store's.
        if name not in _PROTOCOL:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def commit_step(self, run_id: str, step: StepRecord, **kwargs: Any) -> None:
        self.commits.append((step, kwargs.get("status", "running")))
        self._inner.commit_step(run_id, step, **kwargs)

    def set_status(self, run_id: str, status: Any, **kwargs: Any) -> None:
        self.statuses.append(status)
        self._inner.set_status(run_id, status, **kwargs)


def _run(store: Any, run_id: str = "r") -> list[StepRecord]:
    assert _chain().compile(store=store).invoke({}, run_id=run_id).n == 3
    steps: list[StepRecord] = store.get_steps(run_id)
    return steps


def test_issue45_the_stores_declare_their_features(tmp_path: Path) -> None:
    assert MemoryStore().features == {"releases_on_final_commit", "step_values", "node_cache"}
    with SqliteStore(tmp_path / "f.db") as store:
        assert store.features == {
            "releases_on_final_commit",
            "refer_to_facts",
            "write_run",
            "node_cache",
        }


def test_issue45_a_store_declaring_final_commit_ends_the_run_in_its_last_commit() -> None:
    store = _ThirdParty(MemoryStore(), frozenset({"releases_on_final_commit"}))
    assert isinstance(store, CheckpointStore)
    _run(store)
    assert [status for _, status in store.commits] == ["running", "running", "done"]
    assert store.statuses == []  # no status change of its own: the last commit was it
    assert store.get_run("r").status == "done"


def test_issue45_a_store_without_features_gets_records_and_a_status_change() -> None:
    plain, reference = _ThirdParty(MemoryStore()), MemoryStore()
    assert isinstance(plain, CheckpointStore)
    steps = _run(plain)
    # Every step as a StepRecord, through commit_step, and the end as a status change.
    assert all(type(step) is StepRecord for step, _ in plain.commits)
    assert [status for _, status in plain.commits] == ["running"] * 3
    assert plain.statuses == ["done"]
    (record,) = plain.list_runs()
    assert (record.status, record.last_step, record.owner) == ("done", 3, None)

    def kept(steps: list[StepRecord]) -> list[dict[str, Any]]:
        return [s.model_dump(exclude={"created_ms"}) for s in steps]

    assert kept(steps) == kept(_run(reference))


def test_issue45_steps_kept_as_values_read_back_as_the_validated_records() -> None:
    store = MemoryStore()
    app = _chain().compile(store=store, snapshot_every=2)
    app.invoke({}, run_id="r")
    steps = store.get_steps("r")
    assert [s.step for s in steps] == [0, 1, 2, 3]
    for step in steps:
        assert step == StepRecord.model_validate(step.model_dump())
    assert steps[1].writes == (WriteRecord(node="a", writes={"n": 1}),)
    assert steps[1].next == (TaskRecord(node="b"),)
    assert steps[2].snapshot == {"n": 2}
    assert store.snapshot_step("r", 3) == 2
    assert store.get_steps("r")[1] is steps[1]  # built once, then kept


def test_issue45_a_record_built_without_validation_has_every_default() -> None:
    task = trusted_fields(TaskRecord, {"node": "a", "payload": None})
    assert task.index == 0
    assert task == TaskRecord(node="a", payload=None)
    assert task.model_fields_set == {"node", "payload"}
    step = trusted_fields(StepRecord, {"step": 4, "writes": ()})
    assert step == StepRecord(step=4)
    assert (step.carried, step.as_node, step.created_ms) == ({}, None, 0)
    assert step.carried is not StepRecord(step=4).carried  # a default factory's own value
