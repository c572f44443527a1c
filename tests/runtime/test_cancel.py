"""Interruptions are states (issue 17 item 3): a cancelled run stops at a step boundary as
``cancelled``, a run stopped at once is ``orphaned``, and both resume to the result an
uninterrupted run reaches, each node body running once per committed step.

In-process tests cover ``CompiledGraph.cancel``, ``cancel_on_signals`` (the test process
signals itself from inside a node, so the signal lands inside a known step), closed streams,
cancelled asyncio tasks and nested runs, on the memory and SQLite stores. The acceptance tests
run ``stargraph run``/``resume`` in a subprocess and signal it once the child has reported,
through a file, that it is inside a step.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import CheckpointStore, SqliteStore
from stargraph.errors import NodeError, RunCancelledError, RunError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunCancelled, RunContext, _cancel, cancel_on_signals

DEADLINE_S = 60.0
CALLS: Counter[str] = Counter()
# What a node does at a given (node, step) on its first execution only.
ACTIONS: dict[tuple[str, int], Any] = {}
ENTERED = threading.Event()
RELEASE = threading.Event()
APPS: list[Any] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    ACTIONS.clear()
    ENTERED.clear()
    RELEASE.clear()
    APPS.clear()
    yield
    RELEASE.set()  # never leave a blocked node behind
    CALLS.clear()
    ACTIONS.clear()


# Every test here holds for both stores that need no server (the shared `store` fixture).
pytestmark = pytest.mark.stores("memory", "sqlite")


class S(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def work(state: S, ctx: RunContext) -> dict[str, Any]:
    CALLS[f"{ctx.node}@{ctx.step}"] += 1
    action = ACTIONS.pop((ctx.node, ctx.step), None)
    if action is not None:
        action(ctx)
    return {"log": [ctx.node], "total": len(ctx.node)}


def chain(n: int = 5, name: str = "cancel-chain") -> Graph[S]:
    graph = Graph(name, state=S)
    names = [f"n{i}" for i in range(n)]
    for node in names:
        graph = graph.with_node(node, work)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)


REFERENCE = S(log=[f"n{i}" for i in range(5)], total=10)


def _once_each() -> None:
    """Every node body ran exactly once: no committed step was executed twice."""
    assert set(CALLS.values()) == {1}, CALLS


# --------------------------------------------------------------------------- cancel()


def test_cancel_stops_after_the_step_in_flight_and_resume_finishes(store: CheckpointStore) -> None:
    app = chain().compile(store=store)
    # Asked from inside step 3: the step finishes and commits, step 4 never starts.
    ACTIONS[("n2", 3)] = lambda ctx: app.cancel(ctx.run_id, reason="the operator said so")
    with pytest.raises(RunCancelledError) as info:
        app.invoke({}, run_id="r")
    assert (info.value.run_id, info.value.step, info.value.reason) == (
        "r",
        3,
        "the operator said so",
    )
    assert str(info.value) == (
        "run 'r' was cancelled (the operator said so) and stopped after step 3, its last "
        "committed step; continue it with resume('r')"
    )
    record = app.get_run("r")
    assert (record.status, record.last_step, record.stopped_by, record.owner) == (
        "cancelled",
        3,
        "the operator said so",
        None,
    )
    assert [r.run_id for r in app.list_runs(status="cancelled")] == ["r"]
    assert app.resume("r") == REFERENCE
    assert app.get_run("r").status == "done"
    _once_each()


def test_cancel_from_another_thread_waits_for_the_step_in_flight(store: CheckpointStore) -> None:
    app = chain().compile(store=store)

    def block(ctx: RunContext) -> None:
        ENTERED.set()
        assert RELEASE.wait(DEADLINE_S)

    ACTIONS[("n1", 2)] = block
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            app.invoke({}, run_id="r")
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    assert ENTERED.wait(DEADLINE_S)
    assert app.cancel("r")
    assert app.get_run("r").status == "running", "a cancelled run finishes its step first"
    RELEASE.set()
    thread.join(DEADLINE_S)
    assert isinstance(box.get("error"), RunCancelledError)
    assert (app.get_run("r").status, app.get_run("r").last_step) == ("cancelled", 2)
    assert app.resume("r") == REFERENCE
    _once_each()


def test_cancel_finds_only_runs_executing_in_this_process(store: CheckpointStore) -> None:
    app = chain().compile(store=store)
    assert not app.cancel("nobody")
    app.invoke({}, run_id="r")
    assert not app.cancel("r"), "a finished run is not executing"
    other = chain(name="other").compile(store=store)
    ACTIONS[("n0", 1)] = lambda ctx: APPS.append(other.cancel(ctx.run_id))
    app.invoke({}, run_id="r2")
    assert APPS == [False], "cancel() of another graph does not reach this graph's run"


def test_a_cancelled_run_without_a_store_says_it_cannot_be_resumed() -> None:
    app = chain().compile()
    ACTIONS[("n0", 1)] = lambda ctx: app.cancel(ctx.run_id)
    with pytest.raises(RunCancelledError, match="no checkpoint store, so it cannot be resumed"):
        app.invoke({}, run_id="r")


def test_cancelled_runs_emit_run_cancelled_and_streams_raise(store: CheckpointStore) -> None:
    app = chain().compile(store=store)
    ACTIONS[("n1", 2)] = lambda ctx: app.cancel(ctx.run_id, reason="enough")
    events: list[Any] = []
    with pytest.raises(RunCancelledError):
        events.extend(app.stream({}, run_id="r"))
    assert events[-1] == RunCancelled(run_id="r", step=2, reason="enough")
    assert [e.kind for e in events].count("step_completed") == 2
    assert [e.kind for e in app.resume_stream("r")][-1] == "run_finished"
    _once_each()


# --------------------------------------------------------------------------- streams, asyncio


def test_closing_a_stream_cancels_the_run_at_the_step_it_reached(store: CheckpointStore) -> None:
    app = chain().compile(store=store)
    stream = app.stream({}, run_id="r")
    for event in stream:
        if event.kind == "step_completed" and event.step == 2:
            break
    stream.close()
    record = app.get_run("r")
    assert (record.status, record.last_step, record.stopped_by) == (
        "cancelled",
        2,
        "its event stream was closed",
    )
    assert app.resume("r") == REFERENCE
    _once_each()


async def slow(state: S, ctx: RunContext) -> dict[str, Any]:
    """Waits (until cancelled) on its first execution."""
    CALLS[f"{ctx.node}@{ctx.step}"] += 1
    if CALLS[f"{ctx.node}@{ctx.step}"] == 1:
        ENTERED.set()
        await asyncio.sleep(DEADLINE_S)
    return {"log": [ctx.node], "total": len(ctx.node)}


def test_a_cancelled_asyncio_task_marks_the_run_cancelled(store: CheckpointStore) -> None:
    graph = (
        Graph("async-cancel", state=S)
        .with_node("n0", work)
        .with_node("n1", slow)
        .with_node("n2", work)
        .with_edge(START, "n0")
        .with_edge("n0", "n1")
        .with_edge("n1", "n2")
        .with_edge("n2", END)
    )
    app = graph.compile(store=store)

    async def main() -> None:
        task = asyncio.create_task(app.ainvoke({}, run_id="r"))
        while not ENTERED.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    record = app.get_run("r")
    assert (record.status, record.last_step, record.stopped_by) == (
        "cancelled",
        1,
        "its asyncio task was cancelled",
    )
    final = asyncio.run(app.aresume("r"))
    assert final.log == ["n0", "n1", "n2"]
    assert Counter({"n0@1": 1, "n1@2": 2, "n2@3": 1}) == CALLS  # the dropped step re-ran


def test_aresume_waits_for_the_owner_on_the_event_loop(store: CheckpointStore) -> None:
    """aresume(wait=True) sleeps on the loop: other tasks run while it waits."""
    app = chain().compile(store=store)

    def block(ctx: RunContext) -> None:
        ENTERED.set()
        # Released by a task on the loop where aresume waits: a loop blocked by the wait
        # never runs it (the old aresume slept on the loop's thread), and this times out.
        if not RELEASE.wait(DEADLINE_S / 6):
            raise RuntimeError("the loop was blocked while aresume waited")
        raise RuntimeError("stop here")

    ACTIONS[("n1", 2)] = block
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            app.invoke({}, run_id="r")
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    assert ENTERED.wait(DEADLINE_S)
    ticks: list[int] = []

    async def main() -> S:
        waiter = asyncio.create_task(app.aresume("r", wait=DEADLINE_S))
        # The loop is free while aresume waits: this task runs, then lets the owner go.
        for i in range(3):
            ticks.append(i)
            await asyncio.sleep(0.01)
        RELEASE.set()
        return await waiter

    final = asyncio.run(main())
    thread.join(DEADLINE_S)
    assert isinstance(box.get("error"), NodeError), box
    assert "stop here" in str(box["error"])
    assert ticks == [0, 1, 2]
    assert final == REFERENCE


# --------------------------------------------------------------------------- nested runs


class Inner(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0


def inner_work(state: Inner, ctx: RunContext) -> dict[str, Any]:
    CALLS[f"{ctx.node}@{ctx.step}"] += 1
    action = ACTIONS.pop((ctx.node, ctx.step), None)
    if action is not None:
        action(ctx)
    return {"log": [ctx.node], "total": 1}


def nested() -> Graph[S]:
    from stargraph.nodes import SubgraphNode
    from stargraph.skills import Skill

    child = Graph("cancel-inner", state=Inner)
    names = [f"c{i}" for i in range(4)]
    for node in names:
        child = child.with_node(node, inner_work)
    child = child.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        child = child.with_edge(a, b)
    skill = Skill.from_graph(
        child.with_edge(names[-1], END),
        name="cancel-inner",
        version="1.0.0",
        kind="workflow",
        description="four steps",
        state_schema=Inner,
    )
    return (
        Graph("cancel-outer", state=S)
        .with_node("a", work)
        .with_node(SubgraphNode.from_skill(skill, site="inner"))
        .with_node("z", work)
        .with_edge(START, "a")
        .with_edge("a", "inner")
        .with_edge("inner", "z")
        .with_edge("z", END)
    )


def test_cancelling_a_parent_stops_its_nested_run_first(store: CheckpointStore) -> None:
    reference = nested().compile().invoke({})
    CALLS.clear()
    app = nested().compile(store=store)
    # The parent is asked to stop while its child runs step 2: the child stops after it,
    # then the parent stops at its last committed step (1), its subgraph step not committed.
    ACTIONS[("c1", 2)] = lambda ctx: APPS.append(app.cancel("r"))
    with pytest.raises(RunCancelledError) as info:
        app.invoke({}, run_id="r")
    assert APPS == [True]
    assert (info.value.run_id, info.value.step) == ("r", 1)
    child_id = "r::inner@1.0"
    assert isinstance(info.value.__cause__, RunCancelledError)
    assert info.value.__cause__.run_id == child_id
    assert (store.get_run(child_id).status, store.get_run(child_id).last_step) == ("cancelled", 2)
    assert (app.get_run("r").status, app.get_run("r").last_step) == ("cancelled", 1)
    assert app.resume("r") == reference
    _once_each()  # the child resumed after its step 2; none of its steps ran twice


def test_a_nested_run_cancelled_alone_fails_its_parent_node(store: CheckpointStore) -> None:
    reference = nested().compile().invoke({})
    CALLS.clear()
    app = nested().compile(store=store)
    child = app.specs["inner"].fn.child  # type: ignore[attr-defined]
    ACTIONS[("c1", 2)] = lambda ctx: APPS.append(child.cancel(ctx.run_id))
    with pytest.raises(RunCancelledError):
        app.invoke({}, run_id="r")
    assert APPS == [True]
    assert app.get_run("r").status == "failed", "only the child was asked to stop"
    assert app.get_run("r::inner@1.0").status == "cancelled"
    assert app.resume("r") == reference
    _once_each()


# --------------------------------------------------------------------------- signals


def _signal_self(signum: int) -> None:
    """Send ``signum`` to this process and wait (in Python code, where the interpreter runs
    signal handlers) until its handler has run: the first signal is then on record, and a
    second one has raised."""
    before = _cancel.SIGNALLED.reason
    os.kill(os.getpid(), signum)
    deadline = time.monotonic() + DEADLINE_S
    while _cancel.SIGNALLED.reason == before:
        assert time.monotonic() < deadline, "the signal handler never ran"
        time.sleep(0.001)


def test_a_first_signal_cancels_at_the_step_boundary(store: CheckpointStore) -> None:
    app = chain().compile(store=store)
    ACTIONS[("n1", 2)] = lambda ctx: _signal_self(signal.SIGINT)
    before = signal.getsignal(signal.SIGINT)
    with cancel_on_signals() as scope, pytest.raises(RunCancelledError) as info:
        app.invoke({}, run_id="r")
    assert signal.getsignal(signal.SIGINT) is before, "the previous handler is back"
    assert (scope.name, scope.forced, scope.exit_code) == ("SIGINT", False, 130)
    assert (info.value.step, info.value.reason) == (2, "SIGINT")
    record = app.get_run("r")
    assert (record.status, record.last_step, record.stopped_by) == ("cancelled", 2, "SIGINT")
    assert app.resume("r") == REFERENCE
    _once_each()


def test_runs_started_after_the_signal_stop_at_their_first_boundary(
    store: CheckpointStore,
) -> None:
    app = chain().compile(store=store)
    with cancel_on_signals():
        _signal_self(signal.SIGTERM)
        with pytest.raises(RunCancelledError):
            app.invoke({}, run_id="late")
    assert (app.get_run("late").status, app.get_run("late").last_step) == ("cancelled", 0)
    assert Counter() == CALLS
    app.invoke({}, run_id="after")  # outside the block: runs to its end
    assert app.resume("late") == REFERENCE


def test_a_second_signal_stops_at_once_and_leaves_the_run_orphaned(
    store: CheckpointStore,
) -> None:
    app = chain().compile(store=store)

    def twice(ctx: RunContext) -> None:
        _signal_self(signal.SIGINT)
        _signal_self(signal.SIGINT)  # raises KeyboardInterrupt here, mid-step
        raise AssertionError("not reached")

    ACTIONS[("n1", 2)] = twice
    with cancel_on_signals() as scope, pytest.raises(KeyboardInterrupt) as info:
        app.invoke({}, run_id="r")
    assert scope.forced
    assert "it shows as 'orphaned' until resumed" in "\n".join(info.value.__notes__)
    record = app.get_run("r")
    assert (record.status, record.last_step) == ("orphaned", 1)
    # Not only this process knows: the lease itself lapsed, so every process sees it.
    assert record.owner is not None
    assert record.lease_expires is not None
    assert datetime.fromisoformat(record.lease_expires) <= datetime.now(UTC)
    assert app.resume("r") == REFERENCE
    # Only the step in flight ran again.
    assert Counter({"n0@1": 1, "n1@2": 2, "n2@3": 1, "n3@4": 1, "n4@5": 1}) == CALLS


def test_keyboard_interrupt_in_a_node_releases_the_lease(store: CheckpointStore) -> None:
    """Without cancel_on_signals a Ctrl-C is a KeyboardInterrupt: the run stops at once
    and is orphaned at once (it used to keep its lease until garbage collection)."""
    app = chain().compile(store=store)

    def interrupt(ctx: RunContext) -> None:
        raise KeyboardInterrupt

    ACTIONS[("n2", 3)] = interrupt
    with pytest.raises(KeyboardInterrupt) as info:
        app.invoke({}, run_id="r")
    # Kept alive, as a caller handling it would: the traceback still reaches the run, so
    # only giving the lease up (not garbage collection) can make it orphaned.
    assert info.value.__traceback__ is not None
    record = app.get_run("r")
    assert (record.status, record.last_step) == ("orphaned", 2)
    assert record.lease_expires is not None
    assert datetime.fromisoformat(record.lease_expires) <= datetime.now(UTC)
    assert app.resume("r") == REFERENCE


def test_cancel_on_signals_needs_the_main_thread() -> None:
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            with cancel_on_signals():
                pass
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(DEADLINE_S)
    assert isinstance(box.get("error"), RunError)
    assert "CompiledGraph.cancel(run_id)" in str(box["error"])


# --------------------------------------------------------------------------- the CLI (acceptance)

STARGRAPH = str(Path(sys.executable).parent / "stargraph")

# A user's graph file: five steps; each node appends "<node> <step>" to a ledger file (the
# record of executions); the first execution of step SG_BLOCK_STEP (default 3) reports
# through the "entered" file that it is inside the step, then waits for the test's "go" file.
CLI_GRAPH = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path
    from typing import Annotated

    from pydantic import BaseModel

    from stargraph import END, START, Graph, RunContext, reducers


    class Tally(BaseModel):
        log: Annotated[list[str], reducers.append] = []
        total: Annotated[int, reducers.add] = 0


    def work(state: Tally, ctx: RunContext) -> dict:
        here = Path(os.environ["SG_TRIAL_DIR"])
        with open(here / "ledger", "a") as ledger:
            ledger.write(f"{ctx.node} {ctx.step}\\n")
        block_at = int(os.environ.get("SG_BLOCK_STEP", "3"))
        if ctx.step == block_at and not (here / "entered").exists():
            (here / "entered").write_text(str(os.getpid()))
            deadline = time.monotonic() + 60
            while not (here / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            (here / "left").write_text("")
        return {"log": [ctx.node], "total": len(ctx.node)}


    graph = Graph("tally", state=Tally)
    for name in ["n0", "n1", "n2", "n3", "n4"]:
        graph = graph.with_node(name, work)
    graph = (
        graph.with_edge(START, "n0").with_edge("n0", "n1").with_edge("n1", "n2")
        .with_edge("n2", "n3").with_edge("n3", "n4").with_edge("n4", END)
    )
    """
)
CLI_RESULT = {"log": ["n0", "n1", "n2", "n3", "n4"], "total": 10}


class _Child:
    """``stargraph ARGS`` in a subprocess whose stderr lines are collected as they come."""

    def __init__(self, cwd: Path, *args: str, block_at: int = 3, program: str = STARGRAPH) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STARGRAPH_DEBUG")}
        env["SG_TRIAL_DIR"] = str(cwd)
        env["SG_BLOCK_STEP"] = str(block_at)
        self.proc = subprocess.Popen(
            [program, *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()

    def wait_for_line(self, text: str) -> None:
        with self._seen:
            found = self._seen.wait_for(
                lambda: any(text in line for line in self.lines) or self.proc.poll() is not None,
                timeout=DEADLINE_S,
            )
        assert found, self.lines
        assert any(text in line for line in self.lines), self.lines

    def finish(self) -> tuple[int, str, str]:
        # Not communicate(): it would read stderr too, in competition with the reader.
        assert self.proc.stdout is not None
        with self.proc.stdout:
            stdout = self.proc.stdout.read()
        self.proc.wait(DEADLINE_S)
        self._reader.join(DEADLINE_S)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return self.proc.returncode, stdout, "".join(self.lines)


def _wait_for_file(path: Path, child: _Child) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        assert child.proc.poll() is None, child.finish()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.005)


def _resume_command(stderr: str) -> list[str]:
    """The command the CLI printed after 'continue it with: ', as argv."""
    import shlex

    marker = "continue it with: "
    assert marker in stderr, stderr
    return shlex.split(stderr.split(marker, 1)[1].strip().splitlines()[0])


def _ledger(trial: Path) -> Counter[str]:
    return Counter((trial / "ledger").read_text().splitlines())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_run_cancelled_by_a_signal_prints_the_resume_command(
    tmp_path: Path, signum: int
) -> None:
    """Issue 17 acceptance: a Ctrl-C (or SIGTERM) inside a step of `stargraph run` stops the
    run after that step as `cancelled`, prints the resume command, and that exact command
    finishes the run with the uninterrupted result, every node run once."""
    (tmp_path / "tally.py").write_text(CLI_GRAPH)
    db = str(tmp_path / "runs" / "sg.db")
    child = _Child(tmp_path, "run", "tally.py", "--run-id", "r1", "--db", db, "--plain")
    _wait_for_file(tmp_path / "entered", child)
    child.proc.send_signal(signum)
    name = signal.Signals(signum).name
    # The child says it will stop after this step; only then may the step finish.
    child.wait_for_line(f"{name}: stopping after the current step")
    (tmp_path / "go").write_text("")
    code, stdout, stderr = child.finish()
    assert code == 128 + signum, stderr
    assert stdout == ""
    assert f"run r1 was cancelled ({name}) after step 3, its last committed step" in stderr
    command = _resume_command(stderr)
    assert command[:3] == ["stargraph", "resume", "r1"]
    with SqliteStore(db) as store:
        record = store.get_run("r1")
        assert (record.status, record.last_step, record.stopped_by) == ("cancelled", 3, name)
        assert record.owner is None
    done = subprocess.run(
        [STARGRAPH, *command[1:]],
        cwd=tmp_path,
        env={**os.environ, "SG_TRIAL_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == CLI_RESULT
    assert _ledger(tmp_path) == Counter(f"n{i} {i + 1}" for i in range(5))
    with SqliteStore(db) as store:
        assert store.get_run("r1").status == "done"
        assert store.integrity_check() == "ok"


def test_cli_second_ctrl_c_stops_at_once_and_leaves_the_run_orphaned(tmp_path: Path) -> None:
    """Issue 17 acceptance: a second Ctrl-C stops at once, mid-step; the run is orphaned
    (its lease given up: resumable at once) and the printed command finishes it."""
    (tmp_path / "tally.py").write_text(CLI_GRAPH)
    db = str(tmp_path / "sg.db")
    child = _Child(tmp_path, "run", "tally.py", "--run-id", "r2", "--db", db, "--plain")
    _wait_for_file(tmp_path / "entered", child)
    child.proc.send_signal(signal.SIGINT)
    child.wait_for_line("SIGINT: stopping after the current step")
    child.proc.send_signal(signal.SIGINT)  # the node is still waiting for "go"
    code, _, stderr = child.finish()
    assert code == 130, stderr
    # The process did not wait for the abandoned node (it would have written "left").
    assert not (tmp_path / "left").exists()
    assert "run r2 stopped at once on a second SIGINT; it shows as orphaned" in stderr
    assert "from step 2, its last committed step" in stderr
    with SqliteStore(db) as store:
        record = store.get_run("r2")
        assert (record.status, record.last_step) == ("orphaned", 2)
        # The lease lapsed when the run stopped, not when its process died: any host sees it.
        assert record.lease_expires is not None
        assert datetime.fromisoformat(record.lease_expires) <= datetime.now(UTC)
    listed = subprocess.run(
        [STARGRAPH, "runs", "--db", db, "--status", "orphaned"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert listed.returncode == 0, listed
    assert "r2" in listed.stdout, listed
    (tmp_path / "go").write_text("")
    done = subprocess.run(
        [STARGRAPH, *_resume_command(stderr)[1:]],
        cwd=tmp_path,
        env={**os.environ, "SG_TRIAL_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == CLI_RESULT
    # Only the step stopped at once ran twice.
    assert _ledger(tmp_path) == Counter({"n0 1": 1, "n1 2": 1, "n2 3": 2, "n3 4": 1, "n4 5": 1})


def test_cli_resume_cancelled_by_ctrl_c_prints_the_resume_command(tmp_path: Path) -> None:
    """`stargraph resume` is stopped the same way: cancelled at the step reached, and the
    printed command (the same resume) finishes the run."""
    (tmp_path / "tally.py").write_text(CLI_GRAPH)
    db = str(tmp_path / "sg.db")
    first = _Child(tmp_path, "run", "tally.py", "--run-id", "r3", "--db", db, "--plain", block_at=2)
    _wait_for_file(tmp_path / "entered", first)
    first.proc.send_signal(signal.SIGINT)
    first.wait_for_line("SIGINT: stopping after the current step")
    (tmp_path / "go").write_text("")
    code, _, stderr = first.finish()
    assert code == 130, stderr
    for marker in ("entered", "go"):
        (tmp_path / marker).unlink()
    command = _resume_command(stderr)
    second = _Child(tmp_path, *command[1:], block_at=4)
    _wait_for_file(tmp_path / "entered", second)
    second.proc.send_signal(signal.SIGINT)
    second.wait_for_line("SIGINT: stopping after the current step")
    (tmp_path / "go").write_text("")
    code, _, stderr = second.finish()
    assert code == 130, stderr
    assert "run r3 was cancelled (SIGINT) after step 4, its last committed step" in stderr
    assert _resume_command(stderr) == command
    with SqliteStore(db) as store:
        assert (store.get_run("r3").status, store.get_run("r3").last_step) == ("cancelled", 4)
    code, stdout, stderr = _Child(tmp_path, *command[1:]).finish()
    assert code == 0, stderr
    assert json.loads(stdout) == CLI_RESULT
    assert _ledger(tmp_path) == Counter(f"n{i} {i + 1}" for i in range(5))


def test_closing_a_stream_after_its_last_step_finishes_the_run(store: CheckpointStore) -> None:
    app = chain().compile(store=store)
    stream = app.stream({}, run_id="r")
    for event in stream:
        if event.kind == "step_completed" and not event.next:
            break  # the last step is committed; run_finished not read yet
    stream.close()
    assert app.get_run("r").status == "done"
    assert app.get_state("r") == REFERENCE


# --------------------------------------------------------------------------- a user's own script

# A user's script: one branch per argument, each a blocking node that says on which thread it
# runs (its "entered-<node>" file), then blocks for a minute and writes "left-<node>". One
# branch runs under stream() (on the consumer's thread, as invoke runs it); several run under
# invoke(), the first on the driver's thread and the others on worker threads.
SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import threading
    from pathlib import Path
    from typing import Annotated

    from pydantic import BaseModel

    from stargraph import END, START, Graph, RunContext, reducers
    from stargraph.checkpoint import SqliteStore
    from stargraph.runtime import cancel_on_signals

    here = Path(os.environ["SG_TRIAL_DIR"])


    class S(BaseModel):
        log: Annotated[list[str], reducers.append] = []


    def wait(state: S, ctx: RunContext) -> dict:
        # Written aside, then renamed: the test reads the file as soon as it exists, and
        # write_text creates it empty before it writes the name.
        (here / f"{ctx.node}.part").write_text(threading.current_thread().name)
        os.replace(here / f"{ctx.node}.part", here / f"entered-{ctx.node}")
        threading.Event().wait(60)  # nothing sets it: the node blocks for a minute
        (here / f"left-{ctx.node}").write_text("")
        return {"log": [ctx.node]}


    branches = sys.argv[1:]
    graph = Graph("waits", state=S)
    for name in branches:
        graph = graph.with_node(name, wait, blocking=True)
        graph = graph.with_edge(START, name).with_edge(name, END)
    app = graph.compile(store=SqliteStore(here / "runs.db"))
    with cancel_on_signals(announce=True):
        if len(branches) == 1:
            for _ in app.stream({}, run_id="r"):
                pass
        else:
            app.invoke({}, run_id="r")
    """
)


@pytest.mark.parametrize(
    ("branches", "threads"),
    [(["a"], ["MainThread"]), (["a", "b"], ["MainThread", "stargraph-worker_0"])],
    ids=["stream-main-thread", "invoke-worker-thread"],
)
def test_a_second_ctrl_c_in_a_users_script_does_not_wait_for_a_node_thread(
    tmp_path: Path, branches: list[str], threads: list[str]
) -> None:
    """After a second Ctrl-C a script exits at once, even while a node it gave up still runs
    on one of the engine's threads: the interpreter's exit used to join those threads, so
    the script stayed alive (printing nothing) until the node ended by itself."""
    (tmp_path / "script.py").write_text(SCRIPT)
    child = _Child(tmp_path, "script.py", *branches, program=sys.executable)
    for name in branches:
        _wait_for_file(tmp_path / f"entered-{name}", child)
    on = sorted((tmp_path / f"entered-{name}").read_text() for name in branches)
    assert on == threads, "the nodes run where this test means them to"
    child.proc.send_signal(signal.SIGINT)
    child.wait_for_line("SIGINT: stopping after the current step")
    child.proc.send_signal(signal.SIGINT)  # every node is still blocked
    code, _, stderr = child.finish()
    assert code == -signal.SIGINT, stderr  # an uncaught KeyboardInterrupt
    assert "run 'r' stopped at once; it shows as 'orphaned'" in stderr
    # The script did not wait for the nodes it gave up: none of them got to leave.
    assert sorted(p.name for p in tmp_path.glob("left-*")) == []
    with SqliteStore(tmp_path / "runs.db") as store:
        assert store.get_run("r").status == "orphaned"
