"""Closures, factory products and lambdas as nodes: hashed by code and captures, rebuilt by
their factory in another process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from stargraph import END, START, Graph
from stargraph.errors import CompileError, UnreferenceableNodeError
from stargraph.ir import ClosureIR, FunctionNodeIR, GraphIR
from tests.compile.closurenodes import Talk, agent_graph, factory_graph, make_agent, shout

ROOT = Path(__file__).resolve().parents[2]


def _other_process(code: str, seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_issue46_closure_node_runs_and_its_hash_covers_captured_values() -> None:
    assert agent_graph("bob").compile().invoke({"text": "hi"}).out == "bob: hi."
    assert agent_graph("bob").graph_hash == agent_graph("bob").graph_hash
    assert agent_graph("bob").graph_hash != agent_graph("ada").graph_hash
    excited = Graph("talk", state=Talk).with_node("a", make_agent("bob", excited=True))
    assert (
        excited.with_edge(START, "a").with_edge("a", END).graph_hash
        != agent_graph("bob").graph_hash
    )


def test_issue46_closure_hash_is_the_same_in_another_process() -> None:
    code = (
        "from tests.compile.closurenodes import agent_graph, factory_graph\n"
        "print(agent_graph('bob').graph_hash, factory_graph('bob').graph_hash)"
    )
    here = f"{agent_graph('bob').graph_hash} {factory_graph('bob').graph_hash}"
    assert _other_process(code, "1") == here
    assert _other_process(code, "2") == here


def test_issue46_factory_rebuilds_the_closure_from_the_ir_in_another_process() -> None:
    text = factory_graph("ada").to_ir().to_json()
    node = GraphIR.from_json(text).nodes[0]
    assert isinstance(node, FunctionNodeIR)
    assert node.closure is not None
    assert (node.closure.factory, node.closure.args) == (
        "tests.compile.closurenodes:make_agent",
        {"name": "ada"},
    )
    code = (
        "import sys\nfrom stargraph import Graph\nfrom stargraph.ir import GraphIR\n"
        "ir = GraphIR.from_json(sys.argv[1])\n"
        "print(ir.graph_hash, Graph(ir).compile().invoke({'text': 'yo'}).out)"
    )
    out = _other_process(code.replace("sys.argv[1]", repr(text)), "3")
    assert out == f"{factory_graph('ada').graph_hash} ada: yo."


def test_issue46_a_closure_without_factory_is_refused_where_it_cannot_be_built() -> None:
    ir = agent_graph("bob").to_ir()
    with pytest.raises(CompileError) as info:
        Graph(GraphIR.from_json(ir.to_json())).compile()
    message = str(info.value)
    assert "node 'a' is a closure" in message
    assert "records no factory" in message
    assert "factory=(make_fn, {json keyword args})" in message


def test_issue46_a_factory_that_builds_something_else_now_is_refused() -> None:
    ir = factory_graph("bob").to_ir()
    node = ir.nodes[0]
    assert isinstance(node, FunctionNodeIR)
    assert node.closure is not None
    stale = node.model_copy(
        update={"closure": ClosureIR(**{**node.closure.model_dump(), "code": "sha256:" + "0" * 64})}
    )
    with pytest.raises(CompileError, match="builds a different closure here"):
        Graph(ir.model_copy(update={"nodes": (stale,)})).compile()


def test_issue46_an_unhashable_capture_is_refused_naming_the_variable() -> None:
    lock = threading.Lock()

    def guarded(state: Talk) -> dict[str, Any]:
        with lock:
            return {"out": state.text}

    with pytest.raises(UnreferenceableNodeError) as info:
        Graph("g", state=Talk).with_node("a", guarded)
    message = str(info.value)
    assert "captured variable 'lock'" in message
    assert "__stargraph_identity__" in message
    # Naming the callable yourself is still the way out, as before.
    graph = Graph("g", state=Talk).with_node("a", guarded, ref="tests.guarded")
    assert (
        graph.with_edge(START, "a").with_edge("a", END).compile().invoke({"text": "x"}).out == "x"
    )


class Tone:
    """A captured object that says what it is."""

    def __init__(self, word: str) -> None:
        self.word = word

    def __stargraph_identity__(self) -> dict[str, str]:
        return {"word": self.word}


def _toned(tone: Tone) -> Graph[Talk]:
    def speak(state: Talk) -> dict[str, Any]:
        return {"out": f"{state.text} {tone.word}"}

    return Graph("tone", state=Talk).with_node("a", speak).with_edge(START, "a").with_edge("a", END)


def test_issue46_captured_objects_declare_their_identity() -> None:
    assert _toned(Tone("softly")).graph_hash == _toned(Tone("softly")).graph_hash
    assert _toned(Tone("softly")).graph_hash != _toned(Tone("loudly")).graph_hash
    assert _toned(Tone("softly")).compile().invoke({"text": "hi"}).out == "hi softly"


def test_issue46_closure_hash_covers_its_code() -> None:
    def one(state: Talk) -> dict[str, Any]:
        return {"out": "1"}

    def two(state: Talk) -> dict[str, Any]:
        return {"out": "2"}

    def graph(fn: Any) -> str:
        return Graph("code", state=Talk).with_node("a", fn).graph_hash

    assert graph(one) != graph(two)


def test_issue46_module_level_lambda_is_imported_by_its_name() -> None:
    ir = (
        Graph("s", state=Talk)
        .with_node("a", shout)
        .with_edge(START, "a")
        .with_edge("a", END)
        .to_ir()
    )
    assert isinstance(ir.nodes[0], FunctionNodeIR)
    assert ir.nodes[0].ref == "tests.compile.closurenodes:shout"
    reloaded: Any = Graph(GraphIR.from_json(ir.to_json())).compile()
    assert reloaded.invoke({"text": "hi"}).out == "HI"


def _with_tool(tool: Any, graph: Any) -> str:
    def use(state: Talk) -> dict[str, Any]:
        _ = (tool, graph)  # captured for what they are, not called here
        return {}

    return Graph("tools", state=Talk).with_node("a", use).with_edge(START, "a").graph_hash


def test_issue46_captured_tools_and_graphs_are_hashed_by_what_they_are() -> None:
    from tests.grid.features import lookup, multiply

    assert _with_tool(lookup, agent_graph("bob")) == _with_tool(lookup, agent_graph("bob"))
    assert _with_tool(lookup, agent_graph("bob")) != _with_tool(multiply, agent_graph("bob"))
    assert _with_tool(lookup, agent_graph("bob")) != _with_tool(lookup, agent_graph("ada"))
    compiled = agent_graph("bob").compile()
    assert _with_tool(lookup.spec, compiled) == _with_tool(lookup.spec, agent_graph("bob"))


_CLI = "import sys; from stargraph.cli import main; sys.argv[0] = 'stargraph'; sys.exit(main())"


def _cli_resume(db: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-c", _CLI, "resume", run_id, "--db", str(db), "-q"],
        check=False,
        cwd=db.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("factory", [False, True])
def test_issue46_stargraph_resume_rebuilds_a_factory_closure_or_asks_for_one(
    tmp_path: Path, factory: bool
) -> None:
    from stargraph.checkpoint import SqliteStore
    from tests.compile.closurenodes import paused_graph

    db = tmp_path / "runs.db"
    app = paused_graph(factory).compile(store=SqliteStore(db))
    app.invoke({"text": "hi"}, run_id="paused")
    done = _cli_resume(db, "paused")
    if factory:
        assert done.returncode == 0, done.stderr
        assert SqliteStore(db).get_run("paused").status == "done"
    else:
        assert done.returncode != 0
        assert "node 'a' is a closure" in done.stderr
        assert "factory=(make_fn, {json keyword args})" in done.stderr


def test_issue46_a_router_may_be_a_closure_or_a_factory_product() -> None:
    from tests.compile.closurenodes import routed_graph

    assert routed_graph("hey").compile().invoke({"text": "hey you"}).out == "LOUD"
    assert routed_graph("hey", factory=False).compile().invoke({"text": "you"}).out == "quiet"
    assert routed_graph("hey").graph_hash != routed_graph("yo").graph_hash
    assert routed_graph("hey", factory=False).graph_hash != routed_graph("yo", False).graph_hash
    rebuilt: Any = Graph(GraphIR.from_json(routed_graph("yo").to_ir().to_json())).compile()
    assert rebuilt.invoke({"text": "yo"}).out == "LOUD"
    with pytest.raises(CompileError, match="router of 'start' is a closure"):
        Graph(GraphIR.from_json(routed_graph("yo", factory=False).to_ir().to_json())).compile()
