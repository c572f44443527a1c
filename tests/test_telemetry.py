"""Observability plugins: OpenTelemetry spans (in-memory exporter) and JSON-lines events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import fathom
from stargraph.checkpoint import MemoryStore
from stargraph.errors import NodeError, ToolError
from stargraph.examples import basics
from stargraph.graph import END, START, Graph
from stargraph.nodes import SubgraphNode
from stargraph.plugin import Registry, get_plugin_manager
from stargraph.runtime import RunContext
from stargraph.telemetry import JsonLinesObserver, OtelObserver
from stargraph.tools import Arbiter, ToolCall, ToolRegistry, tool


@tool(id="demo.echo@1.0.0", side_effect="none")
def echo(text: str) -> str:
    """Echo the text."""
    return f"echo {text}"


@tool(id="demo.fail@1.0.0", side_effect="none")
def fail() -> str:
    """Always fails."""
    raise ValueError("tool broke")


class Box(BaseModel):
    counter: int = 0
    items: list[str] = []
    total: int = 0
    limit: int = 3
    said: str = ""


def speak(state: Box, ctx: RunContext) -> dict[str, Any]:
    arbiter: Arbiter = ctx.services["arbiter"]
    result = arbiter.dispatch(ToolCall(tool="demo.echo", args={"text": "hi"}, node=ctx.node))
    return {"said": result.summary}


def ask(state: Box, ctx: RunContext) -> dict[str, Any]:
    return {"said": str(ctx.interrupt({"question": "ok?"}))}


def explode(state: Box) -> dict[str, Any]:
    raise RuntimeError("node broke")


def _outer() -> Graph[Box]:
    """``speak`` (one tool call) -> ``inner`` (a two-node child graph) -> END."""
    child = Graph("inner", state=Box)
    child = child.with_node("n0", basics.bump).with_node("n1", basics.bump)
    child = child.with_edge(START, "n0").with_edge("n0", "n1").with_edge("n1", END)
    return (
        Graph("outer", state=Box)
        .with_node("speak", speak)
        .with_node(SubgraphNode(node_id="inner", child=child.to_ir()))
        .with_edge(START, "speak")
        .with_edge("speak", "inner")
        .with_edge("inner", END)
    )


def _arbiter(pm: Any, tmp_path: Path) -> Arbiter:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    registry = ToolRegistry.build(builtins=[echo, fail])
    return Arbiter(
        registry,
        workspace=workspace,
        before_call=lambda call: pm.hook.before_tool_call(call=call),
        after_call=lambda call, result, error: pm.hook.after_tool_call(
            call=call, result=result, error=error
        ),
    )


# --------------------------------------------------------------------------- OpenTelemetry


class Otel:
    def __init__(self) -> None:
        # The SDK is in the dev extra: a missing one fails the suite, it never skips it.
        import importlib

        sdk_trace = importlib.import_module("opentelemetry.sdk.trace")
        export = importlib.import_module("opentelemetry.sdk.trace.export")
        memory = importlib.import_module("opentelemetry.sdk.trace.export.in_memory_span_exporter")
        self.exporter = memory.InMemorySpanExporter()
        self.provider = sdk_trace.TracerProvider()
        self.provider.add_span_processor(export.SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[Any]:
        return [s for s in self.spans() if s.name == name]

    def one(self, name: str) -> Any:
        [span] = self.named(name)
        return span


@pytest.fixture
def otel() -> Iterator[Otel]:
    found = Otel()
    yield found
    found.provider.shutdown()


def test_spans_nest_run_step_node_tool_and_subgraph_run(otel: Otel, tmp_path: Path) -> None:
    observer = OtelObserver(otel.provider, workflow="outer")
    pm = get_plugin_manager(plugins=[observer], entry_points=False)
    with _arbiter(pm, tmp_path) as arbiter:
        app = _outer().compile(plugins=pm, services={"arbiter": arbiter})
        final = app.invoke({}, run_id="r1")
    assert final.said == "echo hi"
    assert final.counter == 2
    runs = otel.named("invoke_workflow outer")
    assert len(runs) == 2  # the root run and the subgraph's run, each once
    root = next(s for s in runs if s.attributes["stargraph.run_id"] == "r1")
    child = next(s for s in runs if s is not root)
    assert root.parent is None
    assert root.attributes["gen_ai.operation.name"] == "invoke_workflow"
    assert root.attributes["gen_ai.workflow.name"] == "outer"
    assert root.attributes["gen_ai.conversation.id"] == "r1"
    assert root.attributes["stargraph.graph_hash"] == app.graph_hash
    assert root.attributes["stargraph.status"] == "done"
    assert root.status.status_code.name == "OK"
    by_id = {s.context.span_id: s for s in otel.spans()}

    def parent(span: Any) -> Any:
        return by_id[span.parent.span_id]

    # root run > step 1 > node speak > execute_tool demo.echo
    tool_span = otel.one("execute_tool demo.echo")
    assert tool_span.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool_span.attributes["gen_ai.tool.name"] == "demo.echo"
    assert tool_span.attributes["stargraph.tool.id"] == "demo.echo@1.0.0"
    assert tool_span.attributes["stargraph.tool.status"] == "success"
    assert "gen_ai.tool.call.arguments" not in tool_span.attributes  # content is opt-in
    speak_span = parent(tool_span)
    assert speak_span.name == "node speak"
    assert speak_span.attributes["stargraph.node.writes"] == ("said",)
    assert parent(speak_span).name == "step 1"
    assert parent(parent(speak_span)) is root
    # The subgraph's run nests under the node that ran it, with its own steps and nodes.
    inner_node = otel.one("node inner")
    assert parent(child) is inner_node
    assert child.attributes["stargraph.path"] == ("inner",)
    assert parent(parent(inner_node)) is root
    child_nodes = [s for s in otel.spans() if s.name in ("node n0", "node n1")]
    assert len(child_nodes) == 2
    assert all(parent(parent(s)) is child for s in child_nodes)
    # Every span is well formed: ended, and inside its parent's time.
    for span in otel.spans():
        assert span.end_time is not None
        if span.parent is not None:
            up = parent(span)
            assert up.start_time <= span.start_time <= span.end_time <= up.end_time


def test_issue44_halted_run_span_says_halted_and_why(otel: Otel) -> None:
    cycle = fathom.RulePack.from_spec(
        {
            "id": "cycle",
            "version": "1",
            "rules": [{"name": "again", "when": [{"node": "step"}], "then": {"goto": "step"}}],
        }
    )
    pm = get_plugin_manager(plugins=[OtelObserver(otel.provider)], entry_points=False)
    graph = basics.loop_graph().with_rules(cycle, fathom.default_termination_pack(3, 2))
    graph.compile(plugins=pm).invoke({"limit": 100}, run_id="r")
    run = otel.one("invoke_workflow")
    assert run.attributes["stargraph.status"] == "halted"
    assert run.attributes["stargraph.stop_reason"] == "max_steps_exceeded"


def test_rule_decisions_are_span_events(otel: Otel) -> None:
    cycle = fathom.RulePack.from_spec(
        {
            "id": "cycle",
            "version": "1",
            "rules": [{"name": "again", "when": [{"node": "step"}], "then": {"goto": "step"}}],
        }
    )
    observer = OtelObserver(otel.provider)
    pm = get_plugin_manager(plugins=[observer], entry_points=False)
    graph = basics.loop_graph().with_rules(cycle, fathom.default_termination_pack(3, 2))
    graph.compile(plugins=pm).invoke({"limit": 100}, run_id="r")
    run = otel.one("invoke_workflow")
    assert run.attributes["stargraph.stopped_by"] == "termination/max_steps"
    decisions = [
        (e.attributes["stargraph.rule.decision"], e.attributes["stargraph.rule.name"])
        for s in otel.spans()
        for e in s.events
        if e.name == "rule_decided"
    ]
    assert decisions == [
        ("goto", "cycle/again"),
        ("goto", "cycle/again"),
        ("halt", "termination/max_steps"),
    ]
    assert len(otel.named("node step")) == 3


def test_a_failed_run_and_a_failed_tool_are_errors(otel: Otel, tmp_path: Path) -> None:
    observer = OtelObserver(otel.provider, capture_content=True)
    pm = get_plugin_manager(plugins=[observer], entry_points=False)
    app = (
        Graph("bad", state=Box)
        .with_node("explode", explode)
        .with_edge(START, "explode")
        .with_edge("explode", END)
        .compile(plugins=pm)
    )
    with pytest.raises(NodeError):
        app.invoke({}, run_id="bad")
    run = otel.one("invoke_workflow")
    assert run.status.status_code.name == "ERROR"
    assert run.attributes["stargraph.status"] == "failed"
    assert "node broke" in run.status.description
    assert otel.one("node explode").status.status_code.name == "ERROR"

    with _arbiter(pm, tmp_path) as arbiter:
        with pytest.raises(ToolError):
            arbiter.dispatch(ToolCall(tool="demo.fail", call_id="c-1"))
        arbiter.dispatch(ToolCall(tool="demo.echo", args={"text": "x"}, call_id="c-2"))
    failed = otel.one("execute_tool demo.fail")
    assert failed.parent is None  # called outside any run
    assert failed.status.status_code.name == "ERROR"
    assert failed.attributes["gen_ai.tool.call.id"] == "c-1"
    assert "error.type" in failed.attributes
    ok = otel.one("execute_tool demo.echo")
    assert json.loads(ok.attributes["gen_ai.tool.call.arguments"]) == {"text": "x"}
    assert json.loads(ok.attributes["gen_ai.tool.call.result"])["summary"] == "echo x"


def test_interrupted_run_ends_its_span_and_close_ends_the_rest(otel: Otel) -> None:
    observer = OtelObserver(otel.provider)
    pm = get_plugin_manager(plugins=[observer], entry_points=False)
    app = (
        Graph("ask", state=Box)
        .with_node("ask", ask)
        .with_edge(START, "ask")
        .with_edge("ask", END)
        .compile(plugins=pm, store=MemoryStore())
    )
    app.invoke({}, run_id="w")
    run = otel.one("invoke_workflow")
    assert run.attributes["stargraph.status"] == "interrupted"
    assert [e.name for e in run.events] == ["run_interrupted"]
    # A tool call that never returned is ended by close().
    observer.before_tool_call(ToolCall(tool="demo.echo", args={"text": "x"}))
    observer.close()
    assert otel.named("execute_tool demo.echo")


def test_plugin_registry_arbiter_reaches_the_tool_hooks(otel: Otel, tmp_path: Path) -> None:
    observer = OtelObserver(otel.provider)
    pm = get_plugin_manager(plugins=[observer], entry_points=False)
    (tmp_path / "ws").mkdir()
    with Registry.build(pm).arbiter(tmp_path / "ws") as arbiter:
        arbiter.dispatch(ToolCall(tool="choir.fs.write", args={"path": "a.txt", "content": "x"}))
    assert otel.named("execute_tool choir.fs.write")


def test_without_the_sdk_the_observer_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins

    real = builtins.__import__

    def no_otel(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("opentelemetry"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    monkeypatch.setattr("importlib.import_module", no_otel)
    with pytest.raises(ImportError, match=r"pip install 'stargraph\[otel\]'"):
        OtelObserver()


# --------------------------------------------------------------------------- JSON lines


def test_json_lines_hold_every_event_once_and_every_tool_call(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "events.jsonl"
    with JsonLinesObserver(path) as observer:
        pm = get_plugin_manager(plugins=[observer], entry_points=False)
        with _arbiter(pm, tmp_path) as arbiter:
            app = _outer().compile(plugins=pm, services={"arbiter": arbiter})
            events = list(app.stream({}, run_id="r1"))
            with pytest.raises(ToolError):
                arbiter.dispatch(ToolCall(tool="demo.fail"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(isinstance(line.pop("ts_ms"), int) for line in lines)
    run_lines = [line for line in lines if not line["kind"].startswith("tool_")]
    # The root stream bubbles the subgraph's events up; the log has each exactly once.
    assert len(run_lines) == len({json.dumps(line, sort_keys=True) for line in run_lines})
    assert [(line["kind"], line["run_id"]) for line in run_lines if not line["path"]][:3] == [
        ("run_started", "r1"),
        ("node_started", "r1"),
        ("node_finished", "r1"),
    ]
    streamed = [e.model_dump(mode="json") for e in events]
    assert all(e in run_lines for e in streamed)
    tools = [line for line in lines if line["kind"].startswith("tool_")]
    assert [(t["kind"], t["tool"], t.get("status")) for t in tools] == [
        ("tool_call", "demo.echo", None),
        ("tool_result", "demo.echo", "success"),
        ("tool_call", "demo.fail", None),
        ("tool_result", "demo.fail", "error"),
    ]
    assert tools[0]["args"] == {"text": "hi"}
    assert tools[0]["node"] == "speak"
    assert tools[1]["summary"] == "echo hi"
    assert "tool broke" in tools[3]["error"]
    # Appends: a second observer on the same file adds lines.
    with JsonLinesObserver(path) as again:
        again.on_event(events[0])
    assert len(path.read_text().splitlines()) == len(lines) + 1
