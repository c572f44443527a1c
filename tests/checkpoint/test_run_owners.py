"""One owner per run (issue 25 items 6 and 9, issue 17 item 2).

A resume takes the run's lease before any node runs; a second resumer gets ``RunBusyError``
naming the owner (or waits with ``wait=True``); status changes and commits are fenced on the
lease; an interrupt answered again before the run went on gets the new answer; a run whose
process died shows as ``orphaned`` and resumes at once. In-process tests run on the memory and
SQLite stores; the cross-process ones fork real processes sharing one SQLite file.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import CheckpointStore, SqliteStore
from stargraph.checkpoint._lease import DEFAULT_LEASE_S, Lease, new_owner
from stargraph.errors import LeaseLostError, RunBusyError, RunNotResumableError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext

CALLS: list[str] = []
ENTERED = threading.Event()
RELEASE = threading.Event()
DEADLINE_S = 60.0


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    ENTERED.clear()
    RELEASE.clear()
    yield
    RELEASE.set()  # never leave a blocked node behind
    CALLS.clear()


# Every test here holds for both stores that need no server (the shared `store` fixture).
pytestmark = pytest.mark.stores("memory", "sqlite")


class S(BaseModel):
    log: list[str] = []
    answer: str = ""


def prep(state: S) -> dict[str, Any]:
    CALLS.append("prep")
    return {"log": [*state.log, "prep"]}


def slow(state: S) -> dict[str, Any]:
    """Holds the run (and its lease) until the test releases it, on its first call only."""
    CALLS.append("slow")
    if CALLS.count("slow") == 1:
        ENTERED.set()
        assert RELEASE.wait(DEADLINE_S), "the test never released the node"
    return {"log": [*state.log, "slow"]}


def ask(state: S, ctx: RunContext) -> dict[str, Any]:
    CALLS.append("ask")
    answer = ctx.interrupt({"question": "approve?"})
    CALLS.append(f"ask got {answer}")
    return {"answer": str(answer), "log": [*state.log, "ask"]}


def graph() -> Graph[S]:
    """prep, then (after an interrupt before it) slow, then ask (a node interrupt)."""
    return (
        Graph("owners", state=S)
        .with_node("prep", prep)
        .with_node("slow", slow, interrupt_before=True)
        .with_node("ask", ask)
        .with_edge(START, "prep")
        .with_edge("prep", "slow")
        .with_edge("slow", "ask")
        .with_edge("ask", END)
    )


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, box


# --------------------------------------------------------------------------- item 9


def test_a_second_resumer_is_refused_before_any_node_runs(store: CheckpointStore) -> None:
    """Item 9 / issue 17.2: while one resume runs the run, a second gets RunBusyError naming
    the owner and runs nothing; it cannot flip the status, so the first one's interrupt
    (status and payload) stands."""
    app = graph().compile(store=store)
    app.invoke({}, run_id="r")
    assert app.get_run("r").status == "interrupted"
    first, box = _in_thread(lambda: app.resume("r"))
    assert ENTERED.wait(DEADLINE_S)
    holder = app.get_run("r")
    assert holder.status == "running"
    assert holder.owner is not None
    assert holder.owner.pid == os.getpid()
    with pytest.raises(RunBusyError, match=rf"run 'r' is being run by .*:{os.getpid()}") as info:
        app.resume("r")
    assert info.value.owner == holder.owner.describe()
    assert CALLS == ["prep", "slow"], "the loser ran no node"
    RELEASE.set()
    first.join(DEADLINE_S)
    assert "error" not in box, box
    record = app.get_run("r")
    assert record.status == "interrupted"
    assert record.interrupt["payload"] == {"question": "approve?"}
    assert record.owner is None, "parking released the lease"
    assert app.resume("r", response="yes").answer == "yes"
    assert CALLS == ["prep", "slow", "ask", "ask", "ask got yes"]
    assert app.get_run("r").status == "done"
    with pytest.raises(RunNotResumableError, match="finished"):
        app.resume("r")
    assert app.get_run("r").status == "done", "a late resumer cannot reopen a finished run"


def test_resume_wait_true_waits_for_the_owner(store: CheckpointStore) -> None:
    app = graph().compile(store=store)
    app.invoke({}, run_id="r")
    first, box = _in_thread(lambda: app.resume("r"))
    assert ENTERED.wait(DEADLINE_S)
    with pytest.raises(RunBusyError):
        app.resume("r", wait=0.05)  # a bounded wait gives up
    second, box2 = _in_thread(lambda: app.resume("r", response="later", wait=True))
    RELEASE.set()
    first.join(DEADLINE_S)
    second.join(DEADLINE_S)
    assert "error" not in box, box
    assert "error" not in box2, box2
    assert box2["result"].answer == "later"
    assert CALLS.count("slow") == 1
    assert app.get_run("r").status == "done"


def test_a_process_that_lost_its_lease_stops_without_writing(store: CheckpointStore) -> None:
    """A lease taken over (its owner looked dead) fences the old owner: its commit raises
    LeaseLostError and it writes nothing more, not even 'failed'."""
    app = graph().compile(store=store)
    app.invoke({}, run_id="r")
    first, box = _in_thread(lambda: app.resume("r"))
    assert ENTERED.wait(DEADLINE_S)
    stale = app.get_run("r").owner
    assert stale is not None
    usurper = new_owner()
    store.acquire("r", usurper, replace=stale.token)
    lease = Lease(store, "r", usurper)
    lease.hold()
    try:
        RELEASE.set()
        first.join(DEADLINE_S)
        assert isinstance(box.get("error"), LeaseLostError), box
        record = app.get_run("r")
        assert (record.status, record.last_step, record.error) == ("running", 1, None)
        assert record.owner == usurper
    finally:
        lease.drop()


# --------------------------------------------------------------------------- item 6


class CrashOnResume:
    """A store whose process 'dies' right after a resume journaled its answer: the status
    change to running raises once."""

    def __init__(self, inner: CheckpointStore) -> None:
        self.inner = inner
        self.armed = True

    def set_status(self, run_id: str, status: Any, **kwargs: Any) -> None:
        if self.armed and status == "running":
            self.armed = False
            raise SimulatedCrash("killed between journaling the answer and setting the status")
        self.inner.set_status(run_id, status, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class SimulatedCrash(Exception):
    """Stands in for a process dying."""


def approve(state: S, ctx: RunContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": "approve?"})
    CALLS.append(f"approve got {answer}")
    return {"answer": str(answer)}


def test_answering_again_replaces_an_unread_answer(store: CheckpointStore) -> None:
    """Item 6: the first answer was journaled, then the process died before the run went on;
    the operator answers again and the node gets the new answer, not the first."""
    crashing = CrashOnResume(store)
    app = (
        Graph("approve", state=S)
        .with_node("approve", approve)
        .with_edge(START, "approve")
        .with_edge("approve", END)
        .compile(store=crashing)
    )
    app.invoke({}, run_id="r")
    with pytest.raises(SimulatedCrash):
        app.resume("r", response="approve")
    (journaled,) = store.get_journal("r", 1)
    assert journaled.value == {"response": "approve"}, "the first answer reached the journal"
    record = store.get_run("r")
    assert record.status == "interrupted"
    assert record.owner is None, "the crashed resume let its lease go"
    final = app.resume("r", response="REJECT")
    assert final.answer == "REJECT"
    assert CALLS == ["approve got REJECT"]


# --------------------------------------------------------------------------- processes


def gated(state: S) -> dict[str, Any]:
    """Appends to the trial's ledger, then holds the run until the peer process has tried."""
    trial = Path(os.environ["SG_TRIAL_DIR"])
    with open(trial / "ledger", "a") as ledger:
        ledger.write(f"gated {os.getpid()}\n")
    peer = trial / f"outcome-{os.environ['SG_PEER']}"
    deadline = time.monotonic() + DEADLINE_S
    while not peer.exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    return {"log": [*state.log, "gated"]}


def process_graph() -> Graph[S]:
    return (
        Graph("processes", state=S)
        .with_node("prep", prep)
        .with_node("gated", gated, interrupt_before=True)
        .with_edge(START, "prep")
        .with_edge("prep", "gated")
        .with_edge("gated", END)
    )


def _resume_in_child(db: Path, trial: Path, me: str, peer: str, delay: float) -> int:
    """Fork a process that waits ``delay`` s, resumes run 'r' and writes its outcome."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        os.environ["SG_TRIAL_DIR"], os.environ["SG_PEER"] = str(trial), peer
        time.sleep(delay)
        with SqliteStore(db) as store:
            app = process_graph().compile(store=store)
            try:
                app.resume("r")
                outcome = "ok"
            except RunBusyError as exc:
                outcome = f"busy {exc.owner}"
            except RunNotResumableError:
                outcome = "finished"
        (trial / f"outcome-{me}.tmp").write_text(outcome)
        os.rename(trial / f"outcome-{me}.tmp", trial / f"outcome-{me}")
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _reap(pid: int) -> int:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError(f"process {pid} did not finish within {DEADLINE_S}s")


def test_two_processes_resuming_one_run_run_its_nodes_once(tmp_path: Path) -> None:
    """Issue 17 acceptance: 50 trials, two processes resume one run at random offsets; the
    node body runs once (the ledger proves it) and the loser gets RunBusyError naming the
    winner before running anything."""
    rng = random.Random(17)
    for trial_no in range(50):
        trial = tmp_path / f"trial-{trial_no}"
        trial.mkdir()
        db = trial / "sg.db"
        with SqliteStore(db) as store:
            process_graph().compile(store=store).invoke({}, run_id="r")
            assert store.get_run("r").status == "interrupted"
        pids = {
            me: _resume_in_child(db, trial, me, peer, rng.uniform(0.0, 0.05))
            for me, peer in (("a", "b"), ("b", "a"))
        }
        codes = {me: _reap(pid) for me, pid in pids.items()}
        assert codes == {"a": 0, "b": 0}, (trial_no, codes)
        ledger = (trial / "ledger").read_text().splitlines()
        assert len(ledger) == 1, (trial_no, ledger)
        winner_pid = int(ledger[0].split()[1])
        outcomes = {me: (trial / f"outcome-{me}").read_text() for me in pids}
        winner = next(me for me, pid in pids.items() if pid == winner_pid)
        loser = "b" if winner == "a" else "a"
        assert outcomes[winner] == "ok", (trial_no, outcomes)
        assert outcomes[loser].startswith("busy "), (trial_no, outcomes)
        assert f":{winner_pid}" in outcomes[loser], (trial_no, outcomes)
        with SqliteStore(db) as store:
            record = store.get_run("r")
            assert (record.status, record.owner) == ("done", None)
            assert [w.node for s in store.get_steps("r") for w in s.writes] == ["prep", "gated"]


def hang(state: S) -> dict[str, Any]:
    """Marks that it runs, then hangs until killed (or released by its marker)."""
    trial = Path(os.environ["SG_TRIAL_DIR"])
    if not (trial / "release").exists():
        (trial / "entered").write_text(str(os.getpid()))
        deadline = time.monotonic() + DEADLINE_S
        while not (trial / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
    return {"log": [*state.log, "hang"]}


def hang_graph() -> Graph[S]:
    return (
        Graph("hang", state=S)
        .with_node("prep", prep)
        .with_node("hang", hang)
        .with_edge(START, "prep")
        .with_edge("prep", "hang")
        .with_edge("hang", END)
    )


def test_a_sigkilled_run_shows_as_orphaned_and_resumes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 acceptance: a SIGKILLed run is 'orphaned' within one heartbeat interval
    (at once, on its own host) and resumes without waiting out its lease."""
    monkeypatch.setenv("SG_TRIAL_DIR", str(tmp_path))
    db = tmp_path / "sg.db"
    pid = os.fork()
    if pid == 0:
        try:
            with SqliteStore(db) as store:
                hang_graph().compile(store=store).invoke({}, run_id="r")
        finally:
            os._exit(0)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not (tmp_path / "entered").exists():
            assert time.monotonic() < deadline, "the child never reached its node"
            time.sleep(0.005)
        with SqliteStore(db) as store:
            app = hang_graph().compile(store=store)
            record = app.get_run("r")
            assert (record.status, record.owner and record.owner.pid) == ("running", pid)
            with pytest.raises(RunBusyError, match=f":{pid}"):
                app.resume("r")
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            while app.get_run("r").status != "orphaned":
                # Still a zombie or not yet torn down: one heartbeat interval at most.
                assert time.monotonic() - killed < DEFAULT_LEASE_S / 3, "never orphaned"
                time.sleep(0.005)
            assert [r.run_id for r in app.list_runs(status="orphaned")] == ["r"]
            (tmp_path / "release").write_text("")
            final = app.resume("r")
            assert final.log == ["prep", "hang"]
            assert app.get_run("r").status == "done"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_issue19_a_lease_dropped_without_a_word_is_forgotten_by_the_keeper() -> None:
    import gc

    from stargraph.checkpoint import MemoryStore
    from stargraph.checkpoint._lease import _KEEPER

    owners = [new_owner(), new_owner()]
    assert owners[0].token != owners[1].token
    assert (owners[0].pid, owners[0].host, owners[0].lease_s) == (os.getpid(), owners[1].host, 30)
    kept, dropped = (Lease(MemoryStore(), f"run-{i}", o) for i, o in enumerate(owners))
    kept.hold()
    dropped.hold()
    assert _KEEPER.holds(owners[0].token)
    assert _KEEPER.holds(owners[1].token)
    del dropped
    gc.collect()
    assert not _KEEPER.holds(owners[1].token)
    assert _KEEPER.holds(owners[0].token)
    kept.drop()
    assert not _KEEPER.holds(owners[0].token)
