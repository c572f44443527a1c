"""LangChain interop (issue 46): a LangChain chat model as a model service, LangChain tools
as stargraph tools, and ``messages``-mode items as LangChain message chunks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import (
    FakeMessagesListChatModel,
    GenericFakeChatModel,
)
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langchain_core.tools import tool as lc_tool

from stargraph.checkpoint import MemoryStore
from stargraph.errors import LLMError, ToolArgumentError, ToolSpecError, UsageError
from stargraph.llm import ChatMessage, ChatRequest, ChatResponse
from stargraph.llm.langchain import LangChainChatModel, to_langchain_chunk
from stargraph.runtime import MessageChunk
from stargraph.skills.agent import agent_graph, create_agent
from stargraph.skills.react import react_graph
from stargraph.testing import check_chat_model
from stargraph.tools import Arbiter, ToolCall, ToolRegistry, from_langchain


@lc_tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@lc_tool
def lookup(city: str) -> dict[str, Any]:
    """The weather in a city, as data."""
    if city == "Atlantis":
        raise ValueError("no weather under the sea")
    return {"city": city, "sky": "clear"}


def _fake(*replies: AIMessage) -> FakeMessagesListChatModel:
    return FakeMessagesListChatModel(responses=list(replies))


def _calls(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls])


class ToolCallingFake(BaseChatModel):
    """A provider that binds tools as LangChain providers do (``bind_tools`` -> ``tools=``
    at each call): it calls the first tool it was offered, then answers with what the tool
    returned and the names it was offered."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=list(tools), **kwargs)

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        offered = [t["function"]["name"] for t in kwargs.get("tools", ())]
        results = [m.content for m in messages if isinstance(m, ToolMessage)]
        if not results:
            call = {"name": offered[0], "args": {"a": 6, "b": 7}, "id": "call_1"}
            reply = AIMessage(content="", tool_calls=[call])
        else:
            reply = AIMessage(
                content=f"{offered} gave {results[0]}",
                usage_metadata={"input_tokens": 9, "output_tokens": 4, "total_tokens": 13},
                response_metadata={"finish_reason": "stop", "model_name": "fake-1"},
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


# ----------------------------------------------------------------------------- the model


def test_issue46_langchain_agent_runs_end_to_end_with_its_tools() -> None:
    model = LangChainChatModel(ToolCallingFake())
    agent = create_agent(model, [multiply])
    final = agent.invoke({"messages": ["6 times 7?"]})
    # The model was offered the tool under its own name and read its return value.
    assert [(m.role, m.content) for m in final.messages] == [
        ("user", "6 times 7?"),
        ("assistant", None),
        ("tool", "42"),
        ("assistant", "['multiply'] gave 42"),
    ]
    assert final.messages[1].tool_calls[0].name == "multiply"
    assert final.usage.total_tokens == 13


def test_issue46_langchain_run_replays_offline_byte_for_byte(tmp_path: Path) -> None:
    fake = _fake(
        _calls(("multiply", {"a": 2, "b": 21}, "c1"), ("lookup", {"city": "Paris"}, "c2")),
        AIMessage(content="42, and clear in Paris"),
    )
    store = MemoryStore()
    agent = create_agent(
        LangChainChatModel(fake, bind_tools=False),
        [multiply, lookup],
        store=store,
        workspace=tmp_path,
    )
    live = list(agent.stream({"messages": ["go"]}, mode="events", run_id="lc1"))
    final = agent.get_state("lc1")
    assert [m.content for m in final.messages if m.role == "tool"] == [
        "42",
        '{"city": "Paris", "sky": "clear"}',
    ]
    # Neither the LangChain model nor the tools: the record answers every call.
    offline = agent_graph([multiply, lookup]).compile(store=store)
    assert offline.graph_hash == agent.graph_hash
    replayed = list(offline.replay_stream("lc1"))
    outcome = {"node_finished", "step_completed", "rule_decided", "run_finished"}

    def dumped(events: list[Any]) -> bytes:
        return orjson.dumps([e.model_dump(mode="json") for e in events if e.kind in outcome])

    assert dumped(replayed) == dumped(live)
    assert orjson.dumps(offline.replay("lc1").model_dump(mode="json")) == orjson.dumps(
        final.model_dump(mode="json")
    )


def test_issue46_langchain_run_records_the_same_bytes_every_time(tmp_path: Path) -> None:
    def record() -> list[Any]:
        store = MemoryStore()
        fake = _fake(_calls(("multiply", {"a": 1, "b": 2}, "c1")), AIMessage(content="2"))
        agent = create_agent(
            LangChainChatModel(fake, bind_tools=False), [multiply], store=store, workspace=tmp_path
        )
        agent.invoke({"messages": ["1*2"]}, run_id="same")
        return [s.model_dump(mode="json", exclude={"created_ms"}) for s in store.get_steps("same")]

    # LangChain gives each reply a fresh random run id: the record keeps none of it.
    assert orjson.dumps(record()) == orjson.dumps(record())


def test_issue46_langchain_model_passes_the_conformance_suite() -> None:
    def as_ai(response: ChatResponse) -> AIMessage:
        raw = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in response.tool_calls
        ]
        extra: dict[str, Any] = {"tool_calls": raw} if raw else {}
        if response.refusal:
            extra["refusal"] = response.refusal
        usage = response.usage
        return AIMessage(
            content=response.message.content or "",
            tool_calls=[
                {"name": c.name, "args": json.loads(c.arguments), "id": c.id}
                for c in response.tool_calls
                if c.arguments.endswith("}")
            ],
            invalid_tool_calls=[
                {"name": c.name, "args": c.arguments, "id": c.id, "error": None}
                for c in response.tool_calls
                if not c.arguments.endswith("}")
            ],
            additional_kwargs=extra,
            response_metadata={"finish_reason": response.finish_reason},
            usage_metadata={
                "input_tokens": usage.prompt_tokens,
                "output_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            },
        )

    @contextlib.contextmanager
    def harness(script: Sequence[ChatResponse]) -> Iterator[LangChainChatModel]:
        yield LangChainChatModel(_fake(*map(as_ai, script)), bind_tools=False)

    check_chat_model(harness)


def test_issue46_langchain_model_maps_stop_reasons_and_drops_langchain_run_ids() -> None:
    request = ChatRequest(messages=(ChatMessage.user("hi"),))
    cut = AIMessage(content="It was a dark", response_metadata={"stop_reason": "max_tokens"})
    named = AIMessage(content="ok", id="msg_01abc", response_metadata={"model": "claude-x"})
    model = LangChainChatModel(_fake(cut, named))
    first = model.complete(request)
    assert (first.finish_reason, first.id) == ("length", "")
    second = asyncio.run(model.acomplete(request))
    assert (second.finish_reason, second.id, second.model) == ("stop", "msg_01abc", "claude-x")


def test_issue46_langchain_model_that_cannot_bind_tools_says_so() -> None:
    model = LangChainChatModel(_fake(AIMessage(content="hi")))
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}
    request = ChatRequest(messages=(ChatMessage.user("hi"),), tools=(tool,))
    with pytest.raises(LLMError, match=r"cannot bind tools.*bind_tools=False"):
        model.complete(request)


def test_issue46_langchain_model_failure_is_an_llm_error() -> None:
    class Broken(FakeMessagesListChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
            raise ConnectionError("provider down")

    model = LangChainChatModel(Broken(responses=[]))
    with pytest.raises(LLMError, match="provider down") as caught:
        model.complete(ChatRequest(messages=(ChatMessage.user("hi"),)))
    assert isinstance(caught.value.__cause__, ConnectionError)


# ----------------------------------------------------------------------------- streaming


def test_issue46_messages_mode_items_become_langchain_chunks() -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello there world")]))
    agent = create_agent(LangChainChatModel(model), [])
    items = list(agent.stream({"messages": ["hi"]}, mode="messages"))
    pairs = [to_langchain_chunk(item) for item in items]
    assert all(isinstance(chunk, AIMessageChunk) for chunk, _ in pairs)
    assert "".join(str(chunk.content) for chunk, _ in pairs) == "hello there world"
    assert {(meta["langgraph_node"], meta["langgraph_step"]) for _, meta in pairs} == {("think", 1)}
    # One message's pieces share one id, so they sum to one message as LangChain's do.
    summed = pairs[0][0]
    for chunk, _ in pairs[1:]:
        summed += chunk
    assert summed.content == "hello there world"
    assert len({chunk.id for chunk, _ in pairs}) == 1


def test_issue46_langchain_chunk_of_a_subgraph_names_its_path() -> None:
    item = MessageChunk(run_id="r", step=3, path=("outer",), node="think", index=1, text="x")
    chunk, metadata = to_langchain_chunk(item)
    assert (chunk.content, chunk.id) == ("x", "r:3:outer/think:1")
    assert metadata == {
        "langgraph_node": "think",
        "langgraph_step": 3,
        "langgraph_path": ("outer", "think"),
        "run_id": "r",
    }


def test_issue46_to_langchain_chunk_refuses_what_is_not_a_message_chunk() -> None:
    with pytest.raises(UsageError, match=r"takes a MessageChunk.*\(mode, item\)"):
        to_langchain_chunk(cast(Any, ("messages", "hi")))


def test_issue46_langchain_async_streaming_joins_to_the_reply() -> None:
    model = LangChainChatModel(GenericFakeChatModel(messages=iter([AIMessage(content="a b c")])))
    pieces: list[str] = []
    request = ChatRequest(messages=(ChatMessage.user("hi"),))
    response = asyncio.run(model.acomplete_streaming(request, pieces.append))
    assert (response.message.content, "".join(pieces), len(pieces)) == ("a b c", "a b c", 5)


# ----------------------------------------------------------------------------- tools


def test_issue46_from_langchain_keeps_name_description_and_schema() -> None:
    made = from_langchain(multiply, side_effect="read")
    assert made.spec.id == "langchain.multiply@0.0.0"
    assert made.spec.description == "Multiply two integers."
    assert made.spec.side_effect == "read"
    assert made.spec.input_schema["required"] == ["a", "b"]
    assert made.spec.llm_view()["function"]["parameters"]["properties"]["a"]["type"] == "integer"


def test_issue46_langchain_tool_runs_through_the_arbiter(tmp_path: Path) -> None:
    made = from_langchain(multiply, id="math.multiply@1.0.0")
    with Arbiter(ToolRegistry.build(builtins=[made]), workspace=tmp_path) as arbiter:
        good = arbiter.dispatch(ToolCall(tool="math.multiply", args={"a": 3, "b": 4}))
        # Arguments are checked against the tool's schema before LangChain sees them.
        with pytest.raises(ToolArgumentError, match=r"math.multiply@1.0.0.*\ba: "):
            arbiter.dispatch(ToolCall(tool="math.multiply", args={"a": "3", "b": 4}))
    assert (good.status, good.payload) == ("success", 12)


def test_issue46_async_only_langchain_tool_is_awaited(tmp_path: Path) -> None:
    async def shout(text: str) -> str:
        return text.upper()

    made = from_langchain(StructuredTool.from_function(coroutine=shout, description="Shout."))
    with Arbiter(ToolRegistry.build(builtins=[made]), workspace=tmp_path) as arbiter:
        result = arbiter.dispatch(ToolCall(tool=made.spec.id, args={"text": "hey"}))
    assert (result.status, result.payload) == ("success", "HEY")


def test_issue46_langchain_tool_error_reaches_the_model_as_a_tool_message() -> None:
    fake = _fake(_calls(("lookup", {"city": "Atlantis"}, "c1")), AIMessage(content="sorry"))
    final = create_agent(LangChainChatModel(fake, bind_tools=False), [lookup]).invoke(
        {"messages": ["weather in Atlantis?"]}
    )
    answer = final.messages[2]
    assert answer.role == "tool"
    assert (answer.content or "").startswith("Error:")
    assert "no weather under the sea" in (answer.content or "")


def test_issue46_langchain_tool_in_react_graph(tmp_path: Path) -> None:
    made = from_langchain(multiply)
    fake = _fake(
        AIMessage(
            content="",
            tool_calls=[
                {"name": "langchain__multiply__v0_0_0", "args": {"a": 5, "b": 5}, "id": "c1"}
            ],
        ),
        AIMessage(content="25"),
    )
    graph = react_graph(tools=(made.spec.id,))
    with Arbiter(ToolRegistry.build(builtins=[made]), workspace=tmp_path) as arbiter:
        app = graph.compile(
            services={"model": LangChainChatModel(fake, bind_tools=False), "arbiter": arbiter}
        )
        final = app.invoke({"task": "5*5"})
    assert final.final_answer == "25"


def test_issue46_from_langchain_refuses_what_is_not_a_langchain_tool() -> None:
    def plain(a: int) -> int:
        """Plain."""
        return a

    with pytest.raises(ToolSpecError, match=r"expected a LangChain BaseTool.*stargraph.tools.tool"):
        from_langchain(cast(Any, plain))


def test_issue46_langchain_interop_imports_no_langchain_core() -> None:
    # The interop modules read LangChain objects they are handed; importing them (or the
    # agent) must not load langchain_core for a program that never uses it.
    code = (
        "import sys\n"
        "import stargraph.llm.langchain, stargraph.skills.agent\n"
        "from stargraph.tools import from_langchain\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'langchain_core'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.stdout.strip() == "[]"
