"""Registered secrets are masked in every call record a run stores: model text, tool
arguments and results, cassettes; and the run replays to the state it had live."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import CheckpointStore
from stargraph.graph import END, START, Graph
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse, ScriptedChatModel
from stargraph.replay import export_cassette, load_cassette
from stargraph.runtime import RunContext
from stargraph.tools import Arbiter, Secrets, ToolCall, ToolRegistry, tool

SECRET = "sk-live-0123456789abcdef"
SAY = "masking.say@1.0.0"


@tool(id=SAY)
def say(text: str) -> str:
    """Say ``text`` back."""
    return f"said: {text}"


class S(BaseModel):
    task: str = ""
    reply: str = ""
    said: str = ""


def ask(state: S, ctx: RunContext) -> dict[str, Any]:
    request = ChatRequest(messages=(ChatMessage.user(f"{state.task} (key {SECRET})"),))
    return {"reply": ctx.services["model"].complete(request).message.content or ""}


def act(state: S, ctx: RunContext) -> dict[str, Any]:
    result = ctx.services["arbiter"].dispatch(ToolCall(tool=SAY, args={"text": state.reply}))
    return {"said": result.summary}


def _graph() -> Graph[S]:
    return (
        Graph("masking", state=S)
        .with_node("ask", ask)
        .with_node("act", act)
        .with_edge(START, "ask")
        .with_edge("ask", "act")
        .with_edge("act", END)
    )


def _model() -> ScriptedChatModel:
    def reply(request: ChatRequest) -> ChatResponse:
        # A model that echoes the secret it was shown.
        return ChatResponse(message=ChatMessage.assistant(f"use {SECRET} to log in"))

    return ScriptedChatModel(reply)


@pytest.fixture(params=["secrets-service", "arbiter"])
def services(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The two ways a graph registers its secrets."""
    registry = ToolRegistry.build(builtins=[say])
    if request.param == "arbiter":
        arbiter = Arbiter(registry, workspace=str(tmp_path / "ws"), secrets={"api": SECRET})
        made: dict[str, Any] = {"arbiter": arbiter}
    else:
        arbiter = Arbiter(registry, workspace=str(tmp_path / "ws"))
        made = {"arbiter": arbiter, "secrets": Secrets({"api": SECRET})}
    yield {**made, "model": _model()}
    arbiter.close()


def _stored(store: CheckpointStore, run_id: str) -> str:
    return "".join(step.model_dump_json() for step in store.get_steps(run_id))


def test_issue43_model_text_is_masked_in_the_record_and_the_state(
    store: CheckpointStore, services: dict[str, Any]
) -> None:
    app = _graph().compile(store=store, services=services)
    final = app.invoke({"task": "log in"}, run_id="r1")
    # The node was handed the masked reply: a resumed run is served the same record.
    assert final.reply == "use [redacted:api] to log in"
    stored = _stored(store, "r1")
    assert SECRET not in stored
    llm = [c for step in store.get_steps("r1") for c in step.calls if c.kind == "llm"]
    assert len(llm) == 1
    assert "[redacted:api]" in str(llm[0].request)  # the prompt that quoted it
    assert "[redacted:api]" in str(llm[0].value)  # the reply that echoed it


def leak(state: S, ctx: RunContext) -> dict[str, Any]:
    call = ToolCall(tool=SAY, args={"text": f"token {SECRET}"})
    return {"said": ctx.services["arbiter"].dispatch(call).summary}


def test_issue43_tool_arguments_and_results_are_masked(
    store: CheckpointStore, services: dict[str, Any]
) -> None:
    graph = Graph("leak", state=S).with_node("leak", leak).with_edge(START, "leak")
    app = graph.with_edge("leak", END).compile(store=store, services=services)
    final = app.invoke({}, run_id="t1")
    assert final.said == "said: token [redacted:api]"
    tools = [c for step in store.get_steps("t1") for c in step.calls if c.kind == "tool"]
    assert len(tools) == 1
    assert "token [redacted:api]" in str(tools[0].request)
    assert SECRET not in str(tools[0].request)
    assert SECRET not in _stored(store, "t1")


def test_issue43_cassette_holds_no_secret_and_replays_the_live_state(
    store: CheckpointStore, services: dict[str, Any], tmp_path: Path
) -> None:
    app = _graph().compile(store=store, services=services)
    live = app.invoke({"task": "log in"}, run_id="c1")
    path = export_cassette(store, "c1", tmp_path / "c1.json", timestamps=False)
    assert SECRET not in path.read_text(encoding="utf-8")
    replayed = app.replay(load_cassette(path, graph_hash=app.graph_hash))
    assert replayed == live
    assert replayed.said == "said: use [redacted:api] to log in"
