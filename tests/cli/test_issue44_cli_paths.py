"""Seams a newcomer meets with the installed ``stargraph`` script, from a fresh folder: ``show``
from a subfolder and after the demo, a graph's own SQLite store found beside the graph file,
and the fixes suggested for a taken ``--run-id`` and for a file that has no module name, each
applied as the user would apply it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import stargraph
from tests.cli.test_cli_paths import TRIAGE, run

# The console script runs the stargraph under test, wherever the environment installed one.
SRC = {"PYTHONPATH": str(Path(stargraph.__file__).parents[1])}
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"

FACTORY = """
from stargraph.checkpoint import SqliteStore
from triage import graph


def make():
    return graph.compile(store=SqliteStore(".stargraph/stargraph.db"))
"""


def sg(cwd: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    result = run(cwd, *args, check=False, env=SRC)
    assert result.returncode == code, (args, result.stdout, result.stderr)
    return result


def error(cwd: Path, *args: str, code: int) -> str:
    stderr = sg(cwd, *args, code=code).stderr
    assert stderr.startswith("error: "), stderr
    assert "Traceback" not in stderr
    return stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "triage.py").write_text(TRIAGE)
    (tmp_path / "sub").mkdir()
    return tmp_path


def _command(message: str, program: str, answer: str | None = None) -> list[str]:
    """The ``stargraph <program> ...`` command a hint suggests, as argv (``JSON`` answered)."""
    found = re.search(rf"stargraph {program} [^;`\n]*", message)
    assert found is not None, message
    argv = shlex.split(found.group(0))[1:]
    return [answer if a == "JSON" and answer is not None else a for a in argv]


# --------------------------------------------------------------------------- show


def test_issue44_show_rebuilds_the_state_from_a_subfolder(project: Path) -> None:
    """``show`` read the archived IR, whose state model ``triage:Ticket`` does not import
    from a subfolder: it printed the steps and then failed on the state."""
    sg(project, "run", "triage.py", "--run-id", "t-1", "--input", '{"text": "invoice"}')
    sg(project, "run", "triage.py", "--run-id", "t-2", "-q")
    shown = sg(project / "sub", "show", "t-1").stdout
    assert '"category": "billing"' in shown
    different = sg(project / "sub", "diff", "t-1", "t-2", code=1).stdout
    assert "final state" in different


@pytest.mark.slow
def test_issue44_show_works_for_every_run_of_the_demo(tmp_path: Path) -> None:
    """After ``make demo`` the runs' state models live in ``examples/demo_agent.py``, which
    does not import from where the demo ran; child skill runs have no archive of their own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    demo = subprocess.run(
        [sys.executable, str(DEMO)],
        cwd=tmp_path,
        env={**env, **SRC},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    db = ".stargraph/demo/demo.db"
    runs = [r["run_id"] for r in json.loads(sg(tmp_path, "runs", "--db", db, "--json").stdout)]
    assert len(runs) == 3  # the desk and its two skill runs
    (tmp_path / "deeper").mkdir()
    for where, path in ((tmp_path, db), (tmp_path / "deeper", f"../{db}")):
        for run_id in runs:
            shown = sg(where, "show", run_id, "--db", path).stdout
            state = json.loads(shown.rpartition("state after step")[2].partition(":\n")[2])
            assert state, (run_id, shown)
    shown = sg(tmp_path, "show", "desk-1", "--db", db).stdout
    assert '"total": 16.0' in shown


# --------------------------------------------------------------------------- own store


def test_issue44_own_store_is_found_beside_the_graph_file(project: Path) -> None:
    """From a subfolder the graph's own ``.stargraph/stargraph.db`` was resolved against the
    current folder: ``resume`` refused the project's database, the one that holds the run, and
    pointed at ``.stargraph/stargraph.db`` in the subfolder, which does not."""
    (project / "factory.py").write_text(FACTORY)
    sg(project, "run", "factory.py:make", "--run-id", "f-1", "-q")
    done = sg(project / "sub", "resume", "f-1", "--response", '"yes"', "-q")
    assert "approved=yes" in done.stdout


def test_issue44_own_store_hint_names_a_database_holding_the_run(project: Path) -> None:
    """The suggested ``--db`` was the graph's store path as written, read from the current
    folder: from a subfolder, a database that is not the graph's (and lacks its runs)."""
    (project / "factory.py").write_text(FACTORY)
    sg(project, "run", "factory.py:make", "--run-id", "f-1", "-q")
    sg(project, "run", "triage.py", "--run-id", "t-1", "-q", "--db", "other.db")
    here = project / "sub"
    args = ("run", "../factory.py:make", "--run-id", "f-2", "-q")
    message = error(here, *args, "--db", "../other.db", code=2)
    fix = re.search(r"pass --db (\S+), or make", message)
    assert fix is not None, message
    assert fix.group(1) == "../.stargraph/stargraph.db"
    sg(here, *args, "--db", fix.group(1))
    listed = json.loads(sg(project, "runs", "--json").stdout)
    assert sorted(r["run_id"] for r in listed) == ["f-1", "f-2"]

    # A stored run that is in neither place the graph's store can mean: no --db is named.
    resume = ("resume", "t-1", "--graph", "../factory.py:make", "--response", '"yes"', "-q")
    message = error(here, *resume, "--db", "../other.db", code=2)
    assert "pass --db" not in message
    assert "holds run t-1, so make ../factory.py:make return the Graph" in message


# --------------------------------------------------------------------------- --run-id taken


def test_issue44_a_taken_run_id_says_how_to_go_on(project: Path) -> None:
    """A second ``run --run-id r-1`` said "pick another run_id or resume it. The run is kept:
    fix the cause and continue it with ...": the Python argument, and a run that had not
    failed."""
    sg(project, "run", "triage.py", "--run-id", "r-1", "-q")
    message = error(project, "run", "triage.py", "--run-id", "r-1", "-q", code=2)
    assert "run r-1 already exists in .stargraph/stargraph.db (interrupted at step 1)" in message
    assert "pass another --run-id (or leave it out for a fresh id)" in message
    assert "run_id" not in message.replace("--run-id", "")
    assert "The run is kept" not in message
    sg(project, "run", "triage.py", "-q")  # a fresh id
    resumed = sg(project, *_command(message, "resume", '"yes"'), "-q")
    assert "approved=yes" in resumed.stdout

    message = error(project, "run", "triage.py", "--run-id", "r-1", "-q", code=2)
    assert "(done at step 2)" in message
    assert "status     done" in sg(project, *_command(message, "show")).stdout
    fork = [a if a != "K" else "1" for a in _command(message, "fork")]
    new_id = sg(project, *fork).stdout.strip()
    assert new_id.startswith("r-1~")

    message = error(project, "fork", "r-1", "--step", "1", "--new-run-id", new_id, code=2)
    assert f"run {new_id} already exists" in message
    assert "pass another --new-run-id" in message


# --------------------------------------------------------------------------- rename hints


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("my.graph.py", "a dot in 'my.graph' would name a package"),
        ("my-graph.py", "'-' in 'my-graph' cannot be part of a module name"),
        ("my graph.py", "' ' in 'my graph' cannot be part of a module name"),
        ("1st-graph.py", "'1st-graph' starts with a digit; '-' in '1st-graph'"),
        ("class.py", "'class' is a Python keyword"),
        ("import.graph.py", "a dot in 'import.graph' would name a package"),
        ("os-.py", "'-' in 'os-' cannot"),
        ("app-x/flow.py", "'-' in 'app-x' cannot be part of a module name"),
    ],
)
def test_issue44_a_rename_hint_works_when_applied(project: Path, name: str, why: str) -> None:
    """``my.graph.py`` was told to rename itself to ``my.graph.py``, ``class.py`` to
    ``class.py`` and ``1st-graph.py`` to ``1st_graph.py``: none of them importable."""
    file = project / name
    file.parent.mkdir(exist_ok=True)
    if file.parent != project:
        (file.parent / "__init__.py").write_text("")
    file.write_text(TRIAGE)
    (project / "my_graph.py").write_text("raise SystemExit('a file the rename must not hit')\n")
    message = error(project, "compile", name, code=2)
    assert why in message
    found = re.search(r": (mv .*)$", message.strip())
    assert found is not None, message
    _, old, new = shlex.split(found.group(1))
    assert old == name.partition("/")[0] if "/" in name else old == name
    assert not (project / new).exists()
    os.rename(project / old, project / new)
    renamed = new if "/" not in name else f"{new}/{Path(name).name}"
    assert sg(project, "compile", renamed).stdout.startswith("sha256:")
