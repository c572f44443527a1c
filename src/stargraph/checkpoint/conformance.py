"""The conformance suite every ``CheckpointStore`` must pass (STYLE 6).

Subclass :class:`CheckpointStoreConformance` in a test module and provide a ``store``
fixture that yields a fresh, empty store and closes it afterwards::

    import pytest
    from stargraph.checkpoint import SqliteStore
    from stargraph.checkpoint.conformance import CheckpointStoreConformance

    class TestSqliteStore(CheckpointStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            store = SqliteStore(tmp_path / "runs.db")
            yield store
            store.close()

The tests check protocol semantics only (what ``CheckpointStore``'s docstrings promise),
never how a store lays out its data, so the same suite runs on memory, SQLite and
PostgreSQL. It needs ``pytest``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, get_args

import pytest

from stargraph.checkpoint._lease import HOST, Lease, new_owner
from stargraph.checkpoint._node_cache import node_cache_of
from stargraph.checkpoint._protocol import CheckpointStore, StoreFeature, features_of
from stargraph.checkpoint._records import (
    MAX_ERROR_CHARS,
    JournalEntry,
    PendingWrite,
    RunOwner,
    RunRecord,
    StepRecord,
    StepValues,
    TaskRecord,
    WriteRecord,
)
from stargraph.errors import (
    CheckpointError,
    CorruptCheckpointError,
    LeaseLostError,
    RunBusyError,
    RunNotFoundError,
    ThreadBusyError,
)

__all__ = ["ODD_VALUES", "CheckpointStoreConformance", "make_run", "make_step", "same_value"]

# JSON data that stores must give back exactly: unicode outside the BMP, NUL and control
# characters, escapes, deep nesting, large and negative numbers, floats, empty containers.
AWKWARD: dict[str, Any] = {
    "unicode": "naïve 日本語 🦀 \u0000 nul \t\n\r \\ \" ' \u2028 \ufeff",
    "\u0000key with nul 🔑": [None, True, False, 0, -1, 2**53 + 1, -(2**63), 1.5, -0.25, 1e300],
    "empty": {"list": [], "dict": {}, "str": ""},
    "nested": {"a": [{"b": [{"c": [{"d": [{"e": "deep"}]}]}]}]},
    "long": "x" * 100_000,
    "many": {f"k{i}": list(range(i % 7)) for i in range(2_000)},
}


# Values every store must give back identically (``same_value``): the float specials JSON
# has no spelling for, negative zero, nested containers holding them, and odd strings.
ODD_VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "negative zero": -0.0,
    "tiny and huge": [5e-324, 1.7976931348623157e308, -2.2250738585072014e-308],
    "nested": {"a": [math.nan, {"b": [math.inf, -math.inf, {"c": [-0.0, [], {}]}]}], "d": None},
    "list of specials": [math.nan, math.inf, -math.inf, -0.0, 0.0, 1.5],
    "empty": "",
    "nul": "\x00",
    "nul inside": "a\x00b\x00",
    "astral emoji": "🦀🧑‍🚀🏳️‍🌈 𝄞 \U0010fffd",
    "rtl marks": "\u202eabc\u202c \u200f\u200e \u2067x\u2069 مرحبا שלום",
    "controls": "\x01\x1f\x7f\u0085\u2028\u2029\ufeff",
    "very long": "ab🦀\x00" * 50_000,
    "NaN as text": "NaN",
    "Infinity as text": ["Infinity", "-Infinity", "null"],
    "deep": {"k": [[[[[[[[[[[[[[[[[[[[math.nan]]]]]]]]]]]]]]]]]]]]},
    "odd keys": {"": 1, "\x00": 2, "🦀": 3, "\u202e": 4, "NaN": math.nan},
}


def same_value(a: Any, b: Any) -> bool:
    """``a == b`` where NaN equals NaN, ``-0.0`` differs from ``0.0``, and types must match
    exactly (a tuple is not a list, ``1`` is not ``1.0`` or ``True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def _foreign_owner(token: str = "foreign-token", lease_s: float = 3600.0) -> RunOwner:
    """An owner on another host whose lease is fresh: alive as far as anyone can tell."""
    return RunOwner(
        token=token, host="another-host.invalid", pid=4242, started_at="x", lease_s=lease_s
    )


def _dead_owner(token: str = "dead-token") -> RunOwner:
    """An owner on this host whose process is gone: this pid now runs another process."""
    return RunOwner(token=token, host=HOST, pid=os.getpid(), process_start=-1, lease_s=3600.0)


def _released(run: RunRecord) -> RunRecord:
    """``run``, once checked to hold no lease: no owner and no expiry time."""
    assert (run.owner, run.lease_expires) == (None, None), f"{run.run_id} still holds a lease"
    return run


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for i in range(levels):
        value = {"level": i, "child": [value]}
    return value


def make_run(run_id: str = "run-1", **fields: Any) -> RunRecord:
    """A run record with placeholder identity fields; ``fields`` override them."""
    base: dict[str, Any] = {
        "run_id": run_id,
        "graph_name": "g",
        "graph_hash": "sha256:" + "a" * 64,
        "code_hash": "sha256:" + "b" * 64,
    }
    return RunRecord(**(base | fields))


def make_step(step: int, *, snapshot: bool = False, **fields: Any) -> StepRecord:
    """A step record whose writes identify the step; ``snapshot=True`` adds a full snapshot."""
    base: dict[str, Any] = {
        "step": step,
        "writes": (WriteRecord(node=f"n{step}", writes={"x": step, "log": [f"n{step}"]}),),
        "next": (TaskRecord(node=f"n{step + 1}"),),
    }
    if snapshot or step == 0:
        base["snapshot"] = {"x": step, "log": [f"n{i}" for i in range(step + 1)]}
    return StepRecord(**(base | fields))


def _takes_fact_references(store: CheckpointStore) -> None:
    """Skip unless ``store`` declares ``features`` (with ``refer_to_facts`` or without): a
    store written before features is never given a reference to rule facts, and one that
    declares features reads such references back whether or not the runtime writes them."""
    if not hasattr(store, "features"):
        pytest.skip("the store does not declare features: it gets rule facts in full")


def _write_by_events(store: CheckpointStore) -> Callable[..., None]:
    """``write_run`` for a store that does not declare it: the protocol's events in turn."""

    def write_run(
        record: RunRecord,
        steps: Sequence[StepRecord],
        *,
        pending: Sequence[PendingWrite],
        journal: Sequence[JournalEntry],
        graph: tuple[str, bytes] | None,
    ) -> None:
        if graph is not None:
            store.put_graph(*graph)
        store.create_run(record.model_copy(update={"status": "running"}), steps[0])
        for step in steps[1:]:
            store.commit_step(record.run_id, step)
        for write in pending:
            store.put_pending(record.run_id, write)
        for entry in journal:
            store.append_journal(record.run_id, entry)
        store.set_status(record.run_id, record.status, interrupt=record.interrupt)

    return write_run


def _declares(store: CheckpointStore, feature: StoreFeature) -> None:
    """Skip unless ``store`` declares ``feature``."""
    if feature not in features_of(store):
        pytest.skip(f"the store does not declare {feature!r}")


class CheckpointStoreConformance:
    """Protocol tests for a ``CheckpointStore``; subclasses provide the ``store`` fixture."""

    @pytest.fixture
    def store(self) -> CheckpointStore:
        """Override: yield a fresh, empty store and close it afterwards."""
        raise NotImplementedError("subclass CheckpointStoreConformance and define `store`")

    # ------------------------------------------------------------------ runs

    def test_satisfies_the_protocol(self, store: CheckpointStore) -> None:
        assert isinstance(store, CheckpointStore)

    def test_declared_features_are_known(self, store: CheckpointStore) -> None:
        # A misspelt feature would be ignored by the runtime without a word.
        assert features_of(store) <= set(get_args(StoreFeature))

    def test_a_store_that_releases_on_final_commit_ends_the_run_in_it(
        self, store: CheckpointStore
    ) -> None:
        _declares(store, "releases_on_final_commit")
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        store.commit_step(
            "r1", make_step(1), status="halted", stopped_by="rule/x", owner=owner.token
        )
        run = _released(store.get_run("r1"))
        assert (run.status, run.last_step, run.stopped_by) == ("halted", 1, "rule/x")

    def test_step_values_read_back_as_their_record(self, store: CheckpointStore) -> None:
        # The runtime hands a store its step values when it declares it takes them, and
        # their record otherwise: either way the record reads back.
        takes_values = "step_values" in features_of(store)
        entry = JournalEntry(step=1, node="a", seq=0, kind="now", key="k", value=1.5)
        values = [
            StepValues(
                1, (("a", 0, {"x": AWKWARD}),), None, {}, (), {}, None, None, None, {}, (), 7, None
            ),
            StepValues(
                2,
                (("a", 1, {"x": 1}), ("b", 0, {})),
                {"x": 2},
                {"log": 0},
                (TaskRecord(node="a", payload={"p": 1}),),
                {"0": ("a",)},
                {"f": [1]},
                None,
                {"kind": "halt", "rule": "r"},
                {"a/1": 2},
                (entry,),
                8,
                "a",
            ),
        ]
        store.create_run(make_run("r1"), make_step(0))
        for step in values:
            store.commit_step("r1", step if takes_values else step.record())  # type: ignore[arg-type]
        records = [v.record() for v in values]
        assert records[1] == StepRecord.model_validate(records[1].model_dump())
        assert store.get_steps("r1") == [make_step(0), *records]
        assert store.snapshot_step("r1", 2) == 2
        with pytest.raises(CheckpointError):  # fenced and sequenced like a record
            store.commit_step("r1", values[0] if takes_values else values[0].record())  # type: ignore[arg-type]

    def test_write_run_writes_a_whole_run_in_one_go(self, store: CheckpointStore) -> None:
        # A store without ``write_run`` is written a finished run event by event, as the
        # runtime's exit durability does; what reads back is the same.
        steps = [make_step(0), make_step(1), make_step(2, snapshot=True)]
        pending = [PendingWrite(step=3, node="a", writes={"w": 1})]
        journal = [JournalEntry(step=3, node="a", seq=0, kind="now", key="k", value=1.5)]
        ended = make_run("r1", status="interrupted", interrupt={"at": "a"}, last_step=2)
        graph = ("sha256:" + "a" * 64, b'{"name":"g"}')
        if "write_run" in features_of(store):
            write_run = store.write_run  # type: ignore[attr-defined]
        else:
            write_run = _write_by_events(store)
        write_run(ended, steps, pending=pending, journal=journal, graph=graph)
        run = _released(store.get_run("r1"))
        assert (run.status, run.last_step, run.interrupt) == ("interrupted", 2, {"at": "a"})
        assert store.get_steps("r1") == steps
        assert store.get_pending("r1", 3) == pending
        assert store.get_journal("r1", 3) == journal
        assert store.get_graph(graph[0]) == graph[1]
        # A second write of the same run id is refused and changes nothing.
        with pytest.raises(CheckpointError):
            write_run(ended, [make_step(0)], pending=(), journal=(), graph=None)
        assert store.get_steps("r1") == steps

    def test_create_and_get_run(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        run = store.get_run("r1")
        assert (run.run_id, run.graph_name, run.status, run.last_step) == ("r1", "g", "running", 0)
        assert run.graph_hash == "sha256:" + "a" * 64
        assert run.code_hash == "sha256:" + "b" * 64
        assert run.created_at, "created_at is filled in"
        assert run.updated_at
        assert store.get_steps("r1") == [make_step(0)]

    def test_create_keeps_given_created_at_and_parent(self, store: CheckpointStore) -> None:
        store.create_run(
            make_run("child", parent_run_id="p", parent_step=4, created_at="2024-01-02T03:04:05Z"),
            make_step(0),
        )
        run = store.get_run("child")
        assert (run.parent_run_id, run.parent_step) == ("p", 4)
        assert run.created_at == "2024-01-02T03:04:05Z"

    def test_duplicate_create_is_refused_and_changes_nothing(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.commit_step("r1", make_step(1))
        before = (store.get_run("r1"), store.get_steps("r1"))
        with pytest.raises(CheckpointError, match="r1") as info:
            store.create_run(make_run("r1", graph_name="other"), make_step(0, snapshot=True))
        assert not isinstance(info.value, RunNotFoundError)
        assert (store.get_run("r1"), store.get_steps("r1")) == before

    def test_unknown_run_raises_run_not_found_naming_it(self, store: CheckpointStore) -> None:
        store.create_run(make_run("known"), make_step(0))
        calls: list[Callable[[], object]] = [
            lambda: store.get_run("ghost-run"),
            lambda: store.get_steps("ghost-run"),
            lambda: store.snapshot_step("ghost-run", 3),
            lambda: store.commit_step("ghost-run", make_step(1)),
            lambda: store.set_status("ghost-run", "done"),
            lambda: store.put_pending("ghost-run", PendingWrite(step=1, node="a", writes={})),
            lambda: store.append_journal(
                "ghost-run", JournalEntry(step=1, node="a", seq=0, kind="clock")
            ),
        ]
        for call in calls:
            with pytest.raises(RunNotFoundError, match="ghost-run") as info:
                call()
            assert isinstance(info.value, CheckpointError)
            assert isinstance(info.value, LookupError)
            assert info.value.run_id == "ghost-run"
        assert [r.run_id for r in store.list_runs()] == ["known"]

    def test_list_runs_newest_first(self, store: CheckpointStore) -> None:
        for run_id, created in [
            ("b", "2024-01-02T00:00:00+00:00"),
            ("a", "2024-01-03T00:00:00+00:00"),
            ("c", "2024-01-01T00:00:00+00:00"),
        ]:
            store.create_run(make_run(run_id, created_at=created), make_step(0))
        assert [r.run_id for r in store.list_runs()] == ["a", "b", "c"]

    def test_list_runs_without_explicit_times_is_newest_first(self, store: CheckpointStore) -> None:
        # Creation order and id order agree, so a tie on the clock cannot flip the answer.
        for i in range(5):
            store.create_run(make_run(f"run-{i}"), make_step(0))
        assert [r.run_id for r in store.list_runs()] == [f"run-{i}" for i in reversed(range(5))]

    def test_list_runs_limit_and_status_filter(self, store: CheckpointStore) -> None:
        assert store.list_runs() == []
        for i in range(6):
            store.create_run(
                make_run(f"r{i}", created_at=f"2024-01-0{i + 1}T00:00:00+00:00"), make_step(0)
            )
        store.set_status("r1", "done")
        store.set_status("r4", "done")
        store.set_status("r2", "interrupted", interrupt={"ask": "ok?"})
        assert [r.run_id for r in store.list_runs(limit=2)] == ["r5", "r4"]
        assert [r.run_id for r in store.list_runs(status="done")] == ["r4", "r1"]
        assert [r.run_id for r in store.list_runs(status="done", limit=1)] == ["r4"]
        assert [r.run_id for r in store.list_runs(status="running")] == ["r5", "r3", "r0"]
        assert [r.run_id for r in store.list_runs(status="interrupted")] == ["r2"]
        assert store.list_runs(status="failed") == []
        assert len(store.list_runs(limit=100)) == 6

    def test_set_status_sets_and_clears_fields(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.set_status("r1", "interrupted", interrupt={"question": "approve?", "n": [1, 2]})
        run = store.get_run("r1")
        assert run.status == "interrupted"
        assert run.interrupt == {"question": "approve?", "n": [1, 2]}
        assert run.last_step == 0
        store.set_status("r1", "failed", error="NodeError: boom", stopped_by="rule-7")
        run = store.get_run("r1")
        assert (run.status, run.error, run.stopped_by, run.interrupt) == (
            "failed",
            "NodeError: boom",
            "rule-7",
            None,
        )
        store.set_status("r1", "running")
        run = store.get_run("r1")
        assert (run.status, run.error, run.stopped_by, run.interrupt) == (
            "running",
            None,
            None,
            None,
        )
        assert store.get_steps("r1") == [make_step(0)], "set_status commits no step"

    def test_set_graph_changes_only_the_hashes(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        before = store.get_run("r1")
        store.set_graph("r1", graph_hash="sha256:" + "b" * 64, code_hash="sha256:" + "c" * 64)
        after = store.get_run("r1")
        assert (after.graph_hash, after.code_hash) == ("sha256:" + "b" * 64, "sha256:" + "c" * 64)
        assert (after.status, after.last_step, after.run_id) == (
            before.status,
            before.last_step,
            before.run_id,
        )
        with pytest.raises(RunNotFoundError):
            store.set_graph("nope", graph_hash="x", code_hash="y")

    def test_node_cache_gives_back_what_was_put(self, store: CheckpointStore) -> None:
        # What a graph compiled with this store keeps its cached nodes' writes in: the
        # store's own cache when it declares ``node_cache``, else one in memory.
        cache = node_cache_of(store)
        at = "2026-01-01T00:00:00+00:00"
        assert cache.get("k1") is None
        cache.put("k1", {"x": AWKWARD}, at)
        cache.put("k é🦀", [], None)
        writes = {"x": AWKWARD}
        assert cache.get("k1") == (writes, at)
        assert cache.get("k é🦀") == ([], None)
        got = cache.get("k1")
        assert got is not None
        got[0]["x"] = "changed by the caller"  # a hit's writes are the caller's to change
        cache.put("k é🦀", {"again": 2}, at)  # a node run again replaces its entry
        assert cache.get("k1") == (writes, at)
        assert cache.get("k é🦀") == ({"again": 2}, at)
        if "node_cache" in features_of(store):
            # One cache per store: every graph compiled with it sees the same entries.
            assert node_cache_of(store).get("k1") == (writes, at)

    # ------------------------------------------------------------------ steps

    def test_a_graph_is_kept_once_by_its_hash(self, store: CheckpointStore) -> None:
        """``put_graph`` keeps the first IR given for a hash (the IR is content-addressed, so
        another one under the same hash is a bug elsewhere, never a reason to overwrite);
        bytes come back exactly; an unknown hash is ``None``."""
        ir = b'{"name":"g","nodes":[{"id":"\xc3\xa9"}],"big":"' + b"x" * 70_000 + b'"}'
        assert store.get_graph("sha256:abc") is None
        store.put_graph("sha256:abc", ir)
        store.put_graph("sha256:abc", b"{}")
        assert store.get_graph("sha256:abc") == ir
        store.put_graph("sha256:def", b"{}")
        assert store.get_graph("sha256:def") == b"{}"
        assert store.get_graph("sha256:abc") == ir

    def test_commit_step_appends_in_order_and_updates_run(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        for k in range(1, 6):
            store.commit_step("r1", make_step(k, snapshot=k == 3))
            assert store.get_run("r1").last_step == k
        assert store.get_steps("r1") == [make_step(k, snapshot=k == 3) for k in range(6)]
        store.commit_step("r1", make_step(6), status="interrupted", interrupt={"ask": "why"})
        run = store.get_run("r1")
        assert (run.status, run.last_step, run.interrupt) == ("interrupted", 6, {"ask": "why"})
        store.commit_step("r1", make_step(7), status="done")
        run = store.get_run("r1")
        assert (run.status, run.last_step, run.interrupt, run.error) == ("done", 7, None, None)
        store.commit_step("r1", make_step(8), status="failed", error="boom", stopped_by="r")
        run = store.get_run("r1")
        assert (run.status, run.error, run.stopped_by) == ("failed", "boom", "r")

    def test_commit_step_moves_updated_at_not_created_at(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1", created_at="2020-01-01T00:00:00+00:00"), make_step(0))
        store.commit_step("r1", make_step(1))
        run = store.get_run("r1")
        assert run.created_at == "2020-01-01T00:00:00+00:00"
        assert run.updated_at > run.created_at

    @pytest.mark.parametrize("bad_step", [0, 1, 3, 4, 100])
    def test_out_of_order_or_duplicate_commit_is_fenced(
        self, store: CheckpointStore, bad_step: int
    ) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.commit_step("r1", make_step(1))
        store.put_pending("r1", PendingWrite(step=bad_step, node="a", writes={"x": 1}))
        store.append_journal("r1", JournalEntry(step=bad_step, node="a", seq=0, kind="k"))
        before = store.get_run("r1")
        with pytest.raises(CheckpointError, match=r"r1") as info:
            store.commit_step(
                "r1", make_step(bad_step, snapshot=True), status="done", error="should not land"
            )
        assert not isinstance(info.value, RunNotFoundError)
        assert info.value.run_id == "r1"
        assert store.get_run("r1") == before, "a fenced commit changes nothing"
        assert store.get_steps("r1") == [make_step(0), make_step(1)]
        assert len(store.get_pending("r1", bad_step)) == 1, "nor clears that step's pending"
        assert len(store.get_journal("r1", bad_step)) == 1, "nor its journal"
        store.commit_step("r1", make_step(2))
        assert store.get_run("r1").last_step == 2

    def test_two_writers_of_one_step_exactly_one_wins(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        won = _race(
            lambda i: store.commit_step("r1", make_step(1, attempts={f"w/{i}": i + 2})),
            loses_with=CheckpointError,
        )
        assert len(won) == 1, f"{won} all committed step 1"
        i = won[0]
        assert store.get_steps("r1", start=1) == [make_step(1, attempts={f"w/{i}": i + 2})]

    def test_get_steps_ranges(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        for k in range(1, 10):
            store.commit_step("r1", make_step(k))

        def numbers(**kw: int | None) -> list[int]:
            return [s.step for s in store.get_steps("r1", **kw)]  # type: ignore[arg-type]

        assert numbers() == list(range(10))
        assert numbers(start=4) == list(range(4, 10))
        assert numbers(end=3) == [0, 1, 2, 3]
        assert numbers(start=2, end=5) == [2, 3, 4, 5]
        assert numbers(start=7, end=7) == [7]
        assert numbers(start=5, end=4) == []
        assert numbers(start=10) == []
        assert numbers(start=8, end=1000) == [8, 9]

    def test_snapshot_step_picks_newest_snapshot_at_or_before(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        for k in range(1, 13):
            store.commit_step("r1", make_step(k, snapshot=k in (4, 8, 9)))
        expected = {0: 0, 1: 0, 3: 0, 4: 4, 5: 4, 7: 4, 8: 8, 9: 9, 10: 9, 12: 9, 99: 9}
        for k, snap in expected.items():
            assert store.snapshot_step("r1", k) == snap, k

    def test_snapshot_step_is_per_run(self, store: CheckpointStore) -> None:
        store.create_run(make_run("a"), make_step(0))
        store.create_run(make_run("b"), make_step(0))
        store.commit_step("a", make_step(1, snapshot=True))
        store.commit_step("b", make_step(1))
        assert store.snapshot_step("a", 5) == 1
        assert store.snapshot_step("b", 5) == 0

    def test_runs_do_not_see_each_others_steps(self, store: CheckpointStore) -> None:
        store.create_run(make_run("a"), make_step(0))
        store.create_run(make_run("b"), make_step(0, attempts={"b": 2}))
        store.commit_step("a", make_step(1))
        assert [s.step for s in store.get_steps("a")] == [0, 1]
        assert store.get_steps("b") == [make_step(0, attempts={"b": 2})]
        assert store.get_run("b").last_step == 0

    # ------------------------------------------------------------------ pending writes

    def test_pending_writes_ordered_and_idempotent(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        writes = [
            PendingWrite(step=1, node="b", index=0, writes={"b": 1}),
            PendingWrite(step=1, node="a", index=2, writes={"a": 2}),
            PendingWrite(step=1, node="a", index=0, writes={"a": 0}),
            PendingWrite(step=1, node="a", index=10, writes={"a": 10}),
            PendingWrite(step=1, node="Z", index=0, writes={"z": 0}),
            PendingWrite(step=1, node="é", index=0, writes={"e": 0}),
        ]
        for w in writes:
            store.put_pending("r1", w)
        store.put_pending("r1", writes[1])  # the same write again: no duplicate
        # A different write at a saved position: the first one recorded stays.
        store.put_pending("r1", PendingWrite(step=1, node="b", index=0, writes={"b": 999}))
        got = store.get_pending("r1", 1)
        assert got == sorted(writes, key=lambda w: (w.node, w.index))
        assert [(w.node, w.index) for w in got] == [
            ("Z", 0),
            ("a", 0),
            ("a", 2),
            ("a", 10),
            ("b", 0),
            ("é", 0),
        ]
        assert store.get_pending("r1", 2) == []

    def test_commit_clears_pending_of_that_step_only(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.create_run(make_run("r2"), make_step(0))
        for step in (1, 2):
            store.put_pending("r1", PendingWrite(step=step, node="a", writes={"s": step}))
        store.put_pending("r2", PendingWrite(step=1, node="a", writes={"other": True}))
        store.commit_step("r1", make_step(1))
        assert store.get_pending("r1", 1) == []
        assert store.get_pending("r1", 2) == [PendingWrite(step=2, node="a", writes={"s": 2})]
        assert store.get_pending("r2", 1) == [
            PendingWrite(step=1, node="a", writes={"other": True})
        ], "another run's pending writes of the same step stay"
        store.commit_step("r1", make_step(2))
        assert store.get_pending("r1", 2) == []

    def test_set_status_keeps_pending(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.put_pending("r1", PendingWrite(step=1, node="a", writes={}))
        store.set_status("r1", "interrupted")
        assert len(store.get_pending("r1", 1)) == 1

    # ------------------------------------------------------------------ journal

    def test_journal_ordered_and_idempotent(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        entries = [
            JournalEntry(step=1, node="b", index=0, seq=1, kind="clock", value=2.5),
            JournalEntry(step=1, node="b", index=0, seq=0, kind="clock", value=1.25),
            JournalEntry(step=1, node="a", index=1, seq=0, kind="once", key="fetch", value=[1]),
            JournalEntry(step=1, node="a", index=0, seq=2, kind="random", value=0.5),
            JournalEntry(step=1, node="a", index=0, seq=10, kind="uuid", value="u-10"),
            JournalEntry(step=1, node="a", index=0, seq=0, kind="interrupt", value={"ok": True}),
        ]
        for e in entries:
            store.append_journal("r1", e)
        store.append_journal("r1", entries[2])
        store.append_journal(
            "r1", JournalEntry(step=1, node="b", index=0, seq=0, kind="clock", value=-1.0)
        )
        got = store.get_journal("r1", 1)
        assert got == sorted(entries, key=lambda e: (e.node, e.index, e.seq))
        assert [(e.node, e.index, e.seq) for e in got] == [
            ("a", 0, 0),
            ("a", 0, 2),
            ("a", 0, 10),
            ("a", 1, 0),
            ("b", 0, 0),
            ("b", 0, 1),
        ]
        assert store.get_journal("r1", 0) == []

    def test_commit_clears_journal_of_that_step_only(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.create_run(make_run("r2"), make_step(0))
        for step in (1, 2):
            store.append_journal("r1", JournalEntry(step=step, node="a", seq=0, kind="k"))
        store.append_journal("r2", JournalEntry(step=1, node="a", seq=0, kind="k"))
        store.commit_step("r1", make_step(1))
        assert store.get_journal("r1", 1) == []
        assert len(store.get_journal("r1", 2)) == 1
        assert len(store.get_journal("r2", 1)) == 1
        store.commit_step("r1", make_step(2))
        assert store.get_journal("r1", 2) == []

    # ------------------------------------------------------------------ round trips

    def test_run_record_round_trip(self, store: CheckpointStore) -> None:
        run = make_run(
            "run/ü 🦀 \u0000 'quoted' \"x\"",
            graph_name="name with ünïcode",
            status="interrupted",
            parent_run_id="parent\u0000",
            parent_step=12,
            created_at="2024-05-06T07:08:09.123456+00:00",
            error="Traceback ... \u0000 日本",
            stopped_by="rule 🦀",
            interrupt={"payload": AWKWARD},
        )
        store.create_run(run, make_step(0))
        got = store.get_run(run.run_id)
        assert got.model_copy(update={"updated_at": ""}) == run
        assert [r.run_id for r in store.list_runs()] == [run.run_id]

    @pytest.mark.parametrize("interrupt", [None, 0, "", [], {}, "text", [1, "a", None], 2**70])
    def test_interrupt_payload_round_trip(self, store: CheckpointStore, interrupt: Any) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.commit_step("r1", make_step(1), status="interrupted", interrupt=interrupt)
        assert store.get_run("r1").interrupt == interrupt
        store.set_status("r1", "interrupted", interrupt=interrupt)
        assert store.get_run("r1").interrupt == interrupt

    def test_step_record_round_trip_every_field(self, store: CheckpointStore) -> None:
        full = StepRecord(
            step=1,
            writes=(
                WriteRecord(node="a", index=3, writes={"awkward": AWKWARD, "big": 2**70}),
                WriteRecord(node="b 🦀", writes={}),
            ),
            snapshot={"state": AWKWARD, "deep": _deep(60)},
            next=(
                TaskRecord(node="c", index=2, payload={"send": AWKWARD["nested"]}),
                TaskRecord(node="d"),
            ),
            joins={"0": ("a", "b 🦀"), "7": ()},
            facts={"facts": [{"template": "t", "slots": {"x": 1.5}}], "agenda": []},
            attempts={"a/3": 2, "b 🦀/0": 5},
            created_ms=1_714_979_289_000,
        )
        store.create_run(make_run("r1"), StepRecord(step=0))
        store.commit_step("r1", full)
        assert store.get_steps("r1") == [StepRecord(step=0), full]
        assert store.snapshot_step("r1", 1) == 1

    def test_facts_from_reads_back_as_the_facts_of_the_step_it_names(
        self, store: CheckpointStore
    ) -> None:
        # A step whose rule facts did not change names the step holding them; every read,
        # whatever its range, gives the facts themselves, as if each step held them.
        _takes_fact_references(store)
        first = {"node:observe": {"facts": [["sg-step", {"tick": 1}]], "globals": {}}}
        later = {"node:observe": {"facts": [["sg-step", {"tick": 2}]], "globals": {}}}
        stored = [
            make_step(0),
            make_step(1, facts=first),
            make_step(2, facts_from=1),
            make_step(3, facts_from=1),
            make_step(4, snapshot=True, facts=later),
            make_step(5, facts_from=4),
            make_step(6),
        ]
        store.create_run(make_run("r1"), stored[0])
        for step in stored[1:]:
            store.commit_step("r1", step)
        whole = [
            s if s.facts_from is None else s.model_copy(update={"facts": f, "facts_from": None})
            for s, f in zip(stored, [None, first, first, first, later, later, None], strict=True)
        ]
        for start in range(len(stored)):
            for end in [None, *range(start, len(stored))]:
                stop = len(stored) if end is None else end + 1
                assert store.get_steps("r1", start=start, end=end) == whole[start:stop]

    def test_facts_from_naming_a_step_without_facts_is_corrupt(
        self, store: CheckpointStore
    ) -> None:
        _takes_fact_references(store)
        store.create_run(make_run("r1"), make_step(0))
        store.commit_step("r1", make_step(1))
        store.commit_step("r1", make_step(2, facts_from=1))
        with pytest.raises(CorruptCheckpointError, match="step 2 takes its rule facts"):
            store.get_steps("r1", start=2)
        with pytest.raises(CorruptCheckpointError, match="step 2 takes its rule facts"):
            store.get_steps("r1")

    def test_pending_and_journal_round_trip(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        write = PendingWrite(step=5, node="ñ\u0000ode", index=7, writes={"w": AWKWARD})
        entry = JournalEntry(
            step=5, node="ñ\u0000ode", index=7, seq=3, kind="llm", key="fp 🦀", value=AWKWARD
        )
        store.put_pending("r1", write)
        store.append_journal("r1", entry)
        assert store.get_pending("r1", 5) == [write]
        assert store.get_journal("r1", 5) == [entry]

    # ------------------------------------------------------------------ concurrency

    def test_concurrent_commits_to_20_runs_from_20_threads(self, store: CheckpointStore) -> None:
        runs, steps = 20, 25
        barrier = threading.Barrier(runs)
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            try:
                run_id = f"thread-{i}"
                barrier.wait()
                store.create_run(make_run(run_id), make_step(0))
                for k in range(1, steps + 1):
                    store.put_pending(run_id, PendingWrite(step=k, node="a", writes={"k": k}))
                    store.append_journal(run_id, JournalEntry(step=k, node="a", seq=0, kind="c"))
                    store.commit_step(run_id, make_step(k, snapshot=k % 10 == 0))
                    store.get_run(run_id)
                store.set_status(run_id, "done")
            except BaseException as exc:  # reported below, with the thread's traceback
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(runs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(store.list_runs(status="done")) == runs
        for i in range(runs):
            run_id = f"thread-{i}"
            assert store.get_run(run_id).last_step == steps
            assert [s.step for s in store.get_steps(run_id)] == list(range(steps + 1))
            assert store.get_steps(run_id) == [
                make_step(k, snapshot=k % 10 == 0) for k in range(steps + 1)
            ]
            assert store.get_pending(run_id, steps) == []
            assert store.get_journal(run_id, steps) == []

    # ------------------------------------------------------------------ values

    def test_odd_values_round_trip_identically(self, store: CheckpointStore) -> None:
        """NaN, +/-inf, -0.0, nested containers and odd strings come back as they went in,
        in every field that holds data: snapshots, writes, Send payloads, pending writes,
        journal values, interrupt payloads and error texts."""
        step = StepRecord(
            step=1,
            writes=(WriteRecord(node="a", writes=dict(ODD_VALUES)),),
            snapshot=dict(ODD_VALUES),
            next=(TaskRecord(node="b", payload={"v": ODD_VALUES["nested"]}),),
            facts={"slots": [math.nan, -0.0]},
            calls=(JournalEntry(step=1, node="a", seq=0, kind="clock", value=math.inf),),
        )
        store.create_run(make_run("odd"), make_step(0))
        store.commit_step("odd", step, status="interrupted", interrupt={"ask": ODD_VALUES})
        store.put_pending("odd", PendingWrite(step=2, node="b", writes=dict(ODD_VALUES)))
        entry = JournalEntry(step=2, node="b", seq=0, kind="once", key="🦀", value=ODD_VALUES)
        store.append_journal("odd", entry)
        got = store.get_steps("odd", start=1)[0]
        for field in ("writes", "snapshot", "next", "facts", "calls"):
            assert same_value(_plain(getattr(got, field)), _plain(getattr(step, field))), field
        assert same_value(store.get_run("odd").interrupt, {"ask": ODD_VALUES})
        assert same_value(store.get_pending("odd", 2)[0].writes, ODD_VALUES)
        assert same_value(store.get_journal("odd", 2)[0].value, ODD_VALUES)
        text = "".join(v for v in ODD_VALUES.values() if isinstance(v, str))[:5_000]
        store.set_status("odd", "failed", error=text, stopped_by="rule \u202e🦀")
        run = store.get_run("odd")
        assert (run.error, run.stopped_by) == (text, "rule \u202e🦀")

    @pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.0])
    def test_float_specials_in_interrupts_and_journal(
        self, store: CheckpointStore, value: float
    ) -> None:
        store.create_run(make_run("r1"), make_step(0))
        store.set_status("r1", "interrupted", interrupt=value)
        assert same_value(store.get_run("r1").interrupt, value)
        store.append_journal("r1", JournalEntry(step=1, node="a", seq=0, kind="c", value=value))
        assert same_value(store.get_journal("r1", 1)[0].value, value)

    def test_run_id_with_a_lone_surrogate_is_refused_by_name(self, store: CheckpointStore) -> None:
        with pytest.raises(CheckpointError, match=r"r-\\ud800") as info:
            store.create_run(make_run("r-\ud800"), make_step(0))
        assert not isinstance(info.value, RunNotFoundError)
        assert "surrogate" in str(info.value)
        with pytest.raises(CheckpointError, match=r"r-\\ud800"):
            store.get_run("r-\ud800")
        assert store.list_runs() == []

    def test_a_huge_error_is_stored_cut_with_head_and_tail(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        error = "HEAD" + "x" * 2_000_000 + "TAIL"
        store.set_status("r1", "failed", error=error)
        stored = store.get_run("r1").error
        assert stored is not None
        assert len(stored) <= MAX_ERROR_CHARS
        assert stored.startswith("HEADxxx")
        assert stored.endswith("xxxTAIL")
        cut = len(error) - (len(stored) - len(stored.splitlines()[1]) - 2)
        assert f"[... {cut:,} characters cut ...]" in stored
        store.commit_step("r1", make_step(1), status="failed", error=error)
        assert store.get_run("r1").error == stored

    # ------------------------------------------------------------------ leases

    def test_create_with_owner_leases_the_run(self, store: CheckpointStore) -> None:
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        run = store.get_run("r1")
        assert run.owner == owner
        assert run.status == "running"
        assert run.lease_expires, "the store says when the lease lapses"

    def test_status_and_commit_compare_and_set_on_the_owner(self, store: CheckpointStore) -> None:
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        store.commit_step("r1", make_step(1), owner=owner.token)
        before = (store.get_run("r1"), store.get_steps("r1"))
        # A writer without the lease (a losing resumer) and one with a stale token: refused,
        # and nothing changes (status, interrupt, steps, the lease itself).
        with pytest.raises(RunBusyError, match=r"another-host\.invalid:4242") as busy:
            store.set_status("r1", "running")
        assert busy.value.owner.startswith("another-host.invalid:4242")
        with pytest.raises(LeaseLostError, match="r1"):
            store.set_status("r1", "done", owner="stale-token")
        with pytest.raises(LeaseLostError, match="r1"):
            store.commit_step("r1", make_step(2), owner="stale-token")
        with pytest.raises(RunBusyError):
            store.commit_step("r1", make_step(2))
        after = (store.get_run("r1"), store.get_steps("r1"))
        assert after[1] == before[1]
        assert after[0].model_copy(update={"lease_expires": None}) == before[0].model_copy(
            update={"lease_expires": None}
        )
        # The holder is interrupted: the status change releases the lease ...
        store.set_status("r1", "interrupted", interrupt={"ask": 1}, owner=owner.token)
        run = _released(store.get_run("r1"))
        assert (run.status, run.interrupt) == ("interrupted", {"ask": 1})
        # ... so the old token can no longer flip it back to running.
        with pytest.raises(LeaseLostError):
            store.set_status("r1", "running", owner=owner.token)
        assert store.get_run("r1").status == "interrupted"

    def test_committing_the_last_step_done_releases_the_lease(self, store: CheckpointStore) -> None:
        """A run's last step and its end are one commit: ``commit_step(status="done")``
        releases the lease as ``set_status("done")`` would, and is fenced like any commit."""
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        store.commit_step("r1", make_step(1), owner=owner.token)
        assert store.get_run("r1").owner == owner, "a running commit keeps the lease"
        with pytest.raises(LeaseLostError):
            store.commit_step("r1", make_step(2), status="done", owner="stale-token")
        assert (store.get_run("r1").status, store.get_run("r1").owner) == ("running", owner)
        store.commit_step("r1", make_step(2), status="done", stopped_by="rule/x", owner=owner.token)
        run = _released(store.get_run("r1"))
        assert (run.status, run.last_step, run.stopped_by) == ("done", 2, "rule/x")
        assert [s.step for s in store.get_steps("r1")] == [0, 1, 2]
        assert store.heartbeat("r1", owner) is False, "the lease is gone"
        # The old token can no longer flip the run back, and a free done run is not busy.
        with pytest.raises(LeaseLostError):
            store.set_status("r1", "running", owner=owner.token)
        assert store.acquire("r1", _foreign_owner("next")).status == "done"

    def test_committing_the_last_step_halted_keeps_rule_and_reason(
        self, store: CheckpointStore
    ) -> None:
        """A run a halt rule stopped ends ``halted`` at its last commit: the lease is
        released as for ``done``, and the rule and its reason stay on the record."""
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        store.commit_step(
            "r1",
            make_step(1),
            status="halted",
            stopped_by="termination/error_budget",
            stop_reason="error_budget_exhausted",
            owner=owner.token,
        )
        run = _released(store.get_run("r1"))
        assert (run.status, run.last_step, run.stopped_by, run.stop_reason) == (
            "halted",
            1,
            "termination/error_budget",
            "error_budget_exhausted",
        )
        assert store.heartbeat("r1", owner) is False, "the lease is gone"
        assert [r.run_id for r in store.list_runs(status="halted")] == ["r1"]
        assert store.list_runs(status="done") == []

    def test_set_status_halted_and_done_by_a_rule(self, store: CheckpointStore) -> None:
        """``set_status`` keeps ``stop_reason`` beside ``stopped_by``, for ``halted`` and for
        ``done`` by a success rule; a later status change without them clears them."""
        store.create_run(make_run("h"), make_step(0))
        store.create_run(make_run("d"), make_step(0))
        store.set_status("h", "halted", stopped_by="guard/blocked", stop_reason="blocked")
        store.set_status("d", "done", stopped_by="termination/done", stop_reason="done")
        h, d = store.get_run("h"), store.get_run("d")
        assert (h.status, h.stopped_by, h.stop_reason, h.owner) == (
            "halted",
            "guard/blocked",
            "blocked",
            None,
        )
        assert (d.status, d.stopped_by, d.stop_reason) == ("done", "termination/done", "done")
        assert {r.run_id for r in store.list_runs(status="halted")} == {"h"}
        assert {r.run_id for r in store.list_runs(status="done")} == {"d"}
        store.set_status("d", "failed", error="boom")
        assert (store.get_run("d").stopped_by, store.get_run("d").stop_reason) == (None, None)

    def test_a_pending_run_is_listed_as_pending_and_can_be_taken(
        self, store: CheckpointStore
    ) -> None:
        """A run created ``pending`` (a fork nobody continued) is neither running nor
        orphaned; a resumer acquires it and sets it running."""
        store.create_run(make_run("p", status="pending"), make_step(0))
        assert store.get_run("p").status == "pending"
        assert [r.run_id for r in store.list_runs(status="pending")] == ["p"]
        assert store.list_runs(status="running") == []
        assert store.list_runs(status="orphaned") == []
        owner = _foreign_owner()
        assert store.acquire("p", owner).status == "pending"
        store.set_status("p", "running", owner=owner.token)
        assert store.get_run("p").status == "running"

    def test_committing_with_another_status_keeps_the_lease(self, store: CheckpointStore) -> None:
        """Only ``done`` ends a run at a commit: a commit that keeps a run failed (a migration
        step written by the resumer that holds the lease) leaves the lease held."""
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        store.commit_step("r1", make_step(1), status="failed", error="boom", owner=owner.token)
        run = store.get_run("r1")
        assert (run.status, run.last_step, run.error, run.owner) == ("failed", 1, "boom", owner)
        store.set_status("r1", "running", owner=owner.token)
        assert store.get_run("r1").owner == owner

    def test_the_fence_also_guards_finished_runs(self, store: CheckpointStore) -> None:
        winner, loser = _foreign_owner("winner"), _foreign_owner("loser")
        store.create_run(make_run("r1", owner=winner), make_step(0))
        store.set_status("r1", "done", owner=winner.token)
        with pytest.raises(LeaseLostError):
            store.set_status("r1", "running", owner=loser.token)
        assert store.get_run("r1").status == "done"

    def test_acquire_refuses_a_live_owner_and_takes_a_free_run(
        self, store: CheckpointStore
    ) -> None:
        first, second = _foreign_owner("first"), _foreign_owner("second")
        store.create_run(make_run("r1"), make_step(0))
        store.set_status("r1", "interrupted", interrupt={"q": "?"})
        before = store.acquire("r1", first)
        assert (before.status, before.interrupt, before.owner) == ("interrupted", {"q": "?"}, None)
        run = store.get_run("r1")
        assert (run.status, run.interrupt, run.owner) == ("interrupted", {"q": "?"}, first)
        with pytest.raises(RunBusyError, match=r"'r1'.*another-host.invalid:4242"):
            store.acquire("r1", second)
        assert store.get_run("r1").owner == first
        assert store.acquire("r1", first).owner == first, "re-acquiring one's own lease"
        assert store.acquire("r1", second, replace="first").owner == first, "explicit takeover"
        assert store.get_run("r1").owner == second
        assert store.heartbeat("r1", second) is True
        assert store.heartbeat("r1", first) is False
        store.release("r1", "first")  # not held: nothing happens
        assert store.get_run("r1").owner == second
        store.release("r1", "second")
        run = store.get_run("r1")
        assert (run.owner, run.status, run.interrupt) == (None, "interrupted", {"q": "?"})
        with pytest.raises(RunNotFoundError):
            store.acquire("ghost", first)

    def test_a_dead_owner_shows_as_orphaned_and_is_taken_over(self, store: CheckpointStore) -> None:
        store.create_run(make_run("dead", owner=_dead_owner()), make_step(0))
        store.create_run(make_run("live", owner=_foreign_owner()), make_step(0))
        assert store.get_run("dead").status == "orphaned"
        assert store.get_run("live").status == "running"
        assert [r.run_id for r in store.list_runs(status="orphaned")] == ["dead"]
        assert [r.run_id for r in store.list_runs(status="running")] == ["live"]
        assert {r.run_id: r.status for r in store.list_runs()} == {
            "dead": "orphaned",
            "live": "running",
        }
        mine = new_owner()
        assert store.acquire("dead", mine).status == "orphaned"
        lease = Lease(store, "dead", mine)
        lease.hold()
        try:
            assert store.get_run("dead").status == "running", "held by this live process"
        finally:
            lease.drop()
        # The same owner, no longer held by this process (its run was abandoned): orphaned.
        assert store.get_run("dead").status == "orphaned"

    def test_a_lapsed_lease_shows_as_orphaned(self, store: CheckpointStore) -> None:
        owner = _foreign_owner("short", lease_s=0.2)
        store.create_run(make_run("r1", owner=owner), make_step(0))
        deadline = time.monotonic() + 30
        while store.get_run("r1").status != "orphaned":
            assert time.monotonic() < deadline, "the lease never lapsed"
            time.sleep(0.05)
        assert store.acquire("r1", _foreign_owner("next")).status == "orphaned"
        assert store.get_run("r1").owner == _foreign_owner("next")
        assert store.get_run("r1").status == "running"
        assert store.heartbeat("r1", owner) is False, "the old owner learns it lost the run"

    def test_an_abandoned_lease_shows_as_orphaned_at_once(self, store: CheckpointStore) -> None:
        """A run stopped at once (a second Ctrl-C, a store error) keeps its owner on record
        with a lease that lapsed: orphaned for every reader, taken over without waiting."""
        owner = _foreign_owner("abandoned")
        store.create_run(make_run("r1", owner=owner), make_step(0))
        Lease(store, "r1", owner).abandon()
        run = store.get_run("r1")
        assert run.status == "orphaned"
        assert run.owner is not None
        assert (run.owner.host, run.owner.pid) == (owner.host, owner.pid)
        assert [r.run_id for r in store.list_runs(status="orphaned")] == ["r1"]
        assert store.acquire("r1", _foreign_owner("next")).status == "orphaned"
        assert store.get_run("r1").status == "running"

    def test_cancelled_is_a_stored_status_that_releases_the_lease(
        self, store: CheckpointStore
    ) -> None:
        owner = _foreign_owner()
        store.create_run(make_run("r1", owner=owner), make_step(0))
        store.create_run(make_run("r2"), make_step(0))
        store.commit_step("r1", make_step(1), owner=owner.token)
        store.set_status("r1", "cancelled", stopped_by="SIGINT", owner=owner.token)
        run = _released(store.get_run("r1"))
        assert (run.status, run.last_step, run.stopped_by) == ("cancelled", 1, "SIGINT")
        assert [r.run_id for r in store.list_runs(status="cancelled")] == ["r1"]
        # A cancelled run is taken up again like any free run.
        store.acquire("r1", _foreign_owner("resumer"))
        store.set_status("r1", "running", owner="resumer")
        assert store.get_run("r1").status == "running"

    def test_two_acquirers_exactly_one_wins(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        won = _race(lambda i: store.acquire("r1", _foreign_owner(f"t{i}")), loses_with=RunBusyError)
        assert len(won) == 1, f"{won} all acquired r1"
        owner = store.get_run("r1").owner
        assert owner is not None
        assert owner.token == f"t{won[0]}"

    # ------------------------------------------------------------------ interrupt answers

    def test_replace_overwrites_an_unread_answer(self, store: CheckpointStore) -> None:
        store.create_run(make_run("r1"), make_step(0))
        first = JournalEntry(step=1, node="a", seq=2, kind="interrupt", value={"r": "approve"})
        again = JournalEntry(step=1, node="a", seq=2, kind="interrupt", value={"r": "REJECT"})
        store.append_journal("r1", first)
        store.append_journal("r1", again)
        assert store.get_journal("r1", 1) == [first], "without replace the first entry stays"
        store.append_journal("r1", again, replace=True)
        assert store.get_journal("r1", 1) == [again]

    # ------------------------------------------------------------------ threads

    def test_thread_runs_come_back_in_turn_order(self, store: CheckpointStore) -> None:
        # Created out of order and with created_at against turn order: turns decide.
        for rid, turn, at in (("t-2", 2, "2024-01-01"), ("t-1", 1, "2024-01-02")):
            store.create_run(
                make_run(rid, thread_id="chat 🦀\u0000", turn=turn, created_at=at), make_step(0)
            )
        store.create_run(make_run("alone"), make_step(0))
        store.create_run(make_run("other-1", thread_id="other", turn=1), make_step(0))
        runs = store.get_thread("chat 🦀\u0000")
        assert [(r.run_id, r.thread_id, r.turn) for r in runs] == [
            ("t-1", "chat 🦀\u0000", 1),
            ("t-2", "chat 🦀\u0000", 2),
        ]
        assert store.get_thread("nobody") == []
        assert store.get_run("alone").thread_id is None
        assert store.get_run("alone").turn is None
        got = store.get_run("t-2")
        assert (got.thread_id, got.turn) == ("chat 🦀\u0000", 2)

    def test_list_threads_gives_the_latest_turn_of_each_newest_first(
        self, store: CheckpointStore
    ) -> None:
        store.create_run(make_run("a1", thread_id="a", turn=1, created_at="1"), make_step(0))
        store.create_run(make_run("b1", thread_id="b", turn=1, created_at="2"), make_step(0))
        store.create_run(make_run("a2", thread_id="a", turn=2, created_at="3"), make_step(0))
        store.create_run(make_run("solo", created_at="4"), make_step(0))
        assert [r.run_id for r in store.list_threads()] == ["a2", "b1"]
        assert [r.run_id for r in store.list_threads(limit=1)] == ["a2"]
        store.set_status("a2", "done")
        assert store.list_threads()[0].status == "done"

    def test_a_second_run_for_the_same_turn_is_refused(self, store: CheckpointStore) -> None:
        store.create_run(make_run("first", thread_id="t", turn=1), make_step(0))
        with pytest.raises(ThreadBusyError, match=r"thread 't' already has a turn 1.*'first'"):
            store.create_run(make_run("second", thread_id="t", turn=1), make_step(0))
        with pytest.raises(RunNotFoundError):
            store.get_run("second")
        assert [r.run_id for r in store.get_thread("t")] == ["first"]
        # The run id clash is still the run id clash.
        with pytest.raises(CheckpointError, match="'first' already exists") as info:
            store.create_run(make_run("first", thread_id="t", turn=2), make_step(0))
        assert not isinstance(info.value, ThreadBusyError)

    def test_two_starters_of_one_turn_exactly_one_wins(self, store: CheckpointStore) -> None:
        won = _race(
            lambda i: store.create_run(make_run(f"r{i}", thread_id="t", turn=1), make_step(0)),
            loses_with=ThreadBusyError,
        )
        assert len(won) == 1, f"{won} all started turn 1"
        assert [r.run_id for r in store.get_thread("t")] == [f"r{won[0]}"]

    def test_a_turn_needs_its_thread_and_the_thread_its_turn(self, store: CheckpointStore) -> None:
        for fields in ({"thread_id": "t"}, {"turn": 3}):
            with pytest.raises(CheckpointError, match="needs both"):
                store.create_run(make_run("r", **fields), make_step(0))


def _race(
    attempt: Callable[[int], object], *, loses_with: type[Exception], n: int = 8
) -> list[int]:
    """Run ``attempt(0)`` .. ``attempt(n - 1)`` in ``n`` threads released together; the
    indices whose attempt returned. Every other attempt must have raised ``loses_with``:
    anything else (an error, a thread still stuck) fails the test."""
    barrier = threading.Barrier(n, timeout=30)
    won: list[int] = []
    lost: list[int] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        barrier.wait()
        try:
            attempt(i)
        except loses_with:
            with lock:
                lost.append(i)
            return
        with lock:
            won.append(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(won) + len(lost) == n, f"of {n} attempts only {won} won and {lost} lost"
    return won


def _plain(value: Any) -> Any:
    """Records as plain data (models to dicts, tuples to lists), floats untouched."""
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
