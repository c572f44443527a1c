"""Forks and resumes whose update is routed as a node wrote it (``as_node=``)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel

from stargraph import fathom, reducers
from stargraph.checkpoint import CheckpointStore
from stargraph.errors import InvalidInputError
from stargraph.graph import END, START, Graph, Send
from stargraph.runtime import NodeStarted

pytestmark = pytest.mark.stores("memory", "sqlite")


class Ticket(BaseModel):
    text: str = ""
    category: Annotated[str, fathom.Fact()] = ""
    log: Annotated[list[str], reducers.append] = []
    items: list[str] = []
    done: Annotated[list[str], reducers.append] = []


def classify(state: Ticket) -> dict[str, Any]:
    return {"category": "spam" if "win" in state.text else "billing", "log": ["classify"]}


def route(state: Ticket) -> Literal["spam", "other"]:
    return "spam" if state.category == "spam" else "other"


def investigate(state: Ticket) -> dict[str, Any]:
    return {"log": ["investigate"]}


def discard(state: Ticket) -> dict[str, Any]:
    return {"log": ["discard"]}


def triage(*, pause: bool = False) -> Graph[Ticket]:
    return (
        Graph("triage", state=Ticket)
        .with_node("classify", classify, interrupt_after=pause)
        .with_node("investigate", investigate)
        .with_node("discard", discard)
        .with_edge(START, "classify")
        .with_conditional_edges("classify", route, {"spam": "discard", "other": "investigate"})
        .with_edge("investigate", END)
        .with_edge("discard", END)
    )


def test_issue44_fork_as_node_reroutes_from_the_edited_state(store: CheckpointStore) -> None:
    app = triage().compile(store=store)
    assert app.invoke({"text": "my invoice is wrong"}, run_id="t").log == [
        "classify",
        "investigate",
    ]
    fork_id = app.fork("t", 1, update={"category": "spam"}, as_node="classify")
    assert [t.node for t in app.history(fork_id)[-1].next] == ["discard"]
    final = app.resume(fork_id)
    assert final.log == ["classify", "discard"]
    assert final.category == "spam"
    # The edit stays recorded as the engine's, not as a second run of classify.
    assert [w.node for w in app.history(fork_id)[2].writes] == ["__update__"]


def test_issue44_fork_without_as_node_keeps_routing(store: CheckpointStore) -> None:
    app = triage().compile(store=store)
    app.invoke({"text": "my invoice is wrong"}, run_id="t")
    fork_id = app.fork("t", 1, update={"category": "spam"})
    assert app.resume(fork_id).log == ["classify", "investigate"]


def test_issue44_fork_as_node_replays_offline(store: CheckpointStore) -> None:
    app = triage().compile(store=store)
    app.invoke({"text": "my invoice is wrong"}, run_id="t")
    fork_id = app.fork("t", 1, update={"category": "spam"}, as_node="classify")
    final = app.resume(fork_id)
    assert app.replay(fork_id).log == final.log == ["classify", "discard"]


def test_issue44_resume_with_update_as_node_reroutes(store: CheckpointStore) -> None:
    app = triage(pause=True).compile(store=store)
    app.invoke({"text": "my invoice is wrong"}, run_id="t")
    assert app.get_run("t").status == "interrupted"
    final = app.resume("t", update={"category": "spam"}, as_node="classify")
    assert final.log == ["classify", "discard"]


def test_issue44_unknown_as_node_is_a_typed_error(store: CheckpointStore) -> None:
    app = triage().compile(store=store)
    app.invoke({"text": "hi"}, run_id="t")
    with pytest.raises(InvalidInputError) as info:
        app.fork("t", 1, update={"category": "spam"}, as_node="clasify")
    message = str(info.value)
    assert "'clasify'" in message
    assert "['classify', 'discard', 'investigate']" in message
    assert [r.run_id for r in app.list_runs()] == ["t"]  # nothing was forked


class Work(BaseModel):
    item: str


def plan(state: Ticket) -> dict[str, Any]:
    return {"log": ["plan"]}


def fan_out(state: Ticket) -> list[Send]:
    return [Send("work", {"item": item}) for item in state.items]


def work(job: Work) -> dict[str, Any]:
    return {"done": [job.item]}


def crawl() -> Graph[Ticket]:
    return (
        Graph("fan", state=Ticket)
        .with_node("plan", plan)
        .with_node("work", work, input=Work)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", fan_out, ["work"])
        .with_edge("work", END)
    )


def test_issue44_fork_as_node_reevaluates_sends(store: CheckpointStore) -> None:
    app = crawl().compile(store=store)
    assert sorted(app.invoke({"items": ["a"]}, run_id="c").done) == ["a"]
    fork_id = app.fork("c", 1, update={"items": ["x", "y", "z"]}, as_node="plan")
    assert sorted(app.resume(fork_id).done) == ["x", "y", "z"]
    kept = app.fork("c", 1, update={"items": ["x", "y", "z"]})
    assert app.resume(kept).done == ["a"]


SPAM_RULE = fathom.RulePack.from_spec(
    {
        "id": "triage",
        "version": "1",
        "rules": [
            {
                "name": "spam",
                "when": [{"node": "classify"}, {"state.category": "spam"}],
                "then": {"goto": "discard"},
            }
        ],
    }
)


def always_investigate(state: Ticket) -> Literal["other"]:
    return "other"


def test_issue44_fork_as_node_asks_the_rules(store: CheckpointStore) -> None:
    graph = (
        Graph("ruled", state=Ticket)
        .with_node("classify", classify, rules=[SPAM_RULE])
        .with_node("investigate", investigate)
        .with_node("discard", discard)
        .with_edge(START, "classify")
        .with_conditional_edges(
            "classify", always_investigate, {"other": "investigate", "spam": "discard"}
        )
        .with_edge("investigate", END)
        .with_edge("discard", END)
    )
    app = graph.compile(store=store)
    assert app.invoke({"text": "my invoice"}, run_id="r").log == ["classify", "investigate"]
    fork_id = app.fork("r", 1, update={"category": "spam"}, as_node="classify")
    assert app.resume(fork_id).log == ["classify", "discard"]


def test_issue44_fork_next_previews_without_forking(store: CheckpointStore) -> None:
    app = triage().compile(store=store)
    app.invoke({"text": "my invoice"}, run_id="t")
    spam = {"category": "spam"}
    assert app.fork_next("t", 1, update=spam, as_node="classify") == ("discard",)
    assert app.fork_next("t", 1, update=spam) == ("investigate",)
    assert app.fork_next("t", 2, as_node="investigate") == ()
    assert [r.run_id for r in app.list_runs()] == ["t"]
    assert app.get_state("t").category == "billing"
    fan = crawl().compile(store=store)
    fan.invoke({"items": ["a"]}, run_id="c")
    assert fan.fork_next("c", 1, update={"items": ["x", "y"]}, as_node="plan") == (
        "work",
        "work",
    )


def test_issue44_aresume_and_resume_stream_take_as_node(store: CheckpointStore) -> None:
    app = triage(pause=True).compile(store=store)
    app.invoke({"text": "my invoice"}, run_id="a")
    final = asyncio.run(app.aresume("a", update={"category": "spam"}, as_node="classify"))
    assert final.log == ["classify", "discard"]
    app.invoke({"text": "my invoice"}, run_id="s")
    events = list(app.resume_stream("s", update={"category": "spam"}, as_node="classify"))
    started = [e.node for e in events if isinstance(e, NodeStarted)]
    assert started == ["discard"]
