"""Seams of the run console found by a newcomer, checked on the HTML its routes return: child
skill runs nested under their parent in the runs list, skill clusters labelled in the graph
picture, ``Send`` tasks counted, child runs' model calls totalled on the parent's page, and
status badges that do not wrap."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.examples.basics import mapreduce_graph
from stargraph.graph import END, START, Graph
from stargraph.llm import ChatMessage, ChatRequest
from stargraph.nodes import SubgraphNode
from stargraph.runtime import RunContext
from stargraph.skills import Skill
from stargraph.ui import UiSettings, create_app
from tests.ui.ui_graphs import loop_graph, scripted_model, trip_graph

LOCAL = "http://127.0.0.1:8765"


def _client(store: SqliteStore, apps: list[Any]) -> TestClient:
    return TestClient(create_app(store, graphs=apps, settings=UiSettings()), base_url=LOCAL)


def _rows(page: str) -> list[tuple[str, str]]:
    """``(run id, the row's attributes after data-run)`` of each runs-list row, in order."""
    return re.findall(r'<tr data-run="([^"]+)"([^>]*)>', page)


def test_issue44_child_runs_are_nested_under_their_parent_in_the_runs_list(
    store: SqliteStore,
) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({}, run_id="t1")
    loop = loop_graph().compile(store=store)
    loop.invoke({}, run_id="l1")
    client = _client(store, [trip, loop])
    for path in ("/", "/fragments/runs"):
        rows = _rows(client.get(path).text)
        ids = [run_id for run_id, _ in rows]
        assert sorted(ids) == ["l1", "t1", "t1::hotel@1.0"]
        assert ids.index("t1::hotel@1.0") == ids.index("t1") + 1, ids
        attrs = dict(rows)
        assert 'class="child depth-1" data-parent="t1"' in attrs["t1::hotel@1.0"]
        assert "child" not in attrs["t1"]
        assert "child" not in attrs["l1"]
    # Filtered apart from its parent, a child run is listed on its own.
    rows = _rows(client.get("/?status=done&graph=hotel").text)
    assert rows == [("t1::hotel@1.0", "")]


def test_issue44_skill_clusters_are_labelled_in_the_graph_picture(store: SqliteStore) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({}, run_id="t1")
    page = _client(store, [trip]).get("/runs/t1").text
    cluster = re.search(r'<g class="cluster" data-cluster="hotel">(.*?)</g>', page, re.S)
    assert cluster is not None, page
    label = re.search(r'<text class="cluster-label"[^>]*>([^<]*)</text>', cluster.group(1))
    assert label is not None
    assert label.group(1) == "hotel: hotel@1.0.0"


def test_issue44_send_tasks_are_counted_in_the_graph_picture(store: SqliteStore) -> None:
    """A step with three Send tasks of ``work`` showed ``work`` as run once."""
    app = mapreduce_graph().compile(store=store)
    app.invoke({"limit": 3}, run_id="mr")
    page = _client(store, [app]).get("/runs/mr").text
    work = re.search(r'<g class="node node ran" data-node="work">(.*?)</g>', page, re.S)
    assert work is not None
    detail = re.search(r'<text class="detail"[^>]*>(\d+)x', work.group(1))
    assert detail is not None
    assert detail.group(1) == "3"


class Note(BaseModel):
    text: str = ""
    done: bool = False


def write(state: Note, ctx: RunContext) -> dict[str, Any]:
    reply = ctx.services["model"].complete(ChatRequest(messages=(ChatMessage.user("note?"),)))
    return {"text": reply.message.content or ""}


def finish(state: Note) -> dict[str, Any]:
    return {"done": True}


def noting_graph() -> Graph[Note]:
    """A parent whose ``writer`` skill calls the model in its child run, twice over (a
    loop back through the skill), and once more in a node of its own."""
    child = Graph("writer", state=Note).with_node("write", write).with_edge(START, "write")
    skill = Skill.from_graph(
        child.with_edge("write", END),
        name="writer",
        version="1.0.0",
        kind="workflow",
        description="write a note with the model",
        state_schema=Note,
    )
    return (
        Graph("noting", state=Note)
        .with_node(SubgraphNode.from_skill(skill, site="writer"))
        .with_node(SubgraphNode.from_skill(skill, site="again"))
        .with_node("own", write)
        .with_node("finish", finish)
        .with_edge(START, "writer")
        .with_edge("writer", "again")
        .with_edge("again", "own")
        .with_edge("own", "finish")
        .with_edge("finish", END)
    )


def test_issue44_the_parent_page_totals_model_calls_of_its_child_runs(
    store: SqliteStore,
) -> None:
    """The parent's page counted only its own model calls: a skill's calls, made in its
    child run, were missing from the run's totals."""
    app = noting_graph().compile(store=store, services={"model": scripted_model()})
    app.invoke({}, run_id="n1")
    page = _client(store, [app]).get("/runs/n1").text
    own = re.search(r"<th>model calls</th><td>(\d+) ", page)
    assert own is not None
    assert own.group(1) == "1"
    family = re.search(r'<span id="family-totals">([^<]*)</span>', page)
    assert family is not None, page
    assert family.group(1) == (
        "3 model calls (360 prompt + 90 completion tokens), 0 tool calls, over this run and "
        "its 2 child runs"
    )


def test_issue44_status_badges_do_not_wrap(store: SqliteStore) -> None:
    """The runs table's narrow status column broke "interrupted" inside the word (every cell
    may break anywhere)."""
    css = _client(store, []).get("/static/ui.css").text
    rule = re.search(r"(?:^|[}\n])\.status\{([^}]*)\}", css)
    assert rule is not None
    assert "white-space:nowrap" in rule.group(1)
    assert "overflow-wrap:normal" in rule.group(1)
