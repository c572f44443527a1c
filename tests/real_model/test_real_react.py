"""The ReAct loop against a real model: rules end it, every step replays, the audit is
complete, and a run killed mid-way resumes without repeating what it had done.

What the model does is its own business (a 135M model calls tools with odd arguments, or
answers nothing); what is asserted is what the engine guarantees for any model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.llm import OpenAIChatModel
from stargraph.replay import export_cassette, load_cassette
from stargraph.skills.react import ReactState
from stargraph.testing import assert_replays_every_step
from stargraph.tools import SqliteCommitLog
from tests.real_model import llamaserver, realagent

pytestmark = pytest.mark.real_model  # a llama.cpp model server (scripts/ensure_llama_server.sh)

HERE = Path(__file__).parent
TERMINATION = {"exit/final_answer", "termination/error_budget", "termination/max_steps"}


def ended_as(rule: str | None) -> str:
    """The status a run ended by ``rule`` has: a final answer finishes it, a budget halts it."""
    return "done" if rule == "exit/final_answer" else "halted"


STATUSES = {"success", "error", "timeout", "denied", "invalid"}
STALL_DEADLINE_S = 180.0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    db = SqliteStore(tmp_path / "runs.db")
    yield db
    db.close()


def check_audit(final: ReactState, log: SqliteCommitLog) -> None:
    """Every tool call the model made went through the arbiter exactly once and is in the
    hash-chained commit log, under its canonical id (or the unknown name), with its status."""
    records = log.records()
    assert log.verify_chain() is None
    assert [(r.call_id, r.tool, r.status) for r in records] == [
        (c.call_id, c.tool, c.status) for c in final.tool_calls
    ]
    for call in final.tool_calls:
        assert call.status in STATUSES
        assert call.tool in realagent.TOOLS or call.status == "invalid"


def test_react_with_tools_is_ended_by_a_rule_and_every_step_replays(
    chat: OpenAIChatModel, store: SqliteStore, workspace: Path, tmp_path: Path
) -> None:
    log = SqliteCommitLog(tmp_path / "commit.db")
    with realagent.arbiter(workspace, commit_log=log) as arbiter:
        app = realagent.build_graph(max_steps=3).compile(
            store=store, services={"model": chat, "arbiter": arbiter}
        )
        final = assert_replays_every_step(app, {"task": realagent.TASK}, run_id="live")
    record = store.get_run("live")
    assert record.stopped_by in TERMINATION
    assert record.status == ended_as(record.stopped_by)
    assert 1 <= final.llm_steps <= 3
    check_audit(final, log)
    # The record replays offline from a cassette with no services at all, to the same state.
    cassette = load_cassette(export_cassette(store, "live", tmp_path / "live.json"))
    assert realagent.build_graph(max_steps=3).compile().replay(cassette) == final


def test_a_run_killed_mid_way_resumes_without_repeating_itself(
    llama: llamaserver.LlamaServer, store: SqliteStore, workspace: Path, tmp_path: Path
) -> None:
    """The child process runs the agent (every reply must write a note) and stalls in its
    second model call; it is SIGKILLed there and the run is resumed here."""
    marker = tmp_path / "stalled"
    config = {
        "model": llamaserver.ALIAS,
        "base_url": llama.base_url,
        "api_key": llamaserver.API_KEY,
        "db": str(tmp_path / "runs.db"),
        "commit_log": str(tmp_path / "commit.db"),
        "workspace": str(workspace),
        "marker": str(marker),
        "run_id": "crash",
    }
    log_path = tmp_path / "child.log"
    with log_path.open("wb") as child_log:
        child = subprocess.Popen(
            [sys.executable, str(HERE / "crashchild.py"), json.dumps(config)],
            stdout=child_log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            _wait_for(marker, child, log_path)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    before = store.get_run("crash")
    assert before.status not in ("done", "failed")  # killed mid-run: it never finished
    done_before = before.last_step
    log = SqliteCommitLog(config["commit_log"])
    # The first reply's forced note call went through the arbiter once before the kill.
    assert len(log.records()) == 1

    with (
        realagent.arbiter(workspace, commit_log=log) as arbiter,
        chat_model(llama) as model,
    ):
        app = realagent.crash_graph().compile(
            store=store, services={"model": model, "arbiter": arbiter}
        )
        final = app.resume("crash")
    record = store.get_run("crash")
    assert record.stopped_by in TERMINATION
    assert record.status == ended_as(record.stopped_by)
    assert record.last_step > done_before
    # Nothing before the kill ran twice: one model call per LLM step in the record, and one
    # commit-log record per tool call (a repeated note would be a record too many).
    llm_steps = [
        entry.step
        for step in store.get_steps("crash")
        for entry in step.calls
        if entry.kind == "llm"
    ]
    assert len(llm_steps) == len(set(llm_steps)) == final.llm_steps
    check_audit(final, log)
    assert all(c.name == "note" and c.tool == realagent.NOTE for c in final.tool_calls)
    # The whole run, before and after the kill, replays offline to the same state.
    assert realagent.crash_graph().compile(store=store).replay("crash") == final


def chat_model(llama: llamaserver.LlamaServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        llamaserver.ALIAS,
        base_url=llama.base_url,
        api_key=llamaserver.API_KEY,
        profile="llama.cpp",
        timeout=600.0,  # catches a hung server; replies are bounded by max_tokens
    )


def _wait_for(marker: Path, child: subprocess.Popen[bytes], log_path: Path) -> None:
    """Until the child says it stalled; fail at once if it exits, or at the deadline."""
    deadline = time.monotonic() + STALL_DEADLINE_S
    while not marker.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the child never stalled; its output:\n{log_path.read_text()[-3000:]}")
        try:
            child.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(
            f"the child exited ({child.returncode}) before stalling; its output:\n"
            f"{log_path.read_text()[-3000:]}"
        )
