"""A run with MCP tools killed mid-call resumes without repeating the finished call, and
replays offline with no server at all (issue 49)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.tools import Arbiter, ToolRegistry
from tests import mcp_servers
from tests.tools import mcp_durable_graph as durable

pytestmark = pytest.mark.mcp

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 120.0  # only catches a hang


def _calls(log: Path) -> list[str]:
    if not log.exists():
        return []
    sent = [orjson.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [m["params"]["name"] for m in sent if m.get("method") == "tools/call"]


def test_issue49_sigkill_mid_call_then_resume_then_offline_replay(tmp_path: Path) -> None:
    everything = mcp_servers.everything()[0]
    db, first = tmp_path / "runs.db", tmp_path / "first.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    child = subprocess.Popen(
        [sys.executable, str(Path(durable.__file__)), str(db), str(first), everything],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + HANG_S
        # Killed once the long operation's request has reached the server: mid-call.
        while "trigger-long-running-operation" not in _calls(first):
            assert child.poll() is None, child.stderr.read() if child.stderr else b""
            assert time.monotonic() < deadline, "the child never called the long operation"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=HANG_S) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stderr is not None:
            child.stderr.close()
    assert _calls(first) == ["get-sum", "trigger-long-running-operation"]

    second = tmp_path / "second.jsonl"
    live = durable.server(durable.teed(second, everything))
    pin = live.listing()
    with (
        SqliteStore(str(db)) as store,
        Arbiter(ToolRegistry.build(mcp=[live]), workspace=tmp_path) as arbiter,
    ):
        app = durable.graph().compile(store=store, services={"arbiter": arbiter})
        final = app.resume("r1")
    assert final.total == "The sum of 2 and 3 is 5."
    assert final.long.startswith("Long running operation completed")
    # The finished call was served from the journal; only the interrupted one ran again.
    assert _calls(second) == ["trigger-long-running-operation"]

    # Offline: the server's command does not even exist; its tools come from the pin.
    ghost = durable.server([str(tmp_path / "no-such-server")], listing=pin)
    with (
        SqliteStore(str(db)) as store,
        Arbiter(ToolRegistry.build(mcp=[ghost]), workspace=tmp_path) as arbiter,
    ):
        app = durable.graph().compile(store=store, services={"arbiter": arbiter})
        assert app.replay("r1") == final
    assert not ghost.started
    assert ghost.starts == 0
