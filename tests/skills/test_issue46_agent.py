"""The prebuilt agent over plain functions and a message list (issue 46)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import MemoryStore
from stargraph.errors import RegistryError, SkillValidationError
from stargraph.ir import FunctionNodeIR
from stargraph.llm import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    OpenAIChatModel,
    ScriptedChatModel,
    ToolCall,
)
from stargraph.messages import Message
from stargraph.skills.agent import AgentState, agent_graph, agent_tools, create_agent
from stargraph.skills.react import react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, tool


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def add(a: int, b: int) -> dict[str, int]:
    """Add two integers."""
    if a < 0:
        raise ValueError("negative numbers are not supported")
    return {"sum": a + b}


def _script(request: RecordedRequest) -> Reply:
    """Weather first, then add, then an answer quoting what the tools returned."""
    results = [m["content"] for m in request.messages if m["role"] == "tool"]
    if not results:
        return Reply.tool_calls([("get_weather", {"city": "Paris"})])
    if len(results) == 1:
        return Reply.tool_calls([("add", {"a": 2, "b": 3})])
    return Reply.text(f"It is {results[0]}; 2+3 gives {results[1]}.")


def _call(name: str, args: dict[str, Any], call_id: str) -> ChatResponse:
    message = ChatMessage.assistant(
        None, [ToolCall(id=call_id, name=name, arguments=json.dumps(args))]
    )
    return ChatResponse(message=message, finish_reason="tool_calls")


def _answer(text: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage.assistant(text), finish_reason="stop")


def _think_config(graph: Any) -> dict[str, Any]:
    node = next(n for n in graph.to_ir().nodes if n.id == "think")
    assert isinstance(node, FunctionNodeIR)
    return dict(node.config)


def test_issue46_agent_on_the_scripted_server_sees_plain_names_and_results(
    tmp_path: Path,
) -> None:
    with ScriptedOpenAIServer(_script) as server:
        model = OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="sk-test")
        try:
            agent = create_agent(model, [get_weather, add], prompt="Be brief.", workspace=tmp_path)
            final = agent.invoke({"messages": ["Weather in Paris, and 2+3?"]})
        finally:
            model.close()
        requests = server.chat_requests
    assert final.messages[-1].content == 'It is sunny in Paris; 2+3 gives {"sum": 5}.'
    assert [m.role for m in final.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert len(requests) == 3
    for request in requests:
        assert request.body is not None
        # The tools' own names, in the order given (not sorted, not mangled).
        assert [t["function"]["name"] for t in request.body["tools"]] == ["get_weather", "add"]
        assert request.messages[0] == {"role": "system", "content": "Be brief."}
    tool_messages = [m for m in requests[-1].messages if m["role"] == "tool"]
    # The tools' return values, not the arbiter's JSON envelope.
    assert [m["content"] for m in tool_messages] == ["sunny in Paris", '{"sum": 5}']
    assert [m["name"] for m in tool_messages] == ["get_weather", "add"]


def _agent_model() -> ScriptedChatModel:
    return ScriptedChatModel(
        [
            _call("get_weather", {"city": "Oslo"}, "c1"),
            _call("add", {"a": -1, "b": 2}, "c2"),
            _answer("done"),
        ]
    )


def test_issue46_a_raising_tool_becomes_a_tool_message_the_model_sees(tmp_path: Path) -> None:
    model = _agent_model()
    final = create_agent(model, [get_weather, add], workspace=tmp_path).invoke({"messages": ["go"]})
    failed = final.messages[4]
    assert failed.role == "tool"
    assert failed.tool_call_id == "c2"
    assert failed.content is not None
    assert failed.content.startswith("Error: tool 'add' failed: ValueError: negative numbers")
    # The model was shown it, and went on to answer.
    assert model.requests[-1].messages[-1].content == failed.content
    assert final.messages[-1].content == "done"
    assert final.error_count == 1


def test_issue46_the_arbiter_records_canonical_ids_and_full_results(tmp_path: Path) -> None:
    tools = agent_tools([get_weather, add])
    ids = [t.spec.id for t in tools]
    assert ids == [
        "agent.tests_skills_test_issue46_agent.get_weather@0.0.0",
        "agent.tests_skills_test_issue46_agent.add@0.0.0",
    ]
    with Arbiter(ToolRegistry.build(builtins=tools), workspace=tmp_path) as arbiter:
        app = agent_graph([get_weather, add]).compile(
            services={"model": _agent_model(), "arbiter": arbiter}
        )
        app.invoke({"messages": ["go"]})
        entries = [e for e in arbiter.commit_log.records() if e.kind == "call"]
    assert [(e.tool, e.call_id, e.status) for e in entries] == [
        (ids[0], "c1", "success"),
        (ids[1], "c2", "error"),
    ]


def test_issue46_agent_runs_replay_offline(tmp_path: Path) -> None:
    store = MemoryStore()
    agent = create_agent(_agent_model(), [get_weather, add], store=store, workspace=tmp_path)
    final = agent.invoke({"messages": ["go"]}, run_id="a1")
    assert store.get_run("a1").stopped_by == "exit/final_answer"
    # No model, no arbiter: the record serves every model reply and tool result.
    offline = agent_graph([get_weather, add]).compile(store=store)
    assert offline.graph_hash == agent.graph_hash
    assert offline.replay("a1", stub="must") == final


def test_issue46_max_steps_ends_the_agent_by_rule(tmp_path: Path) -> None:
    forever = ScriptedChatModel([_call("get_weather", {"city": "X"}, f"c{i}") for i in range(9)])
    store = MemoryStore()
    agent = create_agent(forever, [get_weather], max_steps=3, store=store, workspace=tmp_path)
    final = agent.invoke({"messages": ["loop"]}, run_id="loop")
    assert len(forever.requests) == 3
    assert final.llm_steps == 3
    assert store.get_run("loop").stopped_by == "termination/max_steps"


def _weather_then_answer(request: ChatRequest) -> ChatResponse:
    """Each turn: the weather of the turn's city, then an answer."""
    turn = [m for m in request.messages if m.role == "user"][-1]
    last = request.messages[-1]
    if last.role == "user":
        return _call("get_weather", {"city": turn.content}, f"c-{turn.content}")
    return _answer(f"{turn.content}: {last.content}")


def test_issue46_agent_budgets_are_per_turn_on_a_thread(tmp_path: Path) -> None:
    store = MemoryStore()
    model = ScriptedChatModel(_weather_then_answer)
    agent = create_agent(model, [get_weather], max_steps=2, store=store, workspace=tmp_path)
    for city in ("Oslo", "Rome", "Lima"):
        final = agent.invoke({"messages": [city]}, thread_id="t1")
    # Two model calls a turn, the limit each time: every turn ends with its answer, and the
    # conversation holds all three.
    assert [m.content for m in final.messages if m.role == "assistant" and m.content] == [
        "Oslo: sunny in Oslo",
        "Rome: sunny in Rome",
        "Lima: sunny in Lima",
    ]
    assert final.llm_steps == 2


class Forecast(BaseModel):
    """The answer's shape."""

    city: str
    sunny: bool


def test_issue46_response_format_validates_the_answer(tmp_path: Path) -> None:
    model = ScriptedChatModel([_answer("not json"), _answer('{"city": "Paris", "sunny": true}')])
    final = create_agent(model, [get_weather], response_format=Forecast, workspace=tmp_path).invoke(
        {"messages": ["forecast?"]}
    )
    assert final.structured_response == {"city": "Paris", "sunny": True}
    assert final.error_count == 1
    system = model.requests[0].messages[0].content or ""
    assert "the fields city (string), sunny (true or false)" in system
    assert "properties" not in system


def test_issue46_two_tools_with_one_plain_name_are_refused() -> None:
    @tool(id="other.get_weather@1.0.0")
    def get_weather(city: str) -> str:
        """Another weather."""
        return city

    with pytest.raises(RegistryError, match=r"2 tools would reach the model as 'get_weather'"):
        agent_graph([globals()["get_weather"], get_weather])


def test_issue46_a_tool_declared_with_tool_keeps_its_id_and_gets_its_function_name() -> None:
    @tool(id="weather.forecast@1.2.0")
    def forecast(city: str) -> str:
        """A forecast."""
        return city

    (made,) = agent_tools([forecast])
    assert made is forecast
    config = _think_config(agent_graph([forecast]))
    assert config["tool_names"] == {"forecast": "weather.forecast@1.2.0"}


def test_issue46_not_a_tool_and_not_an_agent_state_are_refused() -> None:
    with pytest.raises(SkillValidationError, match=r"/tools/0.*expected a function"):
        agent_tools([42])  # type: ignore[list-item]

    class Plain(BaseModel):
        messages: list[Message] = []

    with pytest.raises(SkillValidationError, match="subclass of AgentState"):
        agent_graph([get_weather], state=Plain)  # type: ignore[arg-type]


def test_issue46_tool_order_and_names_are_in_the_graph_hash() -> None:
    one = agent_graph([get_weather, add]).to_ir().graph_hash
    assert one == agent_graph([get_weather, add]).to_ir().graph_hash
    assert one != agent_graph([add, get_weather]).to_ir().graph_hash


class Notes(AgentState):
    """A state with one more channel."""

    topic: str = ""


def test_issue46_agent_takes_a_state_subclass(tmp_path: Path) -> None:
    final = create_agent(
        ScriptedChatModel([_answer("ok")]), [], state=Notes, workspace=tmp_path
    ).invoke({"messages": ["hi"], "topic": "t"})
    assert isinstance(final, Notes)
    assert (final.topic, final.messages[-1].content) == ("t", "ok")


def test_issue46_react_graph_keeps_no_name_map_in_its_config() -> None:
    # The plain names are the agent's own map; the ReAct loop derives its short names from
    # the allowlist alone, so its config (and hash) is unchanged by them.
    config = _think_config(react_graph(tools=["demo.calc@1.0.0"]))
    assert "tool_names" not in config


def _langgraph_model(replies: list[Any]) -> Any:
    """A LangChain chat model answering from ``replies`` (AIMessages), tools bound."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel

    class Scripted(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    return Scripted(responses=replies)


def _lc_call(name: str, args: dict[str, Any], call_id: str) -> Any:
    return {"name": name, "args": args, "id": call_id}


def test_issue46_agent_ends_in_langgraphs_final_messages(tmp_path: Path) -> None:
    import warnings

    from langchain_core.messages import AIMessage

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in langgraph 1.x
        from langgraph.prebuilt import create_react_agent

        theirs = create_react_agent(
            _langgraph_model(
                [
                    AIMessage(
                        "",
                        tool_calls=[{"name": "get_weather", "args": {"city": "Oslo"}, "id": "c1"}],
                    ),
                    AIMessage(
                        "", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "c2"}]
                    ),
                    AIMessage("done"),
                ]
            ),
            [get_weather, add],
        ).invoke({"messages": [("user", "go")]})
    ours_model = ScriptedChatModel(
        [
            _call("get_weather", {"city": "Oslo"}, "c1"),
            _call("add", {"a": 2, "b": 3}, "c2"),
            _answer("done"),
        ]
    )
    ours = create_agent(ours_model, [get_weather, add], workspace=tmp_path).invoke(
        {"messages": [{"role": "user", "content": "go"}]}
    )

    def shape(messages: list[Any]) -> list[tuple[Any, ...]]:
        return [(m.type, m.content, getattr(m, "name", None)) for m in messages]

    # The same conversation, message for message (ids aside: theirs are random uuids).
    assert shape([m.to_langchain() for m in ours.messages]) == shape(theirs["messages"])
