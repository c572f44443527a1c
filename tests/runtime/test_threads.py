"""Threads (issue 18, item 7): a conversation is a thread of runs, one run per turn.

Each ``invoke(input, thread_id=...)`` is a new run - its own id, resumable, replayable -
whose step 0 is the last turn's final state with ``input`` applied through the reducers.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import CheckpointStore, MemoryStore, RunRecord, SqliteStore
from stargraph.errors import (
    CheckpointError,
    InvalidInputError,
    NodeError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from stargraph.graph import END, START, Graph
from tests.runtime import threadgraph
from tests.runtime.threadgraph import Chat

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: the children import tests.runtime.*

# Every test here holds for both stores that need no server (the shared `store` fixture).
pytestmark = pytest.mark.stores("memory", "sqlite")


def test_a_thread_of_three_turns_keeps_the_conversation(store: CheckpointStore) -> None:
    app = threadgraph.app(store)
    first = app.invoke({"messages": ["hi there"], "mood": "sunny"}, thread_id="chat-1")
    assert first.messages == ["hi there", "sunny reply to 'hi there' after 0"]
    second = app.invoke({"messages": ["how are you"], "mood": "grumpy"}, thread_id="chat-1")
    third = app.invoke({"messages": ["bye"]}, thread_id="chat-1")
    assert third.messages == [
        "hi there",
        "sunny reply to 'hi there' after 0",
        "how are you",
        "grumpy reply to 'how are you' after 2",
        "bye",
        "grumpy reply to 'bye' after 4",
    ]
    # A plain channel is overwritten by the input that names it and kept by one that does not;
    # a reducer channel reduces the input into what the thread had.
    assert (second.mood, third.mood) == ("grumpy", "grumpy")
    assert (first.heard, second.heard, third.heard) == (2, 5, 6)

    runs = app.get_thread("chat-1")
    assert [(r.thread_id, r.turn, r.status) for r in runs] == [
        ("chat-1", 1, "done"),
        ("chat-1", 2, "done"),
        ("chat-1", 3, "done"),
    ]
    assert len({r.run_id for r in runs}) == 3, "each turn is a run of its own"
    assert app.get_state(runs[-1].run_id) == third
    # Every turn's step 0 is the previous turn's final state plus the new message.
    step0 = app.history(runs[2].run_id)[0].snapshot
    assert step0 is not None
    assert step0["messages"] == [*second.messages, "bye"]
    # Runs stay immutable: turn 1 still ends where it ended.
    assert app.get_state(runs[0].run_id) == first
    assert [r.run_id for r in app.threads()] == [runs[-1].run_id]


def test_each_turn_replays_offline_to_its_own_result(store: CheckpointStore) -> None:
    app = threadgraph.app(store)
    for text in ("one", "two", "three"):
        app.invoke({"messages": [text]}, thread_id="t")
    for run in app.get_thread("t"):
        assert app.replay(run.run_id) == app.get_state(run.run_id)
        events = [e.kind for e in app.replay_stream(run.run_id)]
        assert events[0] == "run_started"
        assert events[-1] == "run_finished"


def test_a_failed_turn_blocks_the_next_until_resumed(
    store: CheckpointStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An injected failure in turn 2: turn 3 is refused naming the run to resume; once
    turn 2 is resumed, turn 3 starts from turn 2's result."""
    app = threadgraph.app(store)
    app.invoke({"messages": ["first"]}, thread_id="t")

    def broken(state: Chat) -> dict[str, Any]:
        raise ConnectionError("model unreachable")

    monkeypatch.setitem(app.specs, "reply", _with_fn(app.specs["reply"], broken))
    with pytest.raises(NodeError, match="model unreachable"):
        app.invoke({"messages": ["second"]}, thread_id="t")
    monkeypatch.undo()
    turn2 = app.get_thread("t")[1]
    assert (turn2.turn, turn2.status, turn2.last_step) == (2, "failed", 1)

    with pytest.raises(ThreadBusyError) as info:
        app.invoke({"messages": ["third"]}, thread_id="t")
    message = str(info.value)
    assert f"run {turn2.run_id!r}" in message
    assert "failed" in message
    assert f"resume({turn2.run_id!r}) first" in message
    assert info.value.run_id == turn2.run_id
    assert len(app.get_thread("t")) == 2, "the refused turn left nothing behind"

    resumed = app.resume(turn2.run_id)
    assert resumed.messages[-1] == "calm reply to 'second' after 2"
    third = app.invoke({"messages": ["third"]}, thread_id="t")
    assert third.messages[-2:] == ["third", "calm reply to 'third' after 4"]
    assert third.messages[:4] == resumed.messages


def test_an_interrupted_turn_is_resumed_before_the_next(store: CheckpointStore) -> None:
    app_c = _interrupting_graph().compile(store=store)
    app_c.invoke({"messages": ["first"]}, thread_id="t")
    run = app_c.get_thread("t")[0]
    assert run.status == "interrupted"
    with pytest.raises(ThreadBusyError, match=r"interrupted.*resume\('"):
        app_c.invoke({"messages": ["second"]}, thread_id="t")
    assert app_c.resume(run.run_id).messages[-1] == "calm reply to 'first' after 0"
    app_c.invoke({"messages": ["second"]}, thread_id="t")
    assert [r.turn for r in app_c.get_thread("t")] == [1, 2]


def test_a_turn_killed_mid_step_resumes_and_the_next_turn_sees_its_result(
    tmp_path: Path,
) -> None:
    """SIGKILL a process in the middle of turn 2 (after its step 1 committed): the turn
    shows as orphaned, turn 3 is refused until it is resumed, and then turn 3 sees it."""
    db = tmp_path / "chat.db"
    assert _turn(db, "t", "first", hang=None)["messages"][-1] == "calm reply to 'first' after 0"
    hang = tmp_path / "hanging"
    proc = subprocess.Popen(
        _turn_args(db, "t", "second"),
        env=_env(SG_HANG_FILE=str(hang)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not hang.exists():
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, "turn 2 never reached its reply node"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    with SqliteStore(db) as store:
        app = threadgraph.app(store)
        turn2 = app.get_thread("t")[1]
        assert (turn2.status, turn2.last_step) == ("orphaned", 1)
        with pytest.raises(ThreadBusyError, match=r"orphaned.*process running it is gone"):
            app.invoke({"messages": ["third"]}, thread_id="t")
        assert app.resume(turn2.run_id).messages[-1] == "calm reply to 'second' after 2"
    third = _turn(db, "t", "third", hang=None)
    assert third["messages"] == [
        "first",
        "calm reply to 'first' after 0",
        "second",
        "calm reply to 'second' after 2",
        "third",
        "calm reply to 'third' after 4",
    ]
    with sqlite3.connect(db) as conn:
        turns = conn.execute("SELECT turn, status FROM runs ORDER BY turn").fetchall()
    assert turns == [(1, "done"), (2, "done"), (3, "done")]


def test_two_callers_starting_the_same_turn_one_wins(tmp_path: Path) -> None:
    """Both read the thread before either creates its run (a barrier in get_thread): the
    store fences them, and the loser runs no node."""
    barrier = threading.Barrier(2, timeout=30)

    class Racing(SqliteStore):
        racing = False

        def get_thread(self, thread_id: str) -> list[RunRecord]:
            runs = super().get_thread(thread_id)
            if self.racing:
                barrier.wait()
            return runs

    with Racing(tmp_path / "race.db") as store:
        app = threadgraph.app(store)
        app.invoke({"messages": ["first"]}, thread_id="t")
        store.racing = True
        outcomes: list[str] = []

        def turn(text: str) -> None:
            try:
                app.invoke({"messages": [text]}, thread_id="t")
                outcomes.append("won")
            except ThreadBusyError as exc:
                outcomes.append("refused" if "already has a turn 2" in str(exc) else str(exc))

        callers = [threading.Thread(target=turn, args=(t,)) for t in ("a", "b")]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(timeout=60)
        assert sorted(outcomes) == ["refused", "won"]
        store.racing = False
        assert [r.turn for r in app.get_thread("t")] == [1, 2]
        assert len(store.list_runs()) == 2, "the refused turn stored nothing"


def test_stream_and_async_calls_take_a_thread(store: CheckpointStore) -> None:
    app = threadgraph.app(store)
    kinds = [e.kind for e in app.stream({"messages": ["a"]}, thread_id="t")]
    assert kinds[-1] == "run_finished"

    async def more() -> Chat:
        async for _ in app.astream({"messages": ["b"]}, thread_id="t"):
            pass
        return await app.ainvoke({"messages": ["c"]}, thread_id="t")

    final = asyncio.run(more())
    assert final.messages[::2] == ["a", "b", "c"]
    assert [r.turn for r in app.get_thread("t")] == [1, 2, 3]


def test_threads_are_apart_and_a_model_input_applies_only_what_it_sets(
    store: CheckpointStore,
) -> None:
    app = threadgraph.app(store)
    app.invoke({"messages": ["x"], "mood": "odd"}, thread_id="one")
    app.invoke({"messages": ["y"]}, thread_id="two")
    # A model as input: only the fields it was given count, not its defaults.
    later = app.invoke(Chat(messages=["z"]), thread_id="one")
    assert later.mood == "odd"
    assert later.messages[::2] == ["x", "z"]
    assert sorted(r.thread_id or "" for r in app.threads()) == ["one", "two"]
    assert app.get_state(app.get_thread("two")[0].run_id).messages[0] == "y"


def test_a_fork_of_a_turn_is_not_a_turn(store: CheckpointStore) -> None:
    app = threadgraph.app(store)
    app.invoke({"messages": ["x"]}, thread_id="t")
    run = app.get_thread("t")[0]
    fork = app.fork(run.run_id, 1, update={"mood": "new"})
    assert (app.get_run(fork).thread_id, app.get_run(fork).turn) == (None, None)
    app.resume(fork)
    assert [r.run_id for r in app.get_thread("t")] == [run.run_id]


def test_thread_errors_name_the_fix(tmp_path: Path) -> None:
    bare = threadgraph.graph().compile()
    with pytest.raises(CheckpointError, match=r"needs a checkpoint store.*store=SqliteStore"):
        bare.invoke({"messages": ["x"]}, thread_id="t")
    with pytest.raises(CheckpointError, match="needs a checkpoint store"):
        bare.get_thread("t")
    app = threadgraph.app(MemoryStore())
    with pytest.raises(ThreadNotFoundError, match=r"no thread 'nope'.*thread_id='nope'"):
        app.get_thread("nope")
    with pytest.raises(InvalidInputError, match="thread_id=''"):
        app.invoke({"messages": ["x"]}, thread_id="")
    with pytest.raises(InvalidInputError, match="cannot be stored"):
        app.invoke({"messages": ["x"]}, thread_id="bad\udc80")
    app.invoke({"messages": ["x"]}, thread_id="t")
    with pytest.raises(InvalidInputError, match=r"turn of thread 't'.*heard"):
        app.invoke({"heard": "many"}, thread_id="t")
    with pytest.raises(InvalidInputError, match="'typo'"):
        app.invoke({"typo": 1}, thread_id="t")
    assert len(app.get_thread("t")) == 1


def test_a_schema_2_sqlite_file_is_migrated_and_takes_threads(tmp_path: Path) -> None:
    """A file written before threads (schema 2) opens: its runs read as runs outside any
    thread, and threads start on it."""
    from stargraph.checkpoint._sqlite import _MIGRATIONS, SCHEMA_VERSION

    path = tmp_path / "v2.db"
    with SqliteStore(tmp_path / "scratch.db") as scratch:
        app = threadgraph.app(scratch)
        app.invoke({"messages": ["old"]}, run_id="old-run")
        steps = scratch.get_steps("old-run")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        for sql in (*_MIGRATIONS[0], *_MIGRATIONS[1]):
            conn.execute(sql)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        conn.execute(
            "INSERT INTO runs VALUES ('old-run', 'chat', ?, ?, 'done', ?, NULL, NULL, "
            "'2024-01-01T00:00:00+00:00', '2024-01-01T00:00:00+00:00', NULL, NULL, NULL, NULL)",
            (app.graph_hash, app.code_hash, steps[-1].step),
        )
        for step in steps:
            payload = step.model_dump_json(exclude_defaults=True).encode()
            conn.execute(
                "INSERT INTO steps VALUES ('old-run', ?, ?, ?, NULL)",
                (step.step, step.snapshot is not None, payload),
            )
    with SqliteStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION == 6
        assert store.get_graph(app.graph_hash) is None  # an old run kept no graph
        app = threadgraph.app(store)
        old = store.get_run("old-run")
        assert (old.status, old.thread_id, old.turn) == ("done", None, None)
        assert app.get_state("old-run").messages == ["old", "calm reply to 'old' after 0"]
        app.invoke({"messages": ["new"]}, thread_id="t")
        assert [r.turn for r in app.get_thread("t")] == [1]
    with sqlite3.connect(path) as conn:
        index = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'runs_by_thread'"
        ).fetchone()
    assert index is not None
    assert "UNIQUE" in index[0]


def test_stargraph_runs_and_show_name_the_thread(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from stargraph.cli._app import cli

    db = tmp_path / "cli.db"
    with SqliteStore(db) as store:
        app = threadgraph.app(store)
        app.invoke({"messages": ["x"]}, run_id="alone")
        for rid in ("t-1", "t-2"):
            app.invoke({"messages": [rid]}, thread_id="chat", run_id=rid)
    listed = CliRunner().invoke(cli, ["runs", "--db", str(db)], catch_exceptions=False)
    assert listed.exit_code == 0
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:5] == ["RUN", "ID", "GRAPH", "STATUS", "THREAD"]
    threads = {line.split()[0]: line.split()[4:6] for line in lines[1:]}
    assert threads == {"t-2": ["chat", "#2"], "t-1": ["chat", "#1"], "alone": ["-", "2"]}
    shown = CliRunner().invoke(cli, ["show", "t-2", "--db", str(db)], catch_exceptions=False)
    assert "thread     chat, turn 2" in shown.stdout


# --------------------------------------------------------------------------- helpers


def _with_fn(spec: Any, fn: Any) -> Any:
    import dataclasses

    return dataclasses.replace(spec, fn=fn)


def _interrupting_graph() -> Graph[Chat]:
    """The chat graph, parking before ``reply``."""
    return (
        Graph("chat", state=Chat)
        .with_node("hear", threadgraph.hear)
        .with_node("reply", threadgraph.reply, interrupt_before=True)
        .with_edge(START, "hear")
        .with_edge("hear", "reply")
        .with_edge("reply", END)
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SG_HANG_FILE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _turn_args(db: Path, thread: str, text: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from tests.runtime import threadgraph; threadgraph.main()",
        str(db),
        thread,
        text,
    ]


def _turn(db: Path, thread: str, text: str, *, hang: str | None) -> dict[str, Any]:
    done = subprocess.run(
        _turn_args(db, thread, text),
        check=False,
        env=_env(**({"SG_HANG_FILE": hang} if hang else {})),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
