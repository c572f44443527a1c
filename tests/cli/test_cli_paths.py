"""How the ``stargraph`` command finds your code, tested as a newcomer meets it: the installed
console script, run in a subprocess from a fresh folder holding the user's files.

Every command imports ``module:attr`` (and the refs of an archived graph) with the current
folder on ``sys.path``; ``file.py[:attr]`` names a graph by its file; a graph built by a script
run as ``python triage.py`` hashes the same as when the CLI imports ``triage``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
STARGRAPH = str(BIN / "stargraph")

# A graph that waits for a human: run -> waiting, resume --response -> done.
TRIAGE = """
from typing import Annotated

from pydantic import BaseModel

from stargraph import END, START, Graph, reducers
from stargraph.runtime import RunContext


class Customer(BaseModel):
    name: str = "ada"


class Ticket(BaseModel):
    text: str = ""
    customer: Customer = Customer()
    category: str = ""
    log: Annotated[list[str], reducers.append] = []


def classify(state: Ticket) -> dict:
    return {"category": "billing" if "invoice" in state.text else "other", "log": ["classify"]}


def approve(state: Ticket, ctx: RunContext) -> dict:
    answer = ctx.interrupt({"question": f"send {state.category}?"})
    return {"log": [f"approved={answer}"]}


graph = (
    Graph("triage", state=Ticket)
    .with_node("classify", classify)
    .with_node("approve", approve)
    .with_edge(START, "classify")
    .with_edge("classify", "approve")
    .with_edge("approve", END)
)

if __name__ == "__main__":
    print(graph.compile().graph_hash)
"""


def run(
    cwd: Path, *args: str, check: bool | None = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``stargraph ARGS`` (the console script) in ``cwd``; ``check`` asserts exit 0."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STARGRAPH_DEBUG")}
    result = subprocess.run(
        [STARGRAPH, *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "triage.py").write_text(TRIAGE)
    return tmp_path


def _error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.stderr.startswith("error: ") or "\nerror: " in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert "looks like a bug" not in result.stderr
    return result.stderr


# --------------------------------------------------------------------------- module:attr


def test_every_command_imports_module_attr_from_the_current_folder(project: Path) -> None:
    """show/resume/replay/diff read the archived IR, whose refs name ``triage``: they used
    to fail with "No module named 'triage'" because only run/compile/draw put the current
    folder on the import path."""
    graph_hash = run(project, "compile", "triage:graph").stdout.strip()
    assert run(project, "hash", "triage:graph").stdout.strip() == graph_hash
    assert "classify" in run(project, "draw", "triage:graph").stdout
    waiting = run(project, "run", "triage:graph", "--run-id", "t-1", "--input", '{"text": "x"}')
    assert "run t-1 is waiting" in waiting.stdout
    run(project, "run", "triage:graph", "--run-id", "t-2", "--input", '{"text": "x"}', "-q")

    shown = run(project, "show", "t-1")
    assert "status     interrupted" in shown.stdout
    assert '"category": "other"' in shown.stdout  # the state, rebuilt through the graph
    run(project, "show", "t-1", "--html", "report.html")
    assert (project / "report.html").stat().st_size > 0
    assert run(project, "diff", "t-1", "t-2").returncode == 0
    resumed = run(project, "resume", "t-1", "--response", '"yes"', "-q")
    assert json.loads(resumed.stdout)["log"] == ["classify", "approved=yes"]
    replayed = run(project, "replay", "t-1")
    assert "matches its record" in replayed.stderr
    different = run(project, "diff", "t-1", "t-2", check=False)
    assert different.returncode == 1
    assert "approved=yes" in different.stdout
    pack = project / "pack.json"
    pack.write_text(
        json.dumps(
            {
                "id": "p",
                "version": "1",
                "rules": [{"name": "r", "when": [{"node": "classify"}], "then": {"halt": "x"}}],
            }
        )
    )
    assert run(project, "rules", "check", "pack.json", "--graph", "triage:graph").stdout.startswith(
        "ok: rule pack p@1"
    )


# --------------------------------------------------------------------------- file.py[:attr]


@pytest.mark.parametrize("spec", ["triage.py", "triage.py:graph", "./triage.py"])
def test_a_python_file_names_its_graph(project: Path, spec: str) -> None:
    """``stargraph run triage.py`` used to be parsed as IR JSON ("not valid JSON")."""
    by_module = run(project, "compile", "triage:graph").stdout
    assert run(project, "compile", spec).stdout == by_module
    assert run(project, "hash", spec).stdout == by_module
    done = run(project, "run", spec, "--run-id", "f-1", "-q")
    assert "run f-1 is waiting" in done.stdout
    assert "--graph" in done.stdout
    assert spec in done.stdout


def test_a_python_file_in_another_folder(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "triage.py").write_text(TRIAGE)
    here = run(tmp_path / "flows", "compile", "triage.py").stdout
    assert run(tmp_path, "compile", os.path.join("flows", "triage.py")).stdout == here


def test_a_python_file_with_several_graphs_asks_which(project: Path) -> None:
    (project / "two.py").write_text(
        TRIAGE.replace("if __name__", "other = graph.with_node('x', classify)\nif __name__")
    )
    result = run(project, "compile", "two.py", check=False)
    assert result.returncode == 0  # one of them is called 'graph'
    (project / "three.py").write_text("from triage import graph as g1, graph as g2\n")
    result = run(project, "compile", "three.py", check=False)
    assert result.returncode == 2
    assert "several graphs; pick one: three.py:g1, three.py:g2" in _error(result)
    (project / "none.py").write_text("x = 1\n")
    result = run(project, "compile", "none.py", check=False)
    assert result.returncode == 2
    assert "none.py defines no Graph at module level; pass none.py:NAME" in _error(result)


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("missing.py", 1, "no such file: missing.py"),
        ("missing.py:graph", 1, "no such file: missing.py (from 'missing.py:graph')"),
        ("triage.py:nope", 1, "module 'triage' has no attribute 'nope' (from 'triage.py:nope')"),
        ("triage.py:", 2, "'triage.py:' names no attribute; pass triage.py:NAME or triage.py"),
        ("nomod:graph", 1, "cannot import module 'nomod' (from 'nomod:graph')"),
    ],
)
def test_graph_arguments_that_name_nothing(
    project: Path, spec: str, code: int, message: str
) -> None:
    result = run(project, "compile", spec, check=False)
    assert result.returncode == code
    assert message in _error(result)


def test_a_file_without_a_module_name_says_rename_it(project: Path) -> None:
    (project / "my-triage.py").write_text(TRIAGE)
    result = run(project, "compile", "my-triage.py", check=False)
    assert result.returncode == 2
    assert "rename it, e.g. to my_triage.py" in _error(result)


def test_a_text_file_is_not_read_as_ir_json(project: Path) -> None:
    (project / "notes.txt").write_text("hello\n")
    result = run(project, "compile", "notes.txt", check=False)
    assert result.returncode == 2
    assert "neither an IR JSON file nor a Python file" in _error(result)


# --------------------------------------------------------------------------- errors in user code


def test_an_error_while_importing_user_code_is_not_called_a_bug(project: Path) -> None:
    (project / "broken.py").write_text("graph = len(1)\n")
    result = run(project, "compile", "broken:graph", check=False)
    assert result.returncode == 1
    message = _error(result)
    assert "importing 'broken' raised TypeError: object of type 'int' has no len()" in message
    assert "error in your code" in message
    (project / "needs.py").write_text("import not_installed_anywhere\n")
    result = run(project, "compile", "needs.py", check=False)
    assert "importing 'needs' raised ModuleNotFoundError" in _error(result)
    (project / "factory.py").write_text("def make():\n    raise ValueError('no config')\n")
    result = run(project, "compile", "factory:make", check=False)
    assert "calling factory.make() raised ValueError: no config" in _error(result)


# --------------------------------------------------------------------------- scripts as __main__


def test_a_script_run_as_main_hashes_like_the_imported_module(project: Path) -> None:
    """``python triage.py`` used to record refs as ``__main__:classify`` (and the nested
    ``Customer`` type as ``__main__.Customer``): another hash than ``triage:graph``."""
    as_script = python(project, "triage.py").stdout.strip()
    assert as_script == run(project, "hash", "triage:graph").stdout.strip()
    assert as_script == run(project, "compile", "triage.py").stdout.strip()
    (project / "pkg").mkdir()
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "flow.py").write_text(TRIAGE)
    in_package = run(project, "hash", "pkg.flow:graph").stdout.strip()
    assert python(project, "-m", "pkg.flow").stdout.strip() == in_package
    assert python(project, os.path.join("pkg", "flow.py")).stdout.strip() == in_package


def _run_from_a_script(project: Path) -> None:
    """``python main_run.py``: the triage graph run from Python into the default database
    as run ``m-1``, which waits for an answer."""
    (project / "main_run.py").write_text(
        TRIAGE.replace(
            'if __name__ == "__main__":\n    print(graph.compile().graph_hash)',
            'if __name__ == "__main__":\n'
            "    from stargraph.checkpoint import SqliteStore\n"
            '    app = graph.compile(store=SqliteStore(".stargraph/stargraph.db"))\n'
            '    app.invoke({"text": "an invoice"}, run_id="m-1")\n',
        )
    )
    python(project, "main_run.py")


def test_a_run_made_by_a_script_resumes_from_the_command_line(project: Path) -> None:
    """The run's graph hash and code hash are the ones the CLI computes for ``triage.py``:
    no GraphHashMismatch and no code-change warning on resume."""
    _run_from_a_script(project)
    resumed = run(project, "resume", "m-1", "--graph", "main_run.py", "--response", "true", "-q")
    assert json.loads(resumed.stdout)["log"] == ["classify", "approved=True"]
    assert "CodeHashWarning" not in resumed.stderr
    assert resumed.stderr == ""


def test_a_run_made_from_python_needs_no_graph_option(project: Path) -> None:
    """A durable run gives its store its graph's IR (once per hash), so the commands find
    the graph of a run started from Python with no ``--graph`` and no archive beside the
    database: show, resume (importing the nodes from the current folder) and replay."""
    _run_from_a_script(project)
    assert not list((project / ".stargraph").glob("graphs/*")), "nothing is archived"
    shown = run(project, "show", "m-1")
    assert "waiting" in shown.stdout or "interrupted" in shown.stdout
    resumed = run(project, "resume", "m-1", "--response", "true", "-q")
    assert json.loads(resumed.stdout)["log"] == ["classify", "approved=True"]
    assert resumed.stderr == ""
    assert run(project, "replay", "m-1", "-q").returncode == 0


def test_a_script_without_an_importable_name_still_runs_in_memory(tmp_path: Path) -> None:
    (tmp_path / "my-flow.py").write_text(
        TRIAGE.replace(
            "print(graph.compile().graph_hash)",
            "print(sorted(node.ref for node in graph.to_ir().nodes))\n"
            "    from stargraph.checkpoint import MemoryStore\n"
            "    app = graph.compile(store=MemoryStore())\n"
            "    print(app.invoke({'text': 'an invoice'}).category)",
        )
    )
    out = python(tmp_path, "my-flow.py").stdout.splitlines()
    assert out == ["['__main__:approve', '__main__:classify']", "billing"]


FLAKY = """
from pydantic import BaseModel

from stargraph import END, START, Graph, RetryPolicy


class Flaky(Exception):
    pass


class State(BaseModel):
    tries: int = 0


CALLS = []


def fetch(state: State) -> dict:
    CALLS.append(1)
    if len(CALLS) < 3:
        raise Flaky("not yet")
    return {"tries": len(CALLS)}


graph = (
    Graph("flaky", state=State)
    .with_node("fetch", fetch, retry=RetryPolicy(retry_on=[Flaky], initial_interval_s=0))
    .with_edge(START, "fetch")
    .with_edge("fetch", END)
)

if __name__ == "__main__":
    app = graph.compile()
    print(app.graph_hash)
    print(",".join(graph.to_ir().nodes[0].retry.retry_on))
    print(app.invoke().tries)
"""


def test_retry_on_a_class_of_a_script_hashes_like_the_imported_module(tmp_path: Path) -> None:
    """An exception class named in ``retry_on`` by a script run as ``python flaky.py`` used to
    be recorded as ``__main__:Flaky``: another hash than the CLI's ``flaky:graph``. In the
    script's own process the importable name still resolves to the very class it raises, so
    the node is retried."""
    (tmp_path / "flaky.py").write_text(FLAKY)
    graph_hash, retry_on, tries = python(tmp_path, "flaky.py").stdout.split()
    assert retry_on == "flaky:Flaky"
    assert graph_hash == run(tmp_path, "hash", "flaky:graph").stdout.strip()
    assert graph_hash == run(tmp_path, "compile", "flaky.py").stdout.strip()
    assert tries == "3"


# --------------------------------------------------------------------------- a factory's store

FACTORY = """
from stargraph.checkpoint import {store_cls}
from triage import graph


def make():
    return graph.compile(store={store_expr})
"""


def _factory(project: Path, store_cls: str, store_expr: str) -> None:
    (project / "factory.py").write_text(FACTORY.format(store_cls=store_cls, store_expr=store_expr))


def test_a_factory_store_is_not_silently_replaced_by_db(project: Path) -> None:
    """``--db`` used to replace the store a factory compiled its graph with, silently: the
    run went to another database than the one the user's code names."""
    _factory(project, "SqliteStore", "SqliteStore('mine.db')")
    result = run(project, "run", "factory:make", "--run-id", "f-1", "-q", check=False)
    assert result.returncode == 2
    message = _error(result)
    assert "compiled with its own store (SqliteStore at 'mine.db')" in message
    assert "pass --db mine.db" in message
    assert not (project / ".stargraph" / "stargraph.db").exists()


def test_a_factory_store_is_used_when_db_names_it(project: Path) -> None:
    _factory(project, "SqliteStore", "SqliteStore('mine.db')")
    run(project, "run", "factory:make", "--run-id", "f-1", "-q", "--db", "mine.db")
    listed = run(project, "runs", "--db", "mine.db").stdout
    assert "f-1" in listed
    assert "waiting" in listed or "interrupted" in listed


def test_a_factory_with_a_memory_store_runs_in_the_command_store(project: Path) -> None:
    """A ``MemoryStore`` dies with the process: the command keeps the run in ``--db``."""
    _factory(project, "MemoryStore", "MemoryStore()")
    run(project, "run", "factory:make", "--run-id", "f-2", "-q")
    assert "f-2" in run(project, "runs").stdout


def test_a_seeded_factory_keeps_its_entropy_under_the_command_store(project: Path) -> None:
    """The CLI recompiles a compiled graph with its own store; it used to drop everything
    else the user compiled with (here a seeded entropy, so ids were random again)."""
    (project / "seeded.py").write_text(
        "from pydantic import BaseModel\n"
        "from stargraph import END, START, Graph\n"
        "from stargraph.runtime import RunContext, SeededEntropy\n\n\n"
        "class S(BaseModel):\n    token: str = ''\n\n\n"
        "def mint(state: S, ctx: RunContext) -> dict:\n"
        "    return {'token': ctx.uuid()}\n\n\n"
        "def make():\n"
        "    graph = Graph('seeded', state=S).with_node('mint', mint)"
        ".with_edge(START, 'mint').with_edge('mint', END)\n"
        "    return graph.compile(entropy=lambda: SeededEntropy(7))\n"
    )
    args = ("run", "seeded:make", "-q", "--run-id", "s-1", "--db")
    first = json.loads(run(project, *args, "one.db").stdout)
    again = json.loads(run(project, *args, "two.db").stdout)
    assert first["token"] == again["token"] != ""


def test_a_factory_with_plugins_keeps_its_observer_under_the_command_store(
    project: Path,
) -> None:
    """The recompile under ``--db`` used to drop ``plugins=``: an audit plugin's
    ``on_event`` saw every run from Python and none from the command line."""
    (project / "audited.py").write_text(
        "from pathlib import Path\n\n"
        "from pydantic import BaseModel\n\n"
        "from stargraph import END, START, Graph\n"
        "from stargraph.plugin import get_plugin_manager, hookimpl\n\n\n"
        "class S(BaseModel):\n    n: int = 0\n\n\n"
        "class Audit:\n"
        "    @hookimpl\n"
        "    def on_event(self, event):\n"
        "        with Path('audit.log').open('a') as log:\n"
        "            log.write(type(event).__name__ + '\\n')\n\n\n"
        "def bump(state: S) -> dict:\n    return {'n': state.n + 1}\n\n\n"
        "def make():\n"
        "    plugins = get_plugin_manager()\n"
        "    plugins.register(Audit())\n"
        "    graph = Graph('audited', state=S).with_node('bump', bump)"
        ".with_edge(START, 'bump').with_edge('bump', END)\n"
        "    return graph.compile(plugins=plugins)\n"
    )
    out = run(project, "run", "audited:make", "-q", "--run-id", "a-1", "--db", "a.db")
    assert json.loads(out.stdout) == {"n": 1}
    events = (project / "audit.log").read_text().split()
    assert events[0] == "RunStarted"
    assert events[-1] == "RunFinished"
    assert "StepCompleted" in events


def test_resuming_under_edited_node_code_warns_in_one_plain_line(project: Path) -> None:
    """The code-hash warning used to come out as Python prints warnings: the library's
    file name and line number, then a source line."""
    run(project, "run", "triage.py", "--run-id", "t-1", "--input", '{"text": "x"}', "-q")
    source = (project / "triage.py").read_text()
    (project / "triage.py").write_text(source.replace('["classify"]', '["classified"]'))
    resumed = run(project, "resume", "t-1", "--response", "true", "-q")
    lines = resumed.stderr.splitlines()
    assert len(lines) == 1, resumed.stderr
    assert lines[0].startswith("warning: run 't-1' was checkpointed by different node code")
    assert lines[0].endswith("nodes will run the new code (CodeHashWarning)")
