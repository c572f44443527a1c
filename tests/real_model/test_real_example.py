"""``examples/react_agent.py`` against a real local model: it calls its tools, a rule ends
it, and with the server stopped its run replays offline through the Python API and through
``stargraph replay``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from stargraph.checkpoint import SqliteStore
from tests.real_model import llamaserver

pytestmark = pytest.mark.real_model  # a llama.cpp model server (scripts/ensure_llama_server.sh)

EXAMPLES = llamaserver.ROOT / "examples"
EXAMPLE = EXAMPLES / "react_agent.py"
RUN_TIMEOUT_S = 1800  # a hung run, not a slow one


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("react_agent_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_on_a_local_model_replays_with_the_server_stopped(
    start_llama: Callable[[], llamaserver.LlamaServer], tmp_path: Path
) -> None:
    server = start_llama()
    db = tmp_path / "runs.db"
    env = {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "STARGRAPH_MODEL": llamaserver.ALIAS,
        "STARGRAPH_DB": str(db),
        # A deadline for a hung server only: a loaded 2-core machine once took over 60 s.
        "STARGRAPH_TIMEOUT": "900",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    env.pop("OPENAI_API_KEY", None)
    env.pop("STARGRAPH_PROFILE", None)  # the example asks the server what it is
    live = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert live.returncode == 0, live.stdout + live.stderr
    lines = live.stdout.splitlines()
    tool_lines = [line for line in lines if line.startswith("tool  ")]
    assert tool_lines, live.stdout  # it called its tools
    (stopped,) = [line for line in lines if line.startswith("stopped by:")]
    assert stopped.split()[-1] in {
        "exit/final_answer",
        "termination/error_budget",
        "termination/max_steps",
    }

    server.stop()
    assert not server.running

    example = load_example()
    with SqliteStore(db) as store:
        record = store.get_run(example.RUN_ID)
        rule = stopped.split()[-1]
        # A final answer finishes the run; a budget halts it.
        assert (record.status, record.stopped_by) == (
            "done" if rule == "exit/final_answer" else "halted",
            rule,
        )
        app = example.build_graph().compile(store=store)  # no model, no arbiter
        replayed = app.replay(example.RUN_ID)
        assert replayed == app.get_state(example.RUN_ID)
        assert len(replayed.tool_calls) == len(tool_lines)

    cli = Path(sys.executable).with_name("stargraph")
    offline = subprocess.run(
        [
            str(cli),
            "replay",
            example.RUN_ID,
            "--db",
            str(db),
            "--graph",
            "react_agent:build_graph",
            "--quiet",
        ],
        cwd=EXAMPLES,
        env={k: v for k, v in env.items() if k != "OPENAI_BASE_URL"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert f"replay of run {example.RUN_ID} matches its record" in offline.stderr
