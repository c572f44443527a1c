"""The ``stargraph`` command and the mistakes a newcomer makes, each as a newcomer made it:
the installed console script in a subprocess, from a fresh folder. Also ``fork``, ``submit``
and ``worker``, success and failure paths.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stargraph.errors import InvalidInputError

STARGRAPH = str(Path(sys.executable).parent / "stargraph")

FLOW = """
from typing import Annotated

from pydantic import BaseModel

from stargraph import END, START, Graph, reducers


class State(BaseModel):
    counter: int = 0
    category: str = ""
    items: Annotated[list[str], reducers.append] = []


def classify(state: State) -> dict:
    return {"counter": state.counter + 1, "category": "billing", "items": ["c"]}


def answer(state: State) -> dict:
    return {"counter": state.counter + 1, "items": ["a"]}


graph = (
    Graph("flow", state=State)
    .with_node("classify", classify)
    .with_node("answer", answer)
    .with_edge(START, "classify")
    .with_edge("classify", "answer")
    .with_edge("answer", END)
)
"""


def sg(
    cwd: Path, *args: str, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STARGRAPH_DEBUG")}
    return subprocess.run(
        [STARGRAPH, *args],
        cwd=cwd,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )


def ok(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    result = sg(cwd, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def error(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one-paragraph error of a failed command; never a traceback or 'a bug'."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert "looks like a bug" not in result.stderr
    return result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flow.py").write_text(FLOW)
    return tmp_path


# --------------------------------------------------------------------------- --input


def test_a_bad_input_starts_no_run_and_offers_no_resume(project: Path) -> None:
    """It used to say "The run is kept ... stargraph resume" though no run existed."""
    message = error(sg(project, "run", "flow.py", "--input", '{"counter": "many"}'), 2)
    assert "no run was started" in message
    assert "counter: Input should be a valid integer" in message
    assert "resume" not in message
    assert json.loads(ok(project, "runs", "--json").stdout) == []


def test_unknown_input_keys_are_refused(project: Path) -> None:
    """They used to be dropped silently (a typo ran the graph on defaults)."""
    message = error(sg(project, "run", "flow.py", "--input", '{"countr": 3}'), 2)
    assert "has a key 'countr' that State has no field for" in message
    assert "its fields are category, counter, items" in message
    assert json.loads(ok(project, "runs", "--json").stdout) == []


def test_unknown_input_keys_are_a_typed_error_in_python() -> None:
    from stargraph.examples.basics import chain_graph

    app = chain_graph().compile()
    with pytest.raises(InvalidInputError, match=r"has keys 'a', 'b' that CounterState has no"):
        app.invoke({"counter": 1, "b": 2, "a": 1})
    with pytest.raises(InvalidInputError, match=r"input of run 'r' has a key 'x'"):
        list(app.stream({"x": 1}, run_id="r"))
    assert app.invoke({"counter": 1}).counter == 1 + len(app.ir.nodes)


# --------------------------------------------------------------------------- pipes


@pytest.mark.parametrize("command", [["runs"], ["show", "p-1"], ["draw", "flow.py"]])
def test_output_to_a_closed_pipe_is_not_a_bug(project: Path, command: list[str]) -> None:
    """`stargraph runs | head` used to print "BrokenPipeError (this looks like a bug)". The
    reader here is gone before the command writes, so every write fails as head's would."""
    ok(project, "run", "flow.py", "--run-id", "p-1", "-q")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = sg(project, *command, stdout=write_end)
    finally:
        os.close(write_end)
    assert result.returncode == 1
    assert result.stderr == ""


# --------------------------------------------------------------------------- --db


def test_a_database_of_something_else_is_left_alone(project: Path) -> None:
    """`runs --db other.db` used to create stargraph's tables in an unrelated database."""
    with sqlite3.connect(project / "other.db") as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    for args in (["runs"], ["run", "flow.py", "-q"], ["show", "x"]):
        message = error(sg(project, *args, "--db", "other.db"), 2)
        assert "other.db is an SQLite database of something else (tables invoices)" in message
    with sqlite3.connect(project / "other.db") as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert tables == {"invoices"}
    (project / "notes.db").write_text("my notes\n")
    message = error(sg(project, "runs", "--db", "notes.db"), 2)
    assert "notes.db is not an SQLite database" in message
    assert (project / "notes.db").read_text() == "my notes\n"


def test_a_new_or_empty_database_file_is_fine(project: Path) -> None:
    (project / "empty.db").touch()
    ok(project, "run", "flow.py", "--db", "empty.db", "--run-id", "e-1", "-q")
    ok(project, "run", "flow.py", "--db", "new.db", "--run-id", "n-1", "-q")
    assert "e-1" in ok(project, "runs", "--db", "empty.db").stdout
    assert "n-1" in ok(project, "runs", "--db", "new.db").stdout


# --------------------------------------------------------------------------- rules check


def test_rules_check_names_a_misspelled_node(project: Path) -> None:
    """A rule on node 'clasify' used to pass `rules check --graph` and never fire."""
    (project / "pack.json").write_text(
        json.dumps(
            {
                "id": "desk",
                "version": "1",
                "rules": [{"name": "stop", "when": [{"node": "clasify"}], "then": {"halt": "x"}}],
            }
        )
    )
    message = error(sg(project, "rules", "check", "pack.json", "--graph", "flow.py"), 1)
    assert "the rule matches node 'clasify', which is not a node of the graph" in message
    assert "did you mean 'classify'?" in message


def test_rules_check_says_to_mark_a_fact_instead_of_speaking_clips(project: Path) -> None:
    """It used to say "CLIPS: [TMPLTDEF1] Invalid slot 'category' ..."."""
    (project / "pack.json").write_text(
        json.dumps(
            {
                "id": "desk",
                "version": "1",
                "rules": [
                    {
                        "name": "billing",
                        "when": [{"node": "classify"}, {"state.category": "billing"}],
                        "then": {"halt": "x"},
                    }
                ],
            }
        )
    )
    message = error(sg(project, "rules", "check", "pack.json", "--graph", "flow.py"), 1)
    assert "the rule reads state field 'category', which is not a rule fact" in message
    assert "category: Annotated[str, fathom.Fact()]" in message
    assert "CLIPS" not in message
    assert "TMPLTDEF" not in message
    marked = FLOW.replace(
        "category: str = ''", "category: Annotated[str, fathom.Fact()] = ''"
    ).replace('category: str = ""', 'category: Annotated[str, fathom.Fact()] = ""')
    (project / "flow.py").write_text(marked.replace("reducers\n", "reducers, fathom\n", 1))
    assert ok(project, "rules", "check", "pack.json", "--graph", "flow.py").stdout.startswith(
        "ok: rule pack desk@1"
    )


# --------------------------------------------------------------------------- fork


def test_fork_then_resume(project: Path) -> None:
    ok(project, "run", "flow.py", "--run-id", "f-1", "-q")
    forked = ok(project, "fork", "f-1", "--step", "1", "--update", '{"counter": 40}')
    new_id = forked.stdout.strip()
    assert new_id.startswith("f-1~")
    assert "continue it with: stargraph resume " in forked.stderr
    assert new_id in forked.stderr
    final = json.loads(ok(project, "resume", new_id, "-q").stdout)
    assert final == {"counter": 41, "category": "billing", "items": ["c", "a"]}
    assert "forked     from f-1 at step 1" in ok(project, "show", new_id).stdout
    named = ok(project, "fork", "f-1", "--step", "0", "--new-run-id", "f-2").stdout
    assert named.strip() == "f-2"


def test_fork_failures(project: Path) -> None:
    assert "no run database" in error(sg(project, "fork", "f-1", "--step", "1"), 1)
    ok(project, "run", "flow.py", "--run-id", "f-1", "-q")
    assert "stargraph runs" in error(sg(project, "fork", "nope", "--step", "1"), 1)
    message = error(sg(project, "fork", "f-1", "--step", "9"), 2)
    assert "run f-1 has steps 0..2; pass --step 0 to 2" in message
    message = error(sg(project, "fork", "f-1", "--step", "1", "--update", "[1]"), 2)
    assert "--update must be a JSON object" in message
    message = error(sg(project, "fork", "f-1", "--step", "1", "--update", '{"nope": 1}'), 1)
    assert "nope" in message


def test_a_finished_run_points_at_fork(project: Path) -> None:
    ok(project, "run", "flow.py", "--run-id", "d-1", "-q")
    message = error(sg(project, "resume", "d-1"), 1)
    assert "(use `stargraph fork d-1 --step K` to continue from an earlier step)" in message


# --------------------------------------------------------------------------- submit/worker


def test_submit_then_a_worker_runs_it(project: Path) -> None:
    queued = ok(project, "submit", "flow.py", "--input", '{"counter": 3}', "--run-id", "q-1")
    assert queued.stdout == "q-1\n"
    assert "queued run q-1 of flow:graph; `stargraph worker` runs it" in queued.stderr
    worked = ok(project, "worker", "--max-runs", "1", "--idle-exit", "60")
    assert json.loads(worked.stdout) == {"run_id": "q-1", "outcome": "done"}
    assert "stopped after 1 run(s)" in worked.stderr
    shown = ok(project, "show", "q-1").stdout
    assert "status     done" in shown
    assert '"counter": 5' in shown
    ok(project, "submit", "flow:graph", "--run-id", "q-2")
    idle = ok(project, "worker", "--max-runs", "1", "--idle-exit", "60")
    assert json.loads(idle.stdout)["run_id"] == "q-2"


def test_submit_failures(project: Path) -> None:
    message = error(sg(project, "submit", "flow.py", "--input", '{"countr": 1}'), 2)
    assert "nothing was queued" in message
    assert "'countr'" in message
    message = error(sg(project, "submit", "flow.py", "--input", '{"counter": "x"}'), 2)
    assert "it does not fit State: counter: Input should be a valid integer" in message
    message = error(sg(project, "submit", "flow.py", "--input", "[1]"), 2)
    assert "--input must be a JSON object" in message
    ok(project, "compile", "flow.py")
    (project / "flow.json").write_text(
        subprocess.run(
            [sys.executable, "-c", "import flow; print(flow.graph.to_ir().to_json())"],
            cwd=project,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    message = error(sg(project, "submit", "flow.json"), 2)
    assert "workers import the graph by reference" in message
    message = error(sg(project, "submit", "nowhere:graph"), 1)
    assert "cannot import module 'nowhere'" in message


@pytest.mark.parametrize("command", ["fork", "submit", "worker"])
def test_new_commands_show_examples_in_their_help(project: Path, command: str) -> None:
    text = ok(project, command, "--help").stdout
    assert "Examples:" in text
    assert f"stargraph {command}" in text
    assert command in ok(project, "--help").stdout
