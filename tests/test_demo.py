"""``make demo`` as a new user meets it: ``python examples/demo.py`` from an empty directory.

The demo must run offline on the base install, explain each phase in one line, really kill
its worker mid-run, resume, replay with an empty diff, and leave its files beside the db.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


@pytest.mark.slow
def test_demo_runs_offline_and_explains_every_phase(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    result = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    phases = re.findall(r"^(\d)/7 (\w+)", out, flags=re.MULTILINE)
    assert phases == [
        ("1", "model"),
        ("2", "graph"),
        ("3", "run"),
        ("4", "crash"),
        ("5", "resume"),
        ("6", "replay"),
        ("7", "pictures"),
    ]
    assert "scripted OpenAI-compatible server at http://127.0.0.1:" in out
    assert re.search(r"graph sha256:[0-9a-f]{64}", out)
    crash = re.search(r"^4/7 crash .*killed worker (\d+) with SIGKILL.*$", out, re.MULTILINE)
    assert crash is not None
    # Really killed mid-run: the run's owner is gone, so the store reports it orphaned.
    assert "desk-1 orphaned" in crash.group(0)
    assert "resumed" in out
    assert "rule exit/final_answer decided finish" in out
    assert "rule desk/big_order decided goto -> approve" in out
    assert "answer:   The order costs 16.00 EUR." in out
    assert "diff against the recorded run is empty (0 differing steps" in out
    folder = tmp_path / ".stargraph" / "demo"
    for name in ("demo.db", "desk-1.html", "order-desk.mmd", "order-desk.dot"):
        assert (folder / name).is_file(), name
        assert str(Path(".stargraph") / "demo" / name) in out or name == "demo.db"
    assert "<html" in (folder / "desk-1.html").read_text().lower()
    assert (folder / "order-desk.mmd").read_text().startswith("flowchart")
    assert "Traceback" not in result.stderr


def test_demo_uses_openai_base_url_instead_of_the_scripted_server(tmp_path: Path) -> None:
    # A dead endpoint: the demo must try it (and fail cleanly) rather than start its server.
    env = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "x"}
    result = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert "the endpoint http://127.0.0.1:9/v1 (OPENAI_BASE_URL)" in result.stdout
    assert "scripted OpenAI-compatible server" not in result.stdout
    assert result.returncode != 0
