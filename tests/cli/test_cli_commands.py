"""The ``stargraph`` command: every command's success and failure paths, via click's runner.

Graphs used as ``module:attr`` live in this module (``tests.cli.test_cli_commands:...``):
pytest puts the repository root on ``sys.path``, as the CLI does with the current directory.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.examples import basics
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext

# --------------------------------------------------------------------------- graphs


class Ticket(BaseModel):
    value: int = 0
    answer: str = ""


def double(state: Ticket) -> dict[str, Any]:
    return {"value": state.value * 2}


def ask(state: Ticket, ctx: RunContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": "approve?", "value": state.value})
    return {"answer": str(answer)}


def explode(state: Ticket) -> dict[str, Any]:
    if state.value < 0:
        raise RuntimeError("negative tickets are not allowed")
    return {}


def approval() -> Graph[Ticket]:
    """double -> ask (waits for a human) -> END."""
    return (
        Graph("approval", state=Ticket)
        .with_node("double", double)
        .with_node("ask", ask)
        .with_edge(START, "double")
        .with_edge("double", "ask")
        .with_edge("ask", END)
    )


def other_approval() -> Graph[Ticket]:
    """Same nodes, an extra step: a different graph hash."""
    return (
        approval().with_node("again", double).with_edge("double", "again").with_edge("again", END)
    )


def fragile() -> Graph[Ticket]:
    """Fails on a negative value."""
    return (
        Graph("fragile", state=Ticket)
        .with_node("explode", explode)
        .with_entry("explode")
        .with_edge("explode", END)
    )


chain = basics.chain_graph()
compiled_chain = basics.chain_graph().compile()
not_a_graph = 42


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def sg(*args: str) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _ir_file(graph: Graph[Any], name: str = "graph.json") -> str:
    Path(name).write_text(graph.to_ir().to_json(indent=True))
    return name


def _one_paragraph(result: Result) -> None:
    # Progress lines may come first; the error is the last paragraph, and the only one.
    error = result.stderr[result.stderr.index("error: ") :]
    assert "\n\n" not in error.strip()
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- compile / hash


@pytest.mark.parametrize(
    "spec",
    [
        "FILE",
        "stargraph.examples.basics:chain_graph",
        "tests.cli.test_cli_commands:chain",
        "tests.cli.test_cli_commands:compiled_chain",
    ],
)
def test_compile_prints_the_hash_for_files_and_references(spec: str) -> None:
    spec = _ir_file(basics.chain_graph()) if spec == "FILE" else spec
    result = sg("compile", spec)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{basics.chain_graph().graph_hash}\n"


def test_compile_invalid_ir_lists_every_problem() -> None:
    Path("bad.json").write_text(
        json.dumps(
            {
                "name": "bad",
                "state": {"ref": "stargraph.examples.basics:CounterState", "fields": []},
                "nodes": [{"kind": "weird", "id": "a"}, {"kind": "function", "id": "b"}],
            }
        )
    )
    result = sg("compile", "bad.json")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "IR document bad.json has 2 problems" in result.stderr
    assert "unknown kind 'weird'" in result.stderr
    assert "bad.json#/nodes/1/ref: required field is missing" in result.stderr


def test_compile_reports_graph_problems_found_by_the_compiler() -> None:
    ir = basics.chain_graph().to_ir().model_dump(mode="json")
    ir["nodes"][0]["ref"] = "stargraph.examples.basics:no_such_function"
    ir["edges"].append({"kind": "static", "sources": ["n2"], "target": "ghost"})
    Path("broken.json").write_text(json.dumps(ir))
    result = sg("compile", "broken.json")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "no_such_function" in result.stderr
    assert "ghost" in result.stderr


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("missing.json", 1, "no such file: missing.json"),
        ("no-colon-here", 2, "neither an existing file nor a 'module:attr'"),
        ("no_such_module_xyz:graph", 1, "cannot import module 'no_such_module_xyz'"),
        ("tests.cli.test_cli_commands:nothing", 1, "has no attribute 'nothing'"),
        ("tests.cli.test_cli_commands:not_a_graph", 1, "is a int, not a Graph"),
    ],
)
def test_compile_bad_graph_arguments(spec: str, code: int, message: str) -> None:
    result = sg("compile", spec)
    assert result.exit_code == code
    _one_paragraph(result)
    assert message in result.stderr


def test_hash_needs_no_imports_and_fails_on_bad_json() -> None:
    ir = basics.chain_graph().to_ir().model_dump(mode="json")
    ir["nodes"][0]["ref"] = "not_importable_at_all:fn"  # hashing does not import
    Path("g.json").write_text(json.dumps(ir))
    result = sg("hash", "g.json")
    assert result.exit_code == 0
    assert result.stdout.startswith("sha256:")
    Path("broken.json").write_text("{not json")
    result = sg("hash", "broken.json")
    assert result.exit_code == 1
    assert "not valid JSON" in result.stderr


# --------------------------------------------------------------------------- run


def test_run_prints_progress_on_stderr_and_the_final_state_on_stdout() -> None:
    spec = _ir_file(basics.chain_graph())
    result = sg("run", spec, "--input", '{"counter": 10}', "--run-id", "r-1", "--plain")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "counter": 13,
        "items": ["n0", "n1", "n2"],
        "total": 0,
        "limit": 3,
    }
    assert "run r-1 started (graph sha256:" in result.stderr
    assert '[step 1] n0 finished: {"counter": 11, "items": ["n0"]}' in result.stderr
    assert "[step 3] run r-1 finished" in result.stderr
    with SqliteStore(".stargraph/stargraph.db") as store:
        assert store.get_run("r-1").status == "done"


def test_run_quiet_and_custom_db() -> None:
    result = sg("run", "stargraph.examples.basics:loop_graph", "--db", "x/runs.db", "-q")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert json.loads(result.stdout)["counter"] == 3
    assert Path("x/runs.db").is_file()
    assert len(list(Path("x/graphs").glob("*.json"))) == 1  # the IR, archived by hash


@pytest.mark.parametrize(
    ("value", "message"),
    [("{oops", "--input is not valid JSON"), ("[1, 2]", "--input must be a JSON object")],
)
def test_run_rejects_bad_input_as_a_usage_error(value: str, message: str) -> None:
    result = sg("run", "tests.cli.test_cli_commands:chain", "--input", value)
    assert result.exit_code == 2
    assert message in result.stderr


def test_run_input_from_a_file_and_invalid_state() -> None:
    Path("in.json").write_text('{"counter": 5}')
    result = sg("run", "tests.cli.test_cli_commands:chain", "--input", "@in.json", "-q")
    assert json.loads(result.stdout)["counter"] == 8
    result = sg("run", "tests.cli.test_cli_commands:chain", "--input", '{"counter": "many"}', "-q")
    assert result.exit_code == 2  # a usage error: no run was started, none to resume
    _one_paragraph(result)
    assert "no run was started: input of run" in result.stderr
    assert "counter" in result.stderr
    assert "stargraph resume" not in result.stderr
    assert len(json.loads(sg("runs", "--json").stdout)) == 1  # the run from in.json only


def test_interrupted_run_exits_0_and_says_how_to_resume() -> None:
    result = sg(
        "run", "tests.cli.test_cli_commands:approval", "--run-id", "t-1", "--input", '{"value": 2}'
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("run t-1 is waiting: node 'ask' asks ")
    assert '{"question": "approve?", "value": 4}' in result.stdout
    assert (
        "continue it with: stargraph resume t-1 --response JSON "
        "--graph tests.cli.test_cli_commands:approval" in result.stdout
    )


def test_failed_run_exits_1_naming_node_and_resume_command() -> None:
    result = sg(
        "run", "tests.cli.test_cli_commands:fragile", "--run-id", "f-1", "--input", '{"value": -1}'
    )
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "explode" in result.stderr
    assert "negative tickets are not allowed" in result.stderr
    assert "stargraph resume f-1 --graph tests.cli.test_cli_commands:fragile" in result.stderr
    assert "run f-1 failed in explode: NodeError" in result.stderr  # the progress line


def test_run_with_a_taken_run_id_fails() -> None:
    assert sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "dup", "-q").exit_code == 0
    result = sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "dup", "-q")
    assert result.exit_code == 2  # a usage error: the option names a run that exists
    _one_paragraph(result)
    assert "dup" in result.stderr


def test_debug_shows_the_traceback() -> None:
    from stargraph.cli._app import cli

    args = [
        "--debug",
        "run",
        "tests.cli.test_cli_commands:fragile",
        "--input",
        '{"value": -1}',
        "-q",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    assert "RuntimeError: negative tickets are not allowed" in result.stderr


# --------------------------------------------------------------------------- resume


def test_resume_answers_the_interrupt_and_prints_the_final_state() -> None:
    sg(
        "run",
        "tests.cli.test_cli_commands:approval",
        "--run-id",
        "t-1",
        "--input",
        '{"value": 2}',
        "-q",
    )
    result = sg(
        "resume",
        "t-1",
        "--response",
        '"yes"',
        "--graph",
        "tests.cli.test_cli_commands:approval",
        "--plain",
    )
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"value": 4, "answer": "yes"}
    assert "run t-1 resumed" in result.stderr


def test_resume_finds_the_archived_graph_without_graph_option() -> None:
    spec = _ir_file(approval())
    sg("run", spec, "--run-id", "t-2", "-q")
    result = sg("resume", "t-2", "--response", '"ok"', "-q")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {"value": 0, "answer": "ok"}


def test_resume_refuses_an_update_while_a_node_waits_for_its_answer() -> None:
    sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "t-5", "-q")
    result = sg("resume", "t-5", "--response", '"a"', "--update", '{"value": 7}', "-q")
    # An update would commit a step and drop what the node recorded before it asked.
    assert result.exit_code == 1
    assert "answer it with --response alone" in result.stderr


def test_resume_with_another_graph_names_both_hashes() -> None:
    sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "t-3", "-q")
    result = sg(
        "resume", "t-3", "--response", "1", "--graph", "tests.cli.test_cli_commands:other_approval"
    )
    assert result.exit_code == 1
    _one_paragraph(result)
    assert approval().graph_hash in result.stderr
    assert other_approval().graph_hash in result.stderr
    assert "resume it with the graph that made it" in result.stderr


def test_resume_failure_paths() -> None:
    result = sg("resume", "r", "--graph", "tests.cli.test_cli_commands:approval")
    assert result.exit_code == 1
    assert "no run database at .stargraph/stargraph.db" in result.stderr
    sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "t-4", "-q")
    result = sg("resume", "nope", "--graph", "tests.cli.test_cli_commands:approval")
    assert result.exit_code == 1
    assert "'nope'" in result.stderr
    assert "stargraph runs" in result.stderr
    result = sg(
        "resume", "t-4", "--update", "[1]", "--graph", "tests.cli.test_cli_commands:approval"
    )
    assert result.exit_code == 2
    assert "--update must be a JSON object" in result.stderr
    for path in Path(".stargraph/graphs").iterdir():  # the archived IR and the GRAPH argument
        path.unlink()
    # ... and the IR the store keeps: a run stored by a stargraph that kept no graphs.
    with sqlite3.connect(".stargraph/stargraph.db") as conn:
        conn.execute("DELETE FROM graphs")
    result = sg("resume", "t-4", "--response", "1")
    assert result.exit_code == 2
    assert "neither archived beside .stargraph/stargraph.db nor kept in it" in result.stderr
    assert "pass --graph" in result.stderr


def test_resume_of_a_finished_run_fails() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "done-1", "-q")
    result = sg("resume", "done-1", "--graph", "tests.cli.test_cli_commands:chain")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "done-1" in result.stderr


# --------------------------------------------------------------------------- runs


def test_runs_lists_runs_and_filters_by_status() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "c-1", "-q")
    sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "a-1", "-q")
    result = sg("runs")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["RUN", "ID", "GRAPH", "STATUS", "LAST", "STEP", "UPDATED"]
    assert {line.split()[0] for line in lines[1:]} == {"c-1", "a-1"}
    assert "approval" in result.stdout
    assert "interrupted" in result.stdout
    result = sg("runs", "--status", "interrupted")
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == ["a-1"]
    records = json.loads(sg("runs", "--json").stdout)
    assert {r["run_id"]: r["status"] for r in records} == {"c-1": "done", "a-1": "interrupted"}
    result = sg("runs", "--status", "failed")
    assert result.exit_code == 0
    assert "no runs with status failed" in result.stderr


def test_runs_failure_paths() -> None:
    result = sg("runs")
    assert result.exit_code == 1
    assert "no run database" in result.stderr
    assert sg("runs", "--status", "bogus").exit_code == 2


# --------------------------------------------------------------------------- show


def test_show_prints_summary_steps_and_state() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "c-1", "-q")
    result = sg("show", "c-1")
    assert result.exit_code == 0
    out = result.stdout
    assert "status     done" in out
    assert "step 0" in out
    assert "input  -> n0" in out
    assert '    n2: {"counter": 3, "items": ["n2"]}' in out
    assert "state after step 3:" in out
    assert '"counter": 3' in out
    one = sg("show", "c-1", "--step", "1").stdout
    assert "step 1" in one
    assert "step 2" not in one
    assert '"items": [\n    "n0"\n  ]' in one


def test_show_interrupted_run_and_state_without_a_graph() -> None:
    sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "a-1", "-q")
    for path in Path(".stargraph/graphs").glob("*.json"):
        path.unlink()
    with sqlite3.connect(".stargraph/stargraph.db") as conn:  # as stored by an older stargraph
        conn.execute("DELETE FROM graphs")
    out = sg("show", "a-1").stdout
    # The stored interrupt, keys sorted: its derived id first.
    assert 'waiting on {"id": "' in out
    assert '"index": 0, "kind": "node", "node": "ask"' in out
    assert "pass --graph to rebuild the state" in out
    assert '"value": 0' in sg("show", "a-1", "--step", "0").stdout  # step 0 is a snapshot
    out = sg("show", "a-1", "--graph", "tests.cli.test_cli_commands:approval").stdout
    assert '"value": 0' in out


def test_show_failure_paths() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "c-1", "-q")
    result = sg("show", "c-1", "--step", "9")
    assert result.exit_code == 1
    assert "run c-1 has steps 0..3; there is no step 9" in result.stderr
    result = sg("show", "zzz")
    assert result.exit_code == 1
    _one_paragraph(result)


def test_show_html_writes_a_report() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "c-1", "-q")
    result = sg("show", "c-1", "--html", "report.html")
    assert result.exit_code == 0
    html = Path("report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "c-1" in html
    for path in Path(".stargraph/graphs").glob("*.json"):
        path.unlink()
    result = sg("show", "c-1", "--html", "from-store.html")  # the store keeps the IR too
    assert result.exit_code == 0, result.output
    assert Path("from-store.html").read_text() == html
    with sqlite3.connect(".stargraph/stargraph.db") as conn:  # as stored by an older stargraph
        conn.execute("DELETE FROM graphs")
    result = sg("show", "c-1", "--html", "r2.html")
    assert result.exit_code == 2
    assert "pass --graph" in result.stderr
    result = sg("show", "c-1", "--html", "r2.html", "--graph", "tests.cli.test_cli_commands:chain")
    assert result.exit_code == 0
    assert Path("r2.html").is_file()


# --------------------------------------------------------------------------- diff


def test_diff_of_equal_runs_exits_0() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "a", "-q")
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "b", "-q")
    result = sg("diff", "a", "b")
    assert result.exit_code == 0
    assert result.stdout == ""
    assert "runs a and b are the same" in result.stderr


def test_diff_of_different_runs_exits_1_and_names_steps() -> None:
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "a", "-q")
    sg(
        "run",
        "tests.cli.test_cli_commands:chain",
        "--run-id",
        "b",
        "-q",
        "--input",
        '{"counter": 1}',
    )
    sg("run", "tests.cli.test_cli_commands:approval", "--run-id", "c", "-q")
    result = sg("diff", "a", "b")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[:2] == ["--- a", "+++ b"]
    assert "step 0 input counter: A = 0  B = 1" in lines
    assert "step 2 n1 counter: A = 2  B = 3" in lines
    assert "final state counter: A = 3  B = 4" in lines
    result = sg("diff", "a", "c")
    assert result.exit_code == 1
    assert "status: A = done  B = interrupted" in result.stdout
    assert "step 3: only in A (n2)" in result.stdout


def test_diff_trouble_exits_2() -> None:
    assert sg("diff", "a", "b").exit_code == 2  # no database
    sg("run", "tests.cli.test_cli_commands:chain", "--run-id", "a", "-q")
    result = sg("diff", "a", "missing")
    assert result.exit_code == 2
    assert "'missing'" in result.stderr


# --------------------------------------------------------------------------- draw


def test_draw_mermaid_and_dot() -> None:
    result = sg("draw", "stargraph.examples.basics:loop_graph")
    assert result.exit_code == 0
    assert result.stdout.startswith("flowchart TD\n")
    assert 'step -.->|"again"| step' in result.stdout
    spec = _ir_file(basics.fanout_graph())
    result = sg("draw", spec, "--format", "dot", "-o", "g.dot")
    assert result.exit_code == 0
    assert Path("g.dot").read_text().startswith('digraph "fanout" {')


def test_draw_images_without_graphviz_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setattr("stargraph.viz._render.shutil.which", lambda name: None)
    result = sg("draw", "tests.cli.test_cli_commands:chain", "-f", "png", "-o", "g.png")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "apt-get install graphviz" in result.stderr
    assert not Path("g.png").exists()


def test_draw_svg_through_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = tmp_path / "bin" / "dot"
    exe.parent.mkdir()
    exe.write_text('#!/bin/sh\necho "<svg/>"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")
    assert (
        sg("draw", "tests.cli.test_cli_commands:chain", "-f", "svg", "-o", "g.svg").exit_code == 0
    )
    assert Path("g.svg").read_text() == "<svg/>\n"
    assert sg("draw", "tests.cli.test_cli_commands:chain", "-f", "svg").stdout == "<svg/>\n"


def test_draw_usage_errors() -> None:
    assert sg("draw", "tests.cli.test_cli_commands:chain", "-f", "gif").exit_code == 2
    assert sg("draw").exit_code == 2


# --------------------------------------------------------------------------- rules


PACK = """\
; fathom-pack: id=loop version=3
(defrule again
  (sg-step (node "n0"))
  =>
  (assert (sg-decision (kind goto) (target "TARGET") (rule again))))
"""


def test_rules_check_accepts_a_valid_pack() -> None:
    Path("loop.clp").write_text(PACK.replace("TARGET", "n1"))
    result = sg("rules", "check", "loop.clp")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("ok: rule pack loop@3 sha256:")
    result = sg("rules", "check", "loop.clp", "--graph", "tests.cli.test_cli_commands:chain")
    assert result.exit_code == 0, result.stderr


def test_rules_check_failures() -> None:
    Path("bad.clp").write_text("; fathom-pack: id=bad version=1\n(defrule broken (sg-step")
    result = sg("rules", "check", "bad.clp")
    assert result.exit_code == 1
    _one_paragraph(result)
    assert "bad" in result.stderr
    Path("loop.clp").write_text(PACK.replace("TARGET", "n2"))
    result = sg("rules", "check", "loop.clp", "--graph", "tests.cli.test_cli_commands:chain")
    assert result.exit_code == 1
    assert "goto target 'n2' is not a successor of node 'n0'" in result.stderr
    assert sg("rules", "check", "missing.clp").exit_code == 2


def test_unknown_command_is_a_usage_error() -> None:
    result = sg("frobnicate")
    assert result.exit_code == 2
    assert "No such command" in result.stderr
