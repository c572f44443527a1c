"""Row A23: the session state machine above the lanes and skill machines - start,
heartbeat, stop, and crash recovery that resumes a dead session's skills from their
checkpoints - through the public ``stargraph.skills.machine`` API."""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import stargraph
from stargraph.checkpoint import SqliteStore
from stargraph.errors import LLMError, SessionError
from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import (
    SESSION_MACHINE,
    LaneMachine,
    MachineRuntime,
    Session,
    SessionStore,
)
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    MEMORY_FN,
    QUERIES,
    _reset,
    arbiter,
    call,
    chat,
    finish,
    registry,
    server,
    small_spec,
)

SCRIPT = [call(MEMORY_FN, {"query": "the answer"}), call("complete"), finish(answer="42")]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def runtime(chat: OpenAIChatModel, arbiter: Arbiter, runs: SqliteStore | None) -> MachineRuntime:
    return MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec()], session="s1",
                          store=runs)  # fmt: skip


def test_A23_session_starts_heartbeats_and_stops_durably(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    # The session machine is data the machine validator accepts, as a lane machine's is.
    assert LaneMachine("session", SESSION_MACHINE).allowed() == ("start",)
    clock = Clock()
    with SessionStore(tmp_path / "sessions.db", clock=clock) as store:
        session = Session(runtime(chat, arbiter, None), store)
        assert session.state == "NEW"
        with pytest.raises(SessionError, match=r"'s1' is NEW: it has no 'heartbeat' move"):
            session.heartbeat()
        with pytest.raises(SessionError, match="not RUNNING"):
            session.run("small", {"topic": "x"})
        assert session.start().state == "RUNNING"
        clock.now += 5
        assert session.heartbeat().heartbeat_ms == 1_005_000
        server.set_script(SCRIPT)
        assert session.run("small", {"topic": "x"}).result().status == "done"
        assert session.stop().state == "STOPPED"
        with pytest.raises(SessionError, match="is STOPPED"):
            session.heartbeat()
    with SessionStore(tmp_path / "sessions.db", clock=clock) as store:
        assert store.get("s1").state == "STOPPED"
        assert [(e.event, e.from_state, e.to_state) for e in store.events("s1")] == [
            ("start", "NEW", "RUNNING"),
            ("stop", "RUNNING", "STOPPED"),
        ]
        assert [r["run_id"] for r in store.runs("s1")] == ["s1/core/1"]


def test_A23_a_session_whose_heartbeat_stopped_resumes_its_skills_from_their_checkpoints(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    clock = Clock()
    # The first process: its second model call fails and the process is gone after it.
    server.set_script([SCRIPT[0], Reply.error(500, "upstream down")])
    with (
        SqliteStore(tmp_path / "runs.db") as runs,
        SessionStore(tmp_path / "sessions.db", clock=clock) as store,
    ):
        session = Session(runtime(chat, arbiter, runs), store)
        session.start()
        with pytest.raises(LLMError):
            session.run("small", {"topic": "x"}).result()
        assert session.state == "RUNNING"
    assert QUERIES == ["the answer"]
    # A supervisor in another process: a recent heartbeat is a live session, left alone.
    server.set_script(SCRIPT[1:])
    with (
        SqliteStore(tmp_path / "runs.db") as runs,
        SessionStore(tmp_path / "sessions.db", clock=clock) as store,
    ):
        clock.now += 10
        assert store.stale(after=30) == []
        again = Session(runtime(chat, arbiter, runs), store)
        assert again.recover(stale_after=30) == []
        clock.now += 60  # no heartbeat for 70 s: presumed dead
        assert [s.id for s in store.stale(after=30)] == ["s1"]
        (resumed,) = again.recover(stale_after=30)
        result = resumed.result()
        assert (result.status, result.output, result.run_id) == (
            "done",
            {"answer": "42"},
            "s1/core/1",
        )
        assert again.state == "RUNNING"
        assert store.stale(after=30) == []
        events = store.events("s1")
        assert [(e.event, e.to_state) for e in events] == [
            ("start", "RUNNING"),
            ("crash", "CRASHED"),
            ("recover", "RUNNING"),
        ]
        assert events[1].detail == {"heartbeat_age_ms": 70_000}
        assert events[2].detail == {"resumed": ["s1/core/1"], "restarted": []}
        assert runs.get_run("s1/core/1").status == "done"
        # Recovered and done: a second recovery finds nothing to resume.
        clock.now += 60
        assert again.recover(stale_after=30) == []
    # The checkpointed first step (its model call and tool call) was not made again.
    assert QUERIES == ["the answer"]
    assert len(server.chat_requests) == 2 + 2


def test_A23_recovery_restarts_a_run_cut_off_before_its_first_checkpoint(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    clock = Clock()
    server.set_script(SCRIPT)
    with (
        SqliteStore(tmp_path / "runs.db") as runs,
        SessionStore(tmp_path / "sessions.db", clock=clock) as store,
    ):
        store.fire("s1", "start")
        # Recorded by the session, then the process died before the run's first commit.
        run_id = store.add_run("s1", "core", "small", {"topic": "x"}, "")
        store.fire("s1", "crash")
        session = Session(runtime(chat, arbiter, runs), store)
        (restarted,) = session.recover(stale_after=30)
        assert (restarted.run_id, restarted.result().status) == (run_id, "done")
        assert store.events("s1")[-1].detail == {"resumed": [], "restarted": [run_id]}
        with pytest.raises(SessionError, match="no session 'nobody'"):
            store.get("nobody")


ROOT = Path(__file__).resolve().parents[3]
CHILD = "from tests.skills.machine.test_machine_session import child; child()"


def child() -> None:
    """A process running session ``s1`` on the SQLite files ``argv[1:3]`` against the
    scripted server at ``argv[3]``; it dies (``tests.crashgraph``, ``SG_CRASH_AT``) where
    told, its heartbeat stopping with it."""
    from tests.crashgraph import CrashingStore

    runs_db, sessions_db, base_url, workspace = sys.argv[1:5]
    model = OpenAIChatModel(
        "gpt-test", base_url=base_url, api_key="sk-test", timeout=5.0, max_retries=0
    )
    with Arbiter(registry(), workspace=Path(workspace)) as arbiter:
        session = Session(
            runtime(model, arbiter, CrashingStore(runs_db)), SessionStore(sessions_db)
        )
        session.start()
        session.run("small", {"topic": "x"}).result()


def test_A23_a_killed_sessions_skill_resumes_in_another_process(
    tmp_path: Path, server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script(SCRIPT)
    workspace = tmp_path / "child-ws"
    workspace.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SG_CRASH_AT"}
    src = Path(stargraph.__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT), env.get("PYTHONPATH", "")])
    env["SG_CRASH_AT"] = "after_commit:1"
    runs_db, sessions_db = tmp_path / "runs.db", tmp_path / "sessions.db"
    crashed = subprocess.run(
        [sys.executable, "-c", CHILD, str(runs_db), str(sessions_db), server.base_url,
         str(workspace)],
        check=False, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert crashed.returncode == 137, crashed.stderr
    assert len(server.chat_requests) == 1  # it died after its first committed step
    later = time.time() + 120  # the supervisor looks two minutes on: no heartbeat since
    with SqliteStore(runs_db) as runs, SessionStore(sessions_db, clock=lambda: later) as store:
        assert [s.id for s in store.stale(after=30)] == ["s1"]
        assert runs.get_run("s1/core/1").status == "orphaned"
        (resumed,) = Session(runtime(chat, arbiter, runs), store).recover(stale_after=30)
        result = resumed.result()
        assert (result.status, result.output) == ("done", {"answer": "42"})
        assert [e.event for e in store.events("s1")] == ["start", "crash", "recover"]
    # The killed process's step (its model call and tool call) was not made again.
    assert len(server.chat_requests) == 1 + 2
    assert QUERIES == []
