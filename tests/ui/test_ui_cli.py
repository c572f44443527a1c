"""``stargraph ui`` as a user starts it: refusals, and a real server over a CLI-made run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from click.testing import CliRunner

from stargraph.cli._app import cli

FLOW = """
from pydantic import BaseModel
from stargraph.graph import END, START, Graph


class S(BaseModel):
    text: str = ""


def shout(state: S) -> dict:
    return {"text": state.text.upper()}


def mark(state: S) -> dict:
    return {"text": state.text + "!"}


graph = (
    Graph("flow", state=S)
    .with_node("shout", shout)
    .with_node("mark", mark)
    .with_edge(START, "shout")
    .with_edge("shout", "mark")
    .with_edge("mark", END)
)
"""


def test_non_loopback_host_needs_a_token(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["ui", "--db", str(tmp_path / "x.db"), "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "--token" in result.output


def test_served_console_shows_a_run_made_by_stargraph_run(tmp_path: Path) -> None:
    (tmp_path / "flow.py").write_text(FLOW, encoding="utf-8")
    exe = str(Path(sys.executable).with_name("stargraph"))
    env = {**os.environ, "STARGRAPH_UI_LOG": "info", "PYTHONUNBUFFERED": "1"}
    made = subprocess.run(
        [exe, "run", "flow.py", "--db", "runs.db", "--run-id", "r1", "--input", '{"text": "hi"}'],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    server = subprocess.Popen(
        [exe, "ui", "--db", "runs.db", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        url = None
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while url is None:  # uvicorn says where it listens once it does
            assert time.monotonic() < deadline, "".join(lines)
            line = server.stderr.readline()
            assert line or server.poll() is None, "".join(lines)
            lines.append(line)
            match = re.search(r"running on (http://127\.0\.0\.1:\d+)", line, re.I)
            if match:
                url = match.group(1)
        with httpx.Client(base_url=url, timeout=60) as client:
            listing = client.get("/")
            assert listing.status_code == 200
            assert 'href="/runs/r1"' in listing.text
            page = client.get("/runs/r1").text
            state = client.get("/runs/r1/state?step=2").text
        # The graph was found through the archive `stargraph run` wrote beside runs.db.
        assert '<g class="node node ran" data-node="shout">' in page
        assert '<g class="node node ran" data-node="mark">' in page
        assert '"text": "HI!"' in state
    finally:
        server.terminate()
        server.wait(60)
        if server.stderr is not None:
            server.stderr.close()
