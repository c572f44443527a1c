"""The static HTML run report and PNG/SVG rendering through Graphviz."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import fathom, viz
from stargraph.checkpoint import SqliteStore
from stargraph.errors import NodeError, RunNotFoundError, StargraphError
from stargraph.examples import basics
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext

EVIL = "<script>alert('x')</script>"


class Note(BaseModel):
    text: str = ""
    log: list[str] = []


def write(state: Note) -> dict[str, Any]:
    return {"text": EVIL, "log": [*state.log, EVIL]}


def ask(state: Note, ctx: RunContext) -> dict[str, Any]:
    answer = ctx.interrupt({"question": EVIL})
    return {"text": str(answer)}


def explode(state: Note) -> dict[str, Any]:
    raise RuntimeError(f"boom {EVIL}")


def _graph(*nodes: tuple[str, Any]) -> Graph[Note]:
    graph = Graph("report", state=Note)
    names = [n for n, _ in nodes]
    for name, fn in nodes:
        graph = graph.with_node(name, fn)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)


@pytest.fixture
def no_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stargraph.viz._render.shutil.which", lambda name: None)


def _no_external_urls(html: str) -> None:
    # Namespace URIs inside inline SVG are identifiers, never fetched.
    fetched = re.findall(r"""(?:src|href)\s*=\s*["']?([^"' >]+)""", html)
    assert [u for u in fetched if not u.startswith("#")] == []
    assert "<script" not in html
    assert "<link" not in html


def test_report_escapes_user_content_everywhere(store: SqliteStore, no_dot: None) -> None:
    app = _graph(("write", write), ("ask", ask)).compile(store=store)
    app.invoke({}, run_id=EVIL)
    html = viz.html_report(app.ir, store, EVIL)
    assert EVIL not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    _no_external_urls(html)
    # Sections a reader looks for.
    for heading in ("Summary", "Graph", "Steps", "State at step 1", "Rule decisions", "Interrupt"):
        assert f">{heading}<" in html
    assert "interrupted" in html
    assert "&quot;question&quot;" in html  # the interrupt payload


def test_report_of_a_finished_run_has_timeline_state_and_mermaid(
    store: SqliteStore, no_dot: None
) -> None:
    app = basics.chain_graph().compile(store=store)
    app.invoke({}, run_id="r-1")
    html = viz.html_report(app.ir, store, "r-1")
    assert '<pre class="mermaid-source">flowchart TD' in html
    assert "Graphviz is not installed" in html
    rows = re.findall(r"<tr><td>(\d+)</td><td>([^<]+)</td>", html)
    assert [r[0] for r in rows] == ["0", "1", "2", "3"]
    assert all(re.match(r"\d{4}-\d\d-\d\dT", t) for _, t in rows)
    assert "&quot;counter&quot;: 3" in html
    assert "The run is not waiting on anything." in html
    assert "No rule decisions were recorded" in html
    _no_external_urls(html)


def test_report_of_a_failed_run_shows_the_error(store: SqliteStore, no_dot: None) -> None:
    app = _graph(("explode", explode)).compile(store=store)
    with pytest.raises(NodeError):
        app.invoke({}, run_id="bad")
    html = viz.html_report(app.ir, store, "bad")
    assert 'class="status-failed"' in html
    assert "boom &lt;script&gt;" in html


class Looping(BaseModel):
    log: list[str] = []
    done: bool = False


def tick(state: Looping) -> dict[str, Any]:
    return {"log": [*state.log, "t"]}


def test_report_names_the_rule_that_halted_the_run(store: SqliteStore, no_dot: None) -> None:
    cycle = fathom.RulePack.from_spec(
        {
            "id": "cycle",
            "version": "1",
            "rules": [{"name": "again", "when": [{"node": "tick"}], "then": {"goto": "tick"}}],
        }
    )
    app = (
        Graph("ticker", state=Looping)
        .with_node("tick", tick)
        .with_edge(START, "tick")
        .with_conditional_edges("tick", _stay, {"again": "tick", "stop": END})
        .with_rules(cycle, fathom.default_termination_pack(max_steps=3, error_budget=2))
        .compile(store=store)
    )
    app.invoke({}, run_id="rules")
    html = viz.html_report(app.ir, store, "rules")
    assert "run halted by rule <code>termination/max_steps</code>: max_steps_exceeded" in html


def test_issue44_report_says_halted_with_reason(store: SqliteStore, no_dot: None) -> None:
    app = _ticker(store)
    app.invoke({}, run_id="rules")
    html = viz.html_report(app.ir, store, "rules")
    assert '<span class="status-halted">halted</span>' in html
    assert ".status-halted{color:#bc4c00}" in html
    assert "<tr><th>reason</th><td>max_steps_exceeded</td></tr>" in html


def test_report_lists_the_rule_decisions_of_every_step(store: SqliteStore, no_dot: None) -> None:
    # The edges alone would stop after one step: two gotos keep the run going, then the
    # termination pack halts it. Each decision is read from its step record.
    app = _ticker(store)
    app.invoke({}, run_id="rules")
    html = viz.html_report(app.ir, store, "rules")
    assert "No rule decisions were recorded" not in html
    table = re.search(r'<table class="decisions">(.*?)</table>', html, re.S)
    assert table is not None
    rows = re.findall(
        r"<tr><td>(\d+)</td><td>([^<]*)</td><td><code>([^<]*)</code></td>"
        r"<td>([^<]*)</td><td>([^<]*)</td></tr>",
        table.group(1),
    )
    assert rows == [
        ("1", "goto", "cycle/again", "tick", "-"),
        ("2", "goto", "cycle/again", "tick", "-"),
        ("3", "halt", "termination/max_steps", "-", "max_steps_exceeded"),
    ]
    views = viz.step_views(store, "rules")
    assert views[0].decision is None
    decision = views[1].decision
    assert decision is not None
    assert (decision.kind, decision.rule, decision.targets, decision.reason) == (
        "goto",
        "cycle/again",
        ("tick",),
        None,
    )


def test_report_shows_a_goto_of_a_run_no_rule_halted(store: SqliteStore, no_dot: None) -> None:
    # A goto once, then the edges end the run: nothing on the run record names a rule, so
    # only the step records can tell the report what happened.
    once = fathom.RulePack.from_spec(
        {
            "id": "once",
            "version": "1",
            "rules": [{"name": "again", "when": [{"step": {"<": 2}}], "then": {"goto": "tick"}}],
        }
    )
    app = (
        Graph("ticker", state=Looping)
        .with_node("tick", tick)
        .with_edge(START, "tick")
        .with_conditional_edges("tick", _stay, {"again": "tick", "stop": END})
        .with_rules(once)
        .compile(store=store)
    )
    assert app.invoke({}, run_id="once").log == ["t", "t"]
    assert store.get_run("once").stopped_by is None
    html = viz.html_report(app.ir, store, "once")
    assert "No rule decisions were recorded" not in html
    assert "<tr><td>1</td><td>goto</td><td><code>once/again</code></td><td>tick</td>" in html


def _ticker(store: SqliteStore) -> Any:
    cycle = fathom.RulePack.from_spec(
        {
            "id": "cycle",
            "version": "1",
            "rules": [{"name": "again", "when": [{"node": "tick"}], "then": {"goto": "tick"}}],
        }
    )
    return (
        Graph("ticker", state=Looping)
        .with_node("tick", tick)
        .with_edge(START, "tick")
        .with_conditional_edges("tick", _stay, {"again": "tick", "stop": END})
        .with_rules(cycle, fathom.default_termination_pack(max_steps=3, error_budget=2))
        .compile(store=store)
    )


def _stay(state: Looping) -> str:
    return "stop"


def test_report_of_a_missing_run_raises(store: SqliteStore) -> None:
    with pytest.raises(RunNotFoundError):
        viz.html_report(basics.chain_graph().to_ir(), store, "nope")


def test_report_with_an_unimportable_state_model_still_renders(
    store: SqliteStore, no_dot: None
) -> None:
    app = basics.chain_graph().compile(store=store)
    app.invoke({}, run_id="r")
    ir = app.ir.model_copy(update={"state": app.ir.state.model_copy(update={"ref": "nope:X"})})
    html = viz.html_report(ir, store, "r")
    assert "state unavailable: graph" in html


def test_render_without_graphviz_says_how_to_install_it(no_dot: None) -> None:
    with pytest.raises(viz.GraphvizNotFoundError, match="apt-get install graphviz") as info:
        viz.render(basics.chain_graph().to_ir(), "png")
    assert isinstance(info.value, StargraphError)
    assert not viz.graphviz_available()


def test_render_rejects_unknown_formats() -> None:
    with pytest.raises(StargraphError, match="use 'png' or 'svg'"):
        viz.render(basics.chain_graph().to_ir(), "gif")  # type: ignore[arg-type]


@pytest.mark.graphviz
def test_render_svg_and_png_with_graphviz(store: SqliteStore) -> None:
    ir = basics.fanout_graph().to_ir()
    assert viz.render(ir, "svg").lstrip().startswith(b"<?xml")
    assert viz.render(ir, "png").startswith(b"\x89PNG")
    app = basics.chain_graph().compile(store=store)
    app.invoke({}, run_id="r")
    html = viz.html_report(app.ir, store, "r")
    assert '<div class="picture"><svg' in html
    _no_external_urls(html)


def test_format_ms() -> None:
    assert viz.format_ms(0) == "-"
    assert viz.format_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123+00:00"


def _fake_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    exe = tmp_path / "dot"
    exe.write_text(f"#!/bin/sh\n{script}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_render_pipes_dot_text_through_the_dot_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: SqliteStore
) -> None:
    # A stand-in `dot` that wraps its input in an SVG: checks the plumbing without Graphviz.
    _fake_dot(
        tmp_path,
        monkeypatch,
        'echo \'<?xml version="1.0"?>\'; echo "<svg><!--"; cat; echo "--></svg>"',
    )
    ir = basics.chain_graph().to_ir()
    out = viz.render(ir, "svg").decode()
    assert out.startswith("<?xml")
    assert 'digraph "chain"' in out
    app = basics.chain_graph().compile(store=store)
    app.invoke({}, run_id="r")
    html = viz.html_report(app.ir, store, "r")
    assert '<div class="picture"><svg><!--' in html
    assert "<?xml" not in html


def test_render_reports_a_failing_dot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_dot(tmp_path, monkeypatch, "echo 'syntax error in line 1' >&2; exit 3")
    with pytest.raises(StargraphError, match=r"`dot` failed .* \(exit 3\): syntax error"):
        viz.render(basics.chain_graph().to_ir(), "png")
