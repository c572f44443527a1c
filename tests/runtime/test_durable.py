"""Durable runs in one process: resume, partial steps, interrupts, retries, time travel, errors.

Every test runs on both stores (in-memory and a real SQLite file).
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import CheckpointStore, SqliteStore
from stargraph.errors import (
    CheckpointError,
    CodeHashMismatch,
    CodeHashWarning,
    CompileError,
    CorruptCheckpointError,
    GraphHashMismatch,
    InvalidInputError,
    NodeError,
    RunError,
    RunNotFoundError,
    RunNotResumableError,
)
from stargraph.graph import END, START, Graph
from stargraph.ir import RetryPolicyIR
from stargraph.runtime import RunContext, SeededEntropy

CALLS: Counter[str] = Counter()
FAIL: set[str] = set()


class S(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    n: int = 0
    answer: str = ""


def step(state: S, ctx: RunContext) -> dict[str, Any]:
    CALLS[ctx.node] += 1
    if ctx.node in FAIL:
        raise RuntimeError(f"{ctx.node} is broken")
    return {"log": [ctx.node], "n": state.n + 1}


def branch(state: S, ctx: RunContext) -> dict[str, Any]:
    CALLS[ctx.node] += 1
    if ctx.node in FAIL:
        raise RuntimeError(f"{ctx.node} is broken")
    return {"log": [ctx.node]}


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    FAIL.clear()
    yield
    CALLS.clear()
    FAIL.clear()


# Every test here holds for both stores that need no server (the shared `store` fixture).
pytestmark = pytest.mark.stores("memory", "sqlite")


def chain(n: int = 4) -> Graph[S]:
    graph = Graph("chain", state=S)
    names = [f"c{i}" for i in range(n)]
    for name in names:
        graph = graph.with_node(name, step)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)


def diamond() -> Graph[S]:
    return (
        Graph("diamond", state=S)
        .with_node("start", step)
        .with_node("a", branch)
        .with_node("b", branch)
        .with_node("end", step)
        .with_edge(START, "start")
        .with_edge("start", "a")
        .with_edge("start", "b")
        .with_edge(["a", "b"], "end")
        .with_edge("end", END)
    )


def test_every_step_is_committed_as_a_delta(store: CheckpointStore) -> None:
    app = chain(60).compile(store=store)
    final = app.invoke({}, run_id="r")
    history = app.history("r")
    assert [s.step for s in history] == list(range(61))
    assert app.get_run("r").status == "done"
    # Deltas: each step stores the node's own write, not the whole growing list.
    assert history[5].writes[0].writes == {"log": ["c4"], "n": 5}
    assert history[5].snapshot is None
    assert history[0].snapshot == {"log": [], "n": 0, "answer": ""}
    assert history[50].snapshot is not None  # periodic full snapshot
    for k in (0, 1, 17, 50, 59, 60):
        assert app.get_state("r", k) == S(log=[f"c{i}" for i in range(k)], n=k)
    assert app.get_state("r") == final


def test_resume_continues_after_a_failed_step_without_rerunning(store: CheckpointStore) -> None:
    app = chain(4).compile(store=store)
    FAIL.add("c2")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")
    record = app.get_run("r")
    assert (record.status, record.last_step) == ("failed", 2)
    assert record.error == "node 'c2' failed at step 3 of run 'r': RuntimeError: c2 is broken"
    FAIL.clear()
    final = app.resume("r")
    assert final.log == ["c0", "c1", "c2", "c3"]
    assert Counter({"c0": 1, "c1": 1, "c2": 2, "c3": 1}) == CALLS
    assert [s.step for s in app.history("r")] == [0, 1, 2, 3, 4]


def test_partial_parallel_step_reruns_only_the_failed_branch(store: CheckpointStore) -> None:
    app = diamond().compile(store=store)
    FAIL.add("b")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")
    FAIL.clear()
    assert app.resume("r").log == ["start", "a", "b", "end"]
    assert Counter({"start": 1, "a": 1, "b": 2, "end": 1}) == CALLS


def test_resume_with_another_graph_raises_hash_mismatch(store: CheckpointStore) -> None:
    app = chain(3).compile(store=store)
    FAIL.add("c1")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")
    other = chain(4).compile(store=store)
    with pytest.raises(GraphHashMismatch) as info:
        other.resume("r")
    assert info.value.stored == app.graph_hash
    assert info.value.current == other.graph_hash
    assert app.graph_hash in str(info.value)
    assert other.graph_hash in str(info.value)
    with pytest.raises(GraphHashMismatch):
        other.fork("r", 1)


def test_changed_code_warns_or_raises(store: CheckpointStore) -> None:
    app = chain(3).compile(store=store)
    FAIL.add("c1")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")
    FAIL.clear()
    store.set_status("r", "failed", error="x")
    # Simulate a code change: same graph, different code hash recorded.
    strict = chain(3).compile(store=store, on_code_change="error")
    strict.__dict__["code_hash"] = "sha256:" + "1" * 64
    with pytest.raises(CodeHashMismatch, match="was checkpointed by different node code"):
        strict.resume("r")
    lenient = chain(3).compile(store=store)
    lenient.__dict__["code_hash"] = "sha256:" + "1" * 64
    with pytest.warns(CodeHashWarning):
        assert lenient.resume("r").n == 3


def test_code_hash_follows_the_source() -> None:
    assert chain(2).compile().code_hash == chain(3).compile().code_hash  # same functions
    assert diamond().compile().code_hash != chain(2).compile().code_hash  # branch() too


def test_resume_errors_name_run_and_step(store: CheckpointStore) -> None:
    app = chain(2).compile(store=store)
    with pytest.raises(RunNotFoundError) as missing:
        app.resume("nope")
    assert "'nope'" in str(missing.value)
    app.invoke({}, run_id="r")
    with pytest.raises(RunNotResumableError) as done:
        app.resume("r")
    assert str(done.value) == (
        "run 'r' finished at step 2; there is nothing to resume (use fork('r', step) to "
        "continue from an earlier step)"
    )
    with pytest.raises(CheckpointError, match="already exists"):
        app.invoke({}, run_id="r")
    with pytest.raises(CheckpointError, match=r"has steps 0\.\.2; step 9 does not exist"):
        app.get_state("r", 9)
    with pytest.raises(CheckpointError, match="compiled without a checkpoint store"):
        chain(2).compile().resume("r")


def test_corrupted_row_is_a_typed_error_and_other_runs_stay_readable(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "sg.db")
    app = chain(3).compile(store=store, snapshot_every=100)
    app.invoke({}, run_id="good")
    FAIL.add("c2")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="bad")
    FAIL.clear()
    raw = sqlite3.connect(tmp_path / "sg.db")
    with raw:
        raw.execute("UPDATE steps SET payload = ? WHERE run_id = 'bad' AND step = 1", (b"{oops",))
    raw.close()
    with pytest.raises(CorruptCheckpointError) as info:
        app.resume("bad")
    assert "'bad'" in str(info.value)
    assert info.value.step == 1
    assert app.get_state("good").n == 3
    store.close()


def ask(state: S, ctx: RunContext) -> dict[str, Any]:
    CALLS["ask"] += 1
    ticket = ctx.once("open-ticket", lambda: f"T-{CALLS['ask']}")
    answer = ctx.interrupt({"question": "approve?", "ticket": ticket})
    return {"answer": f"{answer} ({ticket})", "log": ["ask"]}


def hitl() -> Graph[S]:
    return (
        Graph("hitl", state=S)
        .with_node("prep", step)
        .with_node("ask", ask)
        .with_node("after", step)
        .with_edge(START, "prep")
        .with_edge("prep", "ask")
        .with_edge("ask", "after")
        .with_edge("after", END)
    )


def test_ctx_interrupt_parks_and_resumes_with_the_response(store: CheckpointStore) -> None:
    app = hitl().compile(store=store)
    state = app.invoke({}, run_id="r")
    assert state.log == ["prep"]
    record = app.get_run("r")
    assert record.status == "interrupted"
    assert record.interrupt["payload"] == {"question": "approve?", "ticket": "T-1"}
    with pytest.raises(RunNotResumableError, match="waiting for a response"):
        app.resume("r")
    with pytest.raises(RunNotResumableError, match="answer it with response= alone"):
        app.resume("r", response="yes", update={"n": 5})
    final = app.resume("r", response="yes")
    # The node re-ran from its start, but the effect recorded with ctx.once did not repeat.
    assert final.answer == "yes (T-1)"
    assert final.log == ["prep", "ask", "after"]
    assert CALLS["ask"] == 2
    assert app.get_run("r").status == "done"


def test_interrupt_needs_a_store() -> None:
    with pytest.raises(RunError, match="no checkpoint store to keep the interrupted run in"):
        hitl().compile().invoke({})


def test_interrupt_before_and_after(store: CheckpointStore) -> None:
    graph = (
        Graph("gates", state=S)
        .with_node("a", step)
        .with_node("b", step, interrupt_before=True)
        .with_node("c", step, interrupt_after=True)
        .with_node("d", step)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", "c")
        .with_edge("c", "d")
        .with_edge("d", END)
    )
    with pytest.raises(CompileError, match="needs a checkpoint store"):
        graph.compile()
    app = graph.compile(store=store)
    assert app.invoke({}, run_id="r").log == ["a"]
    assert app.get_run("r").interrupt == {"kind": "before", "nodes": ["b"], "step": 2}
    with pytest.raises(RunNotResumableError, match="not waiting for a response"):
        app.resume("r", response="x")
    # A human edits the state before b runs; the edit is a step of its own in history.
    assert app.resume("r", update={"answer": "edited"}).log == ["a", "b", "c"]
    assert app.get_run("r").interrupt == {"kind": "after", "nodes": ["c"], "step": 4}
    final = app.resume("r")
    assert final.log == ["a", "b", "c", "d"]
    assert final.answer == "edited"
    nodes = [[w.node for w in s.writes] for s in app.history("r")]
    assert nodes == [[], ["a"], ["__update__"], ["b"], ["c"], ["d"]]


def test_interrupted_run_resumes_in_a_fresh_process(tmp_path: Path) -> None:
    db = tmp_path / "sg.db"
    store = SqliteStore(db)
    hitl().compile(store=store).invoke({}, run_id="r")
    store.close()
    code = (
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from stargraph.checkpoint import SqliteStore\n"
        "from tests.runtime.test_durable import hitl\n"
        "store = SqliteStore(sys.argv[1])\n"
        "print(hitl().compile(store=store).resume('r', response='ok').answer)\n"
        "store.close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(db), str(Path(__file__).parents[2])],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    assert done.stdout.strip() == "ok (T-1)"


class Flaky(Exception):
    pass


def flaky(state: S, ctx: RunContext) -> dict[str, Any]:
    CALLS[ctx.idempotency_key] += 1
    if CALLS[ctx.idempotency_key] < 3:
        raise Flaky("not yet")
    return {"log": [f"ok after {CALLS[ctx.idempotency_key]}"]}


def test_retry_policy_retries_with_deterministic_backoff(store: CheckpointStore) -> None:
    policy = RetryPolicyIR(max_attempts=3, initial_interval_s=0.001, retry_on=(Flaky,))
    graph = Graph("retry", state=S).with_node("f", flaky, retry=policy)
    graph = graph.with_edge(START, "f").with_edge("f", END)
    app = graph.compile(store=store, entropy=lambda: SeededEntropy(1))
    events = list(app.stream({}, run_id="r"))
    finished = next(e for e in events if e.kind == "node_finished")
    assert finished.attempts == 3
    assert app.history("r")[1].attempts == {"f/0": 3}
    assert app.get_state("r").log == ["ok after 3"]
    # One key for all three attempts: the idempotency key is stable across retries.
    assert list(CALLS.values()) == [3]
    exhausted = Graph("retry2", state=S).with_node(
        "f", flaky, retry=RetryPolicyIR(max_attempts=2, initial_interval_s=0, retry_on=(Flaky,))
    )
    exhausted = exhausted.with_edge(START, "f").with_edge("f", END)
    with pytest.raises(NodeError, match="Flaky: not yet") as info:
        exhausted.compile().invoke({}, run_id="x")
    assert isinstance(info.value.__cause__, Flaky)


def test_retry_on_unknown_exception_class_is_a_compile_error() -> None:
    policy = RetryPolicyIR(retry_on=("nowhere:Boom",))
    graph = Graph("r", state=S).with_node("f", flaky, retry=policy)
    with pytest.raises(CompileError, match=r"/nodes/0/retry/retry_on/0"):
        graph.with_edge(START, "f").with_edge("f", END).compile()


def test_fork_from_a_step_with_overrides(store: CheckpointStore) -> None:
    app = chain(4).compile(store=store)
    app.invoke({}, run_id="r")
    fork_id = app.fork("r", 2, update={"log": ["rewritten"]}, new_run_id="r-fork")
    record = app.get_run(fork_id)
    assert (record.parent_run_id, record.parent_step) == ("r", 2)
    final = app.resume(fork_id)
    # The fork keeps the parent's steps 0..2; the update goes through the reducers (append).
    assert final.log == ["c0", "c1", "rewritten", "c2", "c3"]
    assert final.n == 4
    assert [s.step for s in app.history(fork_id)] == [0, 1, 2, 3, 4, 5]
    assert app.get_state("r").log == ["c0", "c1", "c2", "c3"]  # parent untouched
    with pytest.raises(InvalidInputError, match="not a field of S"):
        app.fork("r", 1, update={"nope": 1})


def test_exit_durability_writes_only_when_the_run_stops(store: CheckpointStore) -> None:
    seen: list[int] = []

    app = chain(3).compile(store=store, durability="exit")
    for event in app.stream({}, run_id="r"):
        if event.kind == "step_completed":
            seen.append(len(store.list_runs()))
    assert seen == [0, 0, 0]
    assert [s.step for s in app.history("r")] == [0, 1, 2, 3]
    assert app.get_run("r").status == "done"


def test_concurrent_runs_in_threads_share_one_sqlite_file(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "sg.db")
    app = chain(10).compile(store=store)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            app.invoke({}, run_id=f"t{i}")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(r.run_id for r in store.list_runs(limit=100)) == sorted(
        f"t{i}" for i in range(20)
    )
    assert all(len(app.history(f"t{i}")) == 11 for i in range(20))
    store.close()


def test_concurrent_runs_in_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "sg.db"
    code = (
        "import sys; sys.path.insert(0, sys.argv[3])\n"
        "import threading\n"
        "from stargraph.checkpoint import SqliteStore\n"
        "from tests.runtime.test_durable import chain\n"
        "store = SqliteStore(sys.argv[1])\n"
        "app = chain(10).compile(store=store)\n"
        "ids = [f'p{sys.argv[2]}-{i}' for i in range(5)]\n"
        "ts = [threading.Thread(target=app.invoke, kwargs={'run_id': r}) for r in ids]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "store.close()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(db), str(p), str(Path(__file__).parents[2])],
            stderr=subprocess.PIPE,
        )
        for p in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert b"locked" not in err
    store = SqliteStore(db)
    runs = store.list_runs(limit=100)
    assert len(runs) == 20
    assert all(r.status == "done" and r.last_step == 10 for r in runs)
    assert store.integrity_check() == "ok"
    store.close()


def test_explicit_migration_continues_under_the_new_graph(store: CheckpointStore) -> None:
    old = chain(3).compile(store=store)
    FAIL.add("c1")
    with pytest.raises(NodeError):
        old.invoke({}, run_id="r")
    FAIL.clear()
    new = chain(4).compile(store=store)
    with pytest.raises(GraphHashMismatch):
        new.resume("r")

    def migrate(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "answer": "migrated"}

    final = new.resume("r", migration=migrate)
    assert final.log == ["c0", "c1", "c2", "c3"]
    assert final.answer == "migrated"
    record = new.get_run("r")
    assert record.graph_hash == new.graph_hash
    assert [w.node for w in new.history("r")[2].writes] == ["__migration__"]


class _CountingStore(SqliteStore):
    """Counts what reaches ``put_graph``."""

    puts: int = 0

    def put_graph(self, graph_hash: str, ir: bytes) -> None:
        type(self).puts += 1
        super().put_graph(graph_hash, ir)


@pytest.mark.parametrize("durability", ["sync", "exit"])
def test_a_store_keeps_the_graph_of_its_runs_once(
    tmp_path: Path, durability: Literal["sync", "exit"]
) -> None:
    """Every durable run leaves its graph's IR in the store (so any process can load the
    run by its graph hash); a second run of the same graph does not write or serialise it
    again (``exit``: inside the one transaction that writes the run)."""
    from stargraph.ir import GraphIR

    _CountingStore.puts = 0
    with _CountingStore(tmp_path / "g.db") as store:
        app = chain().compile(store=store, durability=durability)
        app.invoke({}, run_id="one")
        app.invoke({}, run_id="two")
        kept = store.get_graph(app.graph_hash)
        assert kept is not None
        assert GraphIR.from_json(kept).graph_hash == app.graph_hash
        assert _CountingStore.puts == 1
        assert store.get_graph("sha256:" + "0" * 64) is None
