"""``stream(mode="messages")`` end to end: a node asks a real ``OpenAIChatModel`` (the
``openai`` client over HTTP) to answer; the scripted OpenAI-compatible server sends the reply
as several SSE chunks, the consumer gets them as :class:`MessageChunk` items while the run is
in flight, and the stored run replays offline to the same state, with no server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.checkpoint import SqliteStore
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel
from stargraph.runtime import MessageChunk, RunContext
from stargraph.testing import Reply, ScriptedOpenAIServer

ANSWER = "Paris is the capital of France, and it sits on the Seine."


class Chat(BaseModel):
    question: str = ""
    answer: str = ""


def ask(state: Chat, ctx: RunContext) -> dict[str, Any]:
    model = ctx.services["model"]
    response = model.complete(ChatRequest(messages=(ChatMessage.user(state.question),)))
    return {"answer": response.message.content}


def _graph() -> Graph[Chat]:
    return (
        Graph("ask", state=Chat).with_node("ask", ask).with_edge(START, "ask").with_edge("ask", END)
    )


def test_issue18_messages_mode_streams_tokens_from_the_server_and_replays(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    with ScriptedOpenAIServer([Reply.text(ANSWER)]) as server:
        model = OpenAIChatModel("scripted", base_url=server.base_url, api_key="k", backoff=0)
        app = _graph().compile(store=store, services={"model": model})
        items = list(
            app.stream(
                {"question": "Capital of France?"}, run_id="m-1", mode=["messages", "values"]
            )
        )
        streamed_requests = [r for r in server.chat_requests if (r.body or {}).get("stream")]
    chunks = [item for mode, item in items if mode == "messages"]
    assert all(isinstance(c, MessageChunk) for c in chunks)
    assert len(chunks) > 1, "the reply came as one piece: nothing was streamed"
    assert "".join(c.text for c in chunks) == ANSWER
    assert {(c.node, c.step) for c in chunks} == {("ask", 1)}
    assert len(streamed_requests) == 1
    final = [item for mode, item in items if mode == "values"][-1]
    assert final.answer == ANSWER
    # The server is gone: the replay is served from the record, and equals the live run.
    offline = _graph().compile(store=store, services={})
    assert offline.replay("m-1") == app.get_state("m-1") == final
    store.close()
