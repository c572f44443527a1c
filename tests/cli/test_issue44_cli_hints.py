"""Hints name the CLI form on the command line: the library's errors say how to fix things in
Python (``resume(..., wait=True)``, ``response=``, ``max_steps``, ``services=``); when a command
shows one, it names the option that does the same (``--wait``, ``--response``, ...). Python
callers keep the Python wording.

Graphs used as ``module:attr`` live in this module (``tests.cli.test_issue44_cli_hints:...``).
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.errors import RunBusyError, RunNotResumableError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext

HERE = "tests.cli.test_issue44_cli_hints"
DEADLINE_S = 60.0  # only to catch a hang

# The Python spellings no command-line message may carry.
PYTHON_FORMS = re.compile(r"wait=True|response=|update=|max_steps|as_node|resume\(|fork\(|Worker\(")


class Job(BaseModel):
    value: int = 0
    answer: str = ""


ENTERED = threading.Event()
RELEASE = threading.Event()


def hold(state: Job) -> dict[str, Any]:
    ENTERED.set()
    assert RELEASE.wait(DEADLINE_S)
    return {"value": state.value + 1}


def ask(state: Job, ctx: RunContext) -> dict[str, Any]:
    return {"answer": str(ctx.interrupt({"question": "go?"}))}


def bump(state: Job) -> dict[str, Any]:
    return {"value": state.value + 1}


def needs_model(state: Job, ctx: RunContext) -> dict[str, Any]:
    return {"answer": str(ctx.services["model"])}


def held() -> Graph[Job]:
    """hold (blocks until RELEASE) -> ask (waits for an answer) -> END."""
    return (
        Graph("held", state=Job)
        .with_node("hold", hold)
        .with_node("ask", ask)
        .with_edge(START, "hold")
        .with_edge("hold", "ask")
        .with_edge("ask", END)
    )


def asking() -> Graph[Job]:
    return (
        Graph("asking", state=Job)
        .with_node("ask", ask)
        .with_edge(START, "ask")
        .with_edge("ask", END)
    )


def again(state: Job) -> str:
    return "bump" if state.value < 100 else END


def looping() -> Graph[Job]:
    return (
        Graph("looping", state=Job)
        .with_node("bump", bump)
        .with_edge(START, "bump")
        .with_conditional_edges("bump", again, {"bump": "bump", END: END})
    )


def serviced() -> Graph[Job]:
    return (
        Graph("serviced", state=Job)
        .with_node("use", needs_model)
        .with_edge(START, "use")
        .with_edge("use", END)
    )


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def cli_error(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: "), result.stderr
    assert not PYTHON_FORMS.search(result.stderr), result.stderr
    return result.stderr


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    return str(tmp_path / "runs.db")


def test_issue44_a_busy_run_names_wait_and_wait_waits(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy run said "call resume(..., wait=True)"; the command had no way to wait."""
    ENTERED.clear()
    RELEASE.clear()
    app = held().compile(store=SqliteStore(db))
    first = threading.Thread(target=lambda: app.invoke({}, run_id="b-1"))
    first.start()
    try:
        assert ENTERED.wait(DEADLINE_S)
        spec = f"{HERE}:held"
        message = cli_error(sg("resume", "b-1", "--db", db, "--graph", spec, "--response", "1"))
        assert "is being run by" in message
        assert "pass --wait (`stargraph resume b-1 --wait`) to wait for it" in message
        with pytest.raises(RunBusyError, match=r"resume\(\.\.\., wait=True\)"):
            app.resume("b-1", response=1)  # Python keeps its own wording

        # --wait polls the store; its first pause lets the holder finish (no real sleep).
        real_sleep = time.sleep

        def holder_finishes(seconds: float) -> None:
            if threading.current_thread() is not first and first.is_alive():
                RELEASE.set()
                first.join(DEADLINE_S)
            else:
                real_sleep(seconds)

        monkeypatch.setattr(time, "sleep", holder_finishes)
        done = sg("resume", "b-1", "--db", db, "--graph", spec, "--response", '"yes"', "--wait")
        assert done.exit_code == 0, done.stderr
        assert '"answer": "yes"' in done.stdout
    finally:
        RELEASE.set()
        first.join(DEADLINE_S)
        app.close()


def test_issue44_resume_hints_name_response_and_fork(db: str) -> None:
    spec = f"{HERE}:asking"
    assert sg("run", spec, "--run-id", "a-1", "--db", db, "-q").exit_code == 0
    message = cli_error(sg("resume", "a-1", "--db", db))
    assert "pass --response JSON (`stargraph resume a-1 --response JSON`)" in message
    message = cli_error(sg("resume", "a-1", "--db", db, "--update", '{"value": 2}'))
    assert "--response" in message
    assert sg("resume", "a-1", "--db", db, "--response", '"ok"', "-q").exit_code == 0
    message = cli_error(sg("resume", "a-1", "--db", db))
    assert "(use `stargraph fork a-1 --step K` to continue from an earlier step)" in message
    assert "on the command line" not in message  # said once, in the CLI's words
    with SqliteStore(db) as store, pytest.raises(RunNotResumableError, match=r"fork\('a-1'"):
        asking().compile(store=store).resume("a-1")


def test_issue44_a_run_not_waiting_is_told_to_drop_response(db: str) -> None:
    assert sg("run", f"{HERE}:serviced", "--run-id", "s-1", "--db", db, "-q").exit_code == 1
    message = cli_error(sg("resume", "s-1", "--db", db, "--response", '"x"'))
    assert "is not waiting for a response" in message
    assert "resume it without --response" in message


def test_issue44_a_missing_service_names_the_cli_way_to_give_it(db: str) -> None:
    message = cli_error(sg("run", f"{HERE}:serviced", "--run-id", "s-1", "--db", db, "-q"))
    assert "services['model'] was not given to the graph" in message
    assert "pass as GRAPH a CompiledGraph compiled with services={'model': ...}" in message
    assert "a worker: `stargraph worker --services module:fn`" in message


def test_issue44_step_limit_as_node_and_unknown_runs_name_the_options(db: str) -> None:
    message = cli_error(sg("run", f"{HERE}:looping", "--db", db, "--max-steps", "2", "-q"))
    assert "pass a larger --max-steps" in message
    assert sg("run", f"{HERE}:asking", "--run-id", "a-1", "--db", db, "-q").exit_code == 0
    message = cli_error(sg("fork", "a-1", "--step", "0", "--as-node", "nope", "--db", db))
    assert "is given --as-node 'nope', which is not a node" in message
    assert "leave --as-node out" in message
    message = cli_error(sg("show", "nope", "--db", db))
    assert "list runs with `stargraph runs [--db PATH]`" in message
