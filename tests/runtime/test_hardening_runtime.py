"""Hardening of the runtime (issue 25): exactly-once under timeouts, isolated observers,
engine failures that mark the run failed, unprintable exceptions, node ids, step bounds.

Timing never decides an outcome here: slow attempts are held on ``threading.Event`` objects
and released by the test; waits are deadline-bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import MemoryStore, SqliteStore
from stargraph.errors import (
    AttemptAbandonedError,
    EngineError,
    NodeError,
    RunError,
)
from stargraph.graph import END, START, Graph
from stargraph.ir import RetryPolicyIR
from stargraph.runtime import RunContext
from stargraph.tools import ToolContext, tool

WAIT = 30.0
"""Deadline of every wait on another thread (generous: a loaded CI box may be slow)."""


class Pay(BaseModel):
    receipt: str = ""


def _retry(attempts: int = 5) -> RetryPolicyIR:
    return RetryPolicyIR(
        max_attempts=attempts, initial_interval_s=0, jitter=False, retry_on=(TimeoutError,)
    )


class _Held:
    """Attempt 1 of the node waits on ``release``; what each attempt ended with is kept."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.first_done = threading.Event()
        self.attempts = itertools.count(1)
        self.outcome: dict[int, BaseException | None] = {}
        self.ledger: list[str] = []
        self.lock = threading.Lock()

    def charge(self, attempt: int) -> str:
        with self.lock:
            self.ledger.append(f"charge by attempt {attempt}")
        return f"receipt-{attempt}"

    def node(self, hold_in_effect: bool) -> Callable[[Pay, RunContext], dict[str, Any]]:
        def pay(state: Pay, ctx: RunContext) -> dict[str, Any]:
            attempt = next(self.attempts)
            if attempt > 1 and hold_in_effect:
                self.release.set()  # attempt 1 may go on with its effect once it timed out
            try:
                if attempt == 1 and not hold_in_effect:
                    assert self.release.wait(WAIT)

                def effect() -> str:
                    if attempt == 1 and hold_in_effect:
                        assert self.release.wait(WAIT)
                    return self.charge(attempt)

                receipt = ctx.once("charge", effect)
                self.outcome[attempt] = None
                return {"receipt": receipt}
            except BaseException as exc:
                self.outcome[attempt] = exc
                raise
            finally:
                if attempt == 1:
                    self.first_done.set()

        return pay


def _pay_graph(held: _Held, *, hold_in_effect: bool, timeout_s: float = 0.2) -> Graph[Pay]:
    return (
        Graph("pay", state=Pay)
        .with_node(
            "pay",
            held.node(hold_in_effect),
            ref="tests.hardening:pay",
            timeout_s=timeout_s,
            retry=_retry(),
        )
        .with_edge(START, "pay")
        .with_edge("pay", END)
    )


def _journal_kinds(store: SqliteStore, run_id: str) -> list[tuple[int, str, str]]:
    """Every journaled call of the run: committed steps' calls and rows past the last step."""
    steps = store.get_steps(run_id)
    calls = [(c.step, c.kind, c.key) for s in steps for c in s.calls]
    last = store.get_run(run_id).last_step
    calls += [(e.step, e.kind, e.key) for e in store.get_journal(run_id, last + 1)]
    calls += [(e.step, e.kind, e.key) for e in store.get_journal(run_id, last)]
    return calls


def test_ctx_once_is_not_repeated_by_a_timed_out_attempt_that_wakes_after_commit(
    tmp_path: Path,
) -> None:
    """Issue 25 item 4: attempt 1 outlives its timeout, attempt 2 charges and the step
    commits, then attempt 1 wakes: its ctx.once must raise, charge nothing, record nothing."""
    held = _Held()
    with SqliteStore(tmp_path / "runs.db") as store:
        app = _pay_graph(held, hold_in_effect=False).compile(store=store)
        state = app.invoke({}, run_id="r")
        assert state.receipt == "receipt-2"
        assert store.get_run("r").status == "done"
        held.release.set()
        assert held.first_done.wait(WAIT)
        assert isinstance(held.outcome[1], AttemptAbandonedError)
        assert "attempt 1 of node 'pay'" in str(held.outcome[1])
        assert held.ledger == ["charge by attempt 2"]
        # One journal row in all, in the committed step; none landed late.
        assert _journal_kinds(store, "r") == [(1, "once", "charge")]
        assert app.get_state("r").receipt == "receipt-2"


def test_an_effect_under_way_at_the_timeout_is_recorded_and_served_to_the_retry(
    tmp_path: Path,
) -> None:
    """Attempt 1 times out *inside* its ctx.once effect: the retry waits for that effect and
    is served its result instead of charging again."""
    held = _Held()
    with SqliteStore(tmp_path / "runs.db") as store:
        app = _pay_graph(held, hold_in_effect=True).compile(store=store)
        state = app.invoke({}, run_id="r")
        assert held.first_done.wait(WAIT)
        assert held.ledger == ["charge by attempt 1"]
        assert state.receipt == "receipt-1"
        assert isinstance(held.outcome[1], AttemptAbandonedError)
        assert _journal_kinds(store, "r") == [(1, "once", "charge")]


def test_abandoned_attempt_is_fenced_on_the_async_driver_too(tmp_path: Path) -> None:
    """ainvoke runs a sync node with a timeout on the pool: same fence."""
    held = _Held()
    with SqliteStore(tmp_path / "runs.db") as store:
        app = _pay_graph(held, hold_in_effect=False).compile(store=store)
        state = asyncio.run(app.ainvoke({}, run_id="r"))
        assert state.receipt == "receipt-2"
        held.release.set()
        assert held.first_done.wait(WAIT)
        assert isinstance(held.outcome[1], AttemptAbandonedError)
        assert held.ledger == ["charge by attempt 2"]
        assert _journal_kinds(store, "r") == [(1, "once", "charge")]
        app.close()


def test_abandoned_attempt_cannot_run_effects_without_a_store() -> None:
    """No store, no journal: the woken attempt's ctx.once still refuses to run."""
    held = _Held()
    app = _pay_graph(held, hold_in_effect=False).compile()
    assert app.invoke({}).receipt == "receipt-2"
    held.release.set()
    assert held.first_done.wait(WAIT)
    assert isinstance(held.outcome[1], AttemptAbandonedError)
    assert held.ledger == ["charge by attempt 2"]


class _Always(BaseModel):
    n: int = 0


def test_a_late_record_after_the_task_finished_is_refused(tmp_path: Path) -> None:
    """Attempt 2 finishes without any journaled call while attempt 1 is inside an effect:
    the task is sealed, so attempt 1's record never reaches the committed step."""
    inside = threading.Event()
    release = threading.Event()
    done = threading.Event()
    attempts = itertools.count(1)
    outcome: list[BaseException] = []

    def node(state: _Always, ctx: RunContext) -> dict[str, Any]:
        attempt = next(attempts)
        if attempt > 1:
            return {"n": 2}
        try:

            def effect() -> int:
                inside.set()
                assert release.wait(WAIT)
                return 1

            ctx.once("slow", effect)
        except BaseException as exc:
            outcome.append(exc)
            raise
        finally:
            done.set()
        return {"n": 1}

    graph = (
        Graph("late", state=_Always)
        .with_node("n", node, ref="tests.hardening:late", timeout_s=0.2, retry=_retry())
        .with_edge(START, "n")
        .with_edge("n", END)
    )
    with SqliteStore(tmp_path / "runs.db") as store:
        app = graph.compile(store=store)
        assert app.invoke({}, run_id="r").n == 2
        assert inside.is_set()
        release.set()
        assert done.wait(WAIT)
        assert isinstance(outcome[0], AttemptAbandonedError)
        assert _journal_kinds(store, "r") == []


# --------------------------------------------------------------------------- observers


class _Ledger(BaseModel):
    charges: int = 0
    done: bool = False


LEDGER: list[str] = []


def charge_once(state: _Ledger, ctx: RunContext) -> dict[str, Any]:
    def charge() -> str:
        LEDGER.append(f"{ctx.run_id}:{ctx.step}")
        return "ok"

    receipt = ctx.once("charge", charge)
    return {"charges": state.charges + (receipt == "ok")}


def finish(state: _Ledger) -> dict[str, Any]:
    return {"done": True}


class _RaisingObserver:
    def __init__(self) -> None:
        self.seen = 0

    from stargraph.plugin import hookimpl

    @hookimpl
    def on_event(self, event: Any) -> None:
        self.seen += 1
        raise RuntimeError(f"observer broke on {event.kind}")


def _ledger_graph() -> Graph[_Ledger]:
    return (
        Graph("ledger", state=_Ledger)
        .with_node("charge", charge_once)
        .with_node("finish", finish)
        .with_edge(START, "charge")
        .with_edge("charge", "finish")
        .with_edge("finish", END)
    )


def test_an_observer_that_raises_never_aborts_a_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25 item 8: an on_event plugin raising on every event is logged and counted; the
    run completes, its side effects happen once, and no resume is needed."""
    from stargraph.plugin import get_plugin_manager

    LEDGER.clear()
    observer = _RaisingObserver()
    pm = get_plugin_manager(plugins=[observer], entry_points=False)
    with SqliteStore(tmp_path / "runs.db") as store:
        app = _ledger_graph().compile(store=store, plugins=pm)
        with caplog.at_level(logging.WARNING, logger="stargraph"):
            state = app.invoke({}, run_id="r")
        assert state == _Ledger(charges=1, done=True)
        assert store.get_run("r").status == "done"
        assert LEDGER == ["r:1"]
        # run_started, 2 x (node_started, node_finished, step_completed), run_finished
        assert observer.seen == 8
        assert app.observer_failures == 8
        failures = [r for r in caplog.records if "on_event observer" in r.getMessage()]
        assert len(failures) == 8
        assert "RuntimeError: observer broke on run_started" in failures[0].getMessage()
        # Streaming is isolated the same way, and the stream still sees every event.
        events = list(app.stream({}, run_id="s"))
        assert [e.kind for e in events][-1] == "run_finished"
        assert app.observer_failures == 16
        assert LEDGER == ["r:1", "s:1"]


class _BrokenStore(MemoryStore):
    """A store whose commit of step 2 raises an untyped error (a bug in a custom store)."""

    def commit_step(self, run_id: str, step: Any, **kwargs: Any) -> None:
        if step.step == 2:
            raise KeyError("disk index")
        super().commit_step(run_id, step, **kwargs)


def test_an_untyped_engine_error_marks_the_run_failed() -> None:
    """Anything but a StargraphError escaping engine code (here a custom store's KeyError)
    becomes an EngineError, and the run is failed with the error recorded, not left
    'running'."""
    LEDGER.clear()
    store = _BrokenStore()
    app = _ledger_graph().compile(store=store)
    with pytest.raises(EngineError, match=r"inside the engine, not in a node: KeyError") as info:
        app.invoke({}, run_id="r")
    assert isinstance(info.value.__cause__, KeyError)
    record = store.get_run("r")
    assert record.status == "failed"
    assert record.error is not None
    assert "KeyError: 'disk index'" in record.error
    assert LEDGER == ["r:1"]
    # The stream and async drivers do the same; the stream ends with run_failed.
    events: list[Any] = []
    with pytest.raises(EngineError):
        events.extend(app.stream({}, run_id="s"))
    assert events[-1].kind == "run_failed"
    assert events[-1].error_type == "EngineError"
    with pytest.raises(EngineError):
        asyncio.run(app.ainvoke({}, run_id="a"))
    assert [store.get_run(r).status for r in ("s", "a")] == ["failed"] * 2


# --------------------------------------------------------------------------- odd values


class Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no text for you")


def unprintable(state: _Ledger) -> dict[str, Any]:
    raise Unprintable


def unprintable_router(state: _Ledger) -> str:
    raise Unprintable


def test_an_exception_whose_str_raises_is_described_safely() -> None:
    """Issue 25 item 12: describing a node's failure must not fail."""
    graph = (
        Graph("odd", state=_Ledger)
        .with_node("boom", unprintable)
        .with_edge(START, "boom")
        .with_edge("boom", END)
    )
    store = MemoryStore()
    with pytest.raises(NodeError, match=r"Unprintable: <unprintable Unprintable>") as info:
        graph.compile(store=store).invoke({}, run_id="r")
    assert isinstance(info.value.__cause__, Unprintable)
    assert store.get_run("r").status == "failed"
    routed = (
        Graph("odd-router", state=_Ledger)
        .with_node("finish", finish)
        .with_edge(START, "finish")
        .with_conditional_edges("finish", unprintable_router, {"end": END})
    )
    with pytest.raises(NodeError, match=r"Unprintable: <unprintable Unprintable>"):
        routed.compile().invoke({})


@pytest.mark.parametrize(
    ("node_id", "why"),
    [
        ("a\n", "malformed node id 'a\\\\n'"),
        ("__start__\n", "malformed node id '__start__\\\\n'"),
        ("__start__", "node id '__start__' is reserved"),
        ("__end__", "node id '__end__' is reserved"),
        ("__update__", "node id '__update__' is reserved"),
        ("__migration__", "node id '__migration__' is reserved"),
        ("__anything__", "node id '__anything__' is reserved"),
    ],
)
def test_malformed_and_reserved_node_ids_are_refused(node_id: str, why: str) -> None:
    """Issue 25 item 12: ids with a trailing newline passed the '$'-anchored pattern, and the
    runtime's own record names were accepted as node ids (which broke replay)."""
    from stargraph.errors import CompileError

    graph = (
        Graph("ids", state=_Ledger)
        .with_node(node_id, finish)
        .with_edge(START, node_id)
        .with_edge(node_id, END)
    )
    with pytest.raises(CompileError, match=why):
        graph.compile()
    # Ordinary ids, dunder-looking or not, still compile.
    for fine in ("_private", "a__b__", "__x", "node.v2-final"):
        Graph("ok", state=_Ledger).with_node(fine, finish).with_edge(START, fine).with_edge(
            fine, END
        ).compile()


@pytest.mark.parametrize("bad", [10**30, 0, -1, True, 2.5, "10", 2**53])
def test_max_steps_outside_its_range_is_a_typed_error(bad: Any) -> None:
    """Issue 25 item 12: max_steps=10**30 (or 0, negative, bool, non-int) is refused at
    compile and at invoke, naming the bound and the allowed range."""
    from stargraph.errors import CompileError, InvalidInputError

    graph = _ledger_graph()
    with pytest.raises(
        CompileError, match=r"max_steps=.* must be an int from 1 to 9007199254740991"
    ):
        graph.compile(max_steps=bad)
    app = graph.compile()
    with pytest.raises(InvalidInputError, match=r"must be an int from 1 to 9007199254740991"):
        app.invoke({}, max_steps=bad)
    with pytest.raises(InvalidInputError, match=r"must be an int from 1 to 9007199254740991"):
        asyncio.run(app.ainvoke({}, max_steps=bad))
    assert app.invoke({}, max_steps=2**53 - 1).done


def test_max_steps_on_resume_is_checked_too() -> None:
    from stargraph.errors import InvalidInputError

    store = MemoryStore()
    app = _ledger_graph().compile(store=store)
    with pytest.raises(RunError):
        app.invoke({}, run_id="r", max_steps=1)
    with pytest.raises(InvalidInputError, match=r"max_steps=1000000000000000000000000000000"):
        app.resume("r", max_steps=10**30)


# --------------------------------------------------------------------------- 100 trials

ROUNDS = 3
NODE_TIMEOUT = 0.05
SHORT_TOOL_TIMEOUT = 0.02
HOLDS = ("before_once", "in_once", "before_tool", "in_tool", "in_tool_short", "after_tool")


class Work(BaseModel):
    round: int = 0
    receipts: list[str] = []


class _Trial:
    """One trial: which attempt of which round is held where, and when it is released."""

    def __init__(self, run_id: str, rng: Any) -> None:
        self.run_id = run_id
        self.where = rng.choice(HOLDS)
        # A write whose tool times out while its body runs needs a later round to overwrite it.
        last = ROUNDS - 1 if self.where == "in_tool_short" else ROUNDS
        self.round = rng.randint(1, last)
        if self.where in ("in_once", "in_tool"):
            # The retry waits for the held call: release it when attempt 2 or 3 starts.
            self.trigger = rng.choice(("attempt2", "attempt3"))
        elif self.where == "in_tool_short":
            self.trigger = "next_round"
        else:
            self.trigger = rng.choice(("attempt2", "after_run"))
        self.release = threading.Event()
        self.held_done = threading.Event()
        self.lock = threading.Condition()
        self.attempts: dict[int, int] = {}
        self.charges: list[int] = []
        self.bodies: list[int] = []
        self.active_bodies = 0
        self.held_outcome: BaseException | None = None

    def enter(self, round_: int) -> int:
        with self.lock:
            attempt = self.attempts[round_] = self.attempts.get(round_, 0) + 1
        if (round_ == self.round and f"attempt{attempt}" == self.trigger) or (
            self.trigger == "next_round" and round_ == self.round + 1
        ):
            self.release.set()
        return attempt

    def hold(self, where: str, held: bool) -> None:
        if held and self.where == where:
            assert self.release.wait(WAIT), f"{self.run_id}: never released"


def _idle(trial: _Trial) -> bool:
    """No body of ``trial`` is running (read under its lock)."""
    return trial.active_bodies == 0


TRIALS: dict[str, _Trial] = {}


def _trial_of(path: str) -> _Trial:
    return TRIALS[path.removesuffix(".txt")]


def _write_body(ctx: ToolContext, path: str, content: str) -> str:
    trial = _trial_of(path)
    round_ = int(content.rsplit(maxsplit=1)[-1])
    with trial.lock:
        first = round_ not in trial.bodies
        trial.bodies.append(round_)
        trial.active_bodies += 1
    try:
        trial.hold(
            "in_tool" if trial.where == "in_tool" else "in_tool_short",
            first and round_ == trial.round,
        )
        target = ctx.workspace.resolve(path, tool=ctx.tool)
        target.write_text(content, encoding="utf-8")
        return f"wrote {content}"
    finally:
        with trial.lock:
            trial.active_bodies -= 1
            trial.lock.notify_all()


@tool(id="trial.write@1.0.0", side_effect="write", locks=("file:{path}:X",), timeout_s=30)
def trial_write(ctx: ToolContext, path: str, content: str) -> str:
    """Write content to a file (held on demand)."""
    return _write_body(ctx, path, content)


@tool(
    id="trial.write_fast@1.0.0",
    side_effect="write",
    locks=("file:{path}:X",),
    timeout_s=SHORT_TOOL_TIMEOUT,
)
def trial_write_fast(ctx: ToolContext, path: str, content: str) -> str:
    """Write content to a file, with a short timeout."""
    return _write_body(ctx, path, content)


def work(state: Work, ctx: RunContext) -> dict[str, Any]:
    from stargraph.errors import ToolError
    from stargraph.tools import ToolCall

    trial = TRIALS[ctx.run_id]
    round_ = state.round + 1
    attempt = trial.enter(round_)
    held = round_ == trial.round and attempt == 1
    try:
        trial.hold("before_once", held)

        def charge() -> str:
            trial.hold("in_once", held)
            with trial.lock:
                trial.charges.append(round_)
            return f"receipt-{round_}-{attempt}"

        receipt = ctx.once("charge", charge)
        trial.hold("before_tool", held)
        fast = trial.where == "in_tool_short" and round_ == trial.round
        call = ToolCall(
            tool="trial.write_fast" if fast else "trial.write",
            args={"path": f"{ctx.run_id}.txt", "content": f"round {round_}"},
            call_id=f"{ctx.run_id}/{round_}",
            node=ctx.node,
        )
        # A refused or failed write would be told to the model; this node does not retry it.
        with contextlib.suppress(ToolError):
            ctx.services["arbiter"].dispatch(call)
        trial.hold("after_tool", held)
        return {"round": round_, "receipts": [*state.receipts, receipt]}
    except BaseException as exc:
        if held:
            trial.held_outcome = exc
        raise
    finally:
        if held:
            trial.held_done.set()


def _again(state: Work) -> str:
    return "again" if state.round < ROUNDS else "done"


def test_exactly_once_under_timeout_and_retry_100_trials(tmp_path: Path) -> None:
    """Issue 25 acceptance: 100 trials of timeout + retry with ctx.once and a write tool,
    the slow attempt held at a seeded-random place and released at a seeded-random moment:
    every effect happens exactly once, the file holds the last committed write, and the
    commit log matches it."""
    import random

    from stargraph.tools import Arbiter, SqliteCommitLog, ToolRegistry

    rng = random.Random(25)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    commit_log = SqliteCommitLog(tmp_path / "commits.db")
    graph = (
        Graph("trial", state=Work)
        .with_node(
            "work",
            work,
            timeout_s=NODE_TIMEOUT,
            retry=_retry(attempts=20),
        )
        .with_edge(START, "work")
        .with_conditional_edges("work", _again, {"again": "work", "done": END})
    )
    with (
        SqliteStore(tmp_path / "runs.db") as store,
        Arbiter(
            ToolRegistry.build(builtins=[trial_write, trial_write_fast]),
            workspace=workspace,
            commit_log=commit_log,
        ) as arbiter,
    ):
        app = graph.compile(store=store, services={"arbiter": arbiter})
        for number in range(100):
            run_id = f"t{number:03d}"
            trial = TRIALS[run_id] = _Trial(run_id, rng)
            what = f"{run_id}: held {trial.where} in round {trial.round}, {trial.trigger}"
            try:
                state = app.invoke({}, run_id=run_id)
            finally:
                trial.release.set()
            assert trial.held_done.wait(WAIT), what
            with trial.lock:
                assert trial.lock.wait_for(partial(_idle, trial), WAIT), what
            rounds = list(range(1, ROUNDS + 1))
            assert state.round == ROUNDS, what
            assert sorted(trial.charges) == rounds, what  # each charge exactly once
            assert sorted(trial.bodies) == rounds, what  # each write body exactly once
            assert [r.split("-")[1] for r in state.receipts] == [str(r) for r in rounds], what
            # The file holds the last committed write, and the commit log says so.
            assert (workspace / f"{run_id}.txt").read_text() == f"round {ROUNDS}", what
            mine = [r for r in commit_log.records() if (r.call_id or "").startswith(run_id)]
            successes = [r for r in mine if r.status == "success"]
            assert successes, (what, mine)
            assert successes[-1].call_id == f"{run_id}/{ROUNDS}", (what, mine)
            # One charge and one tool call recorded per step; no row arrived late.
            calls = [(c.step, c.kind) for s in store.get_steps(run_id) for c in s.calls]
            assert calls == [(s, k) for s in rounds for k in ("once", "tool")], what
            last = store.get_run(run_id).last_step
            assert store.get_journal(run_id, last) == [], what
            assert store.get_journal(run_id, last + 1) == [], what
            if trial.where in ("before_once", "before_tool") and trial.trigger == "after_run":
                assert isinstance(trial.held_outcome, AttemptAbandonedError), what
        assert commit_log.verify_chain() is None
        app.close()


# --------------------------------------------------------------------------- remote path


class Fan(BaseModel):
    a: str = ""
    b: str = ""


REMOTE_HOLD = threading.Event()
REMOTE_ATTEMPTS = itertools.count(1)
REMOTE_FIRST_DONE = threading.Event()


def remote_a(state: Fan, ctx: RunContext) -> dict[str, Any]:
    attempt = next(REMOTE_ATTEMPTS)
    try:
        if attempt == 1:
            assert REMOTE_HOLD.wait(WAIT)
        return {"a": f"{attempt}:{ctx.uuid()}"}
    finally:
        if attempt == 1:
            REMOTE_FIRST_DONE.set()


def remote_b(state: Fan, ctx: RunContext) -> dict[str, Any]:
    return {"b": ctx.uuid()}


def test_a_timed_out_remote_attempt_records_nothing(tmp_path: Path) -> None:
    """The executor path (compile(executor=...)) was checked for the same race: a remote
    worker only computes, and the reply of a timed-out attempt is never unpacked, so its
    draws are not journaled. A guard, not a regression test (this held before the fence)."""
    import concurrent.futures

    graph = (
        Graph("remote", state=Fan)
        .with_node("a", remote_a, blocking=True, timeout_s=0.2, retry=_retry())
        .with_node("b", remote_b, blocking=True)
        .with_edge(START, "a")
        .with_edge(START, "b")
        .with_edge("a", END)
        .with_edge("b", END)
    )
    with (
        concurrent.futures.ThreadPoolExecutor(4) as executor,
        SqliteStore(tmp_path / "runs.db") as store,
    ):
        app = graph.compile(store=store, executor=executor)
        state = app.invoke({}, run_id="r")
        REMOTE_HOLD.set()
        assert REMOTE_FIRST_DONE.wait(WAIT)
        executor.shutdown(wait=True)
        assert state.a.startswith("2:")
        assert _journal_kinds(store, "r") == [(1, "uuid", ""), (1, "uuid", "")]
        app.close()
