"""``stargraph.langgraph.prebuilt.create_react_agent``: LangGraph's signature over the
native prebuilt agent (the port on both engines is ``port_prebuilt_agent.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.errors import UsageError
from stargraph.langgraph.prebuilt import create_react_agent
from stargraph.llm import ChatMessage, ChatResponse, ScriptedChatModel, ToolCall
from tests.langgraph_ports.prebuiltnodes import Profile, get_weather, remember_name


def _call(name: str, args: dict[str, str], call_id: str) -> ChatResponse:
    call = ToolCall(id=call_id, name=name, arguments=json.dumps(args))
    return ChatResponse(message=ChatMessage.assistant(None, [call]), finish_reason="tool_calls")


def _answer(text: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage.assistant(text), finish_reason="stop")


class Weather(BaseModel):
    city: str
    sunny: bool


def test_issue46_create_react_agent_structured_response_is_the_schemas_instance() -> None:
    model = ScriptedChatModel(
        [_call("get_weather", {"city": "sf"}, "c1"), _answer('{"city": "sf", "sunny": true}')]
    )
    agent = create_react_agent(model, [get_weather], response_format=Weather)
    final = agent.invoke({"messages": [{"role": "user", "content": "weather in sf?"}]})
    assert final["structured_response"] == Weather(city="sf", sunny=True)
    # LangGraph's channels only: not the counters the rules read.
    assert sorted(final) == ["messages", "structured_response"]


def test_issue46_create_react_agent_state_schema_channels_take_tool_updates() -> None:
    model = ScriptedChatModel([_call("remember_name", {"name": "Ann"}, "c1"), _answer("Hi Ann")])
    agent = create_react_agent(model, [remember_name], state_schema=Profile)
    final = agent.invoke({"messages": ["I am Ann"], "user_name": ""})
    assert final["user_name"] == "Ann"
    assert final["messages"][-1].content == "Hi Ann"


def test_issue46_create_react_agent_threads_resume_and_replay(tmp_path: Path) -> None:
    model = ScriptedChatModel([_call("get_weather", {"city": "sf"}, "c1"), _answer("Sunny.")])
    store = SqliteStore(tmp_path / "runs.db")
    agent = create_react_agent(model, [get_weather], prompt="Be brief.", checkpointer=store)
    config = {"configurable": {"thread_id": "t"}}
    final = agent.invoke({"messages": ["weather in sf?"]}, config)
    assert agent.get_state(config).values["messages"] == final["messages"]
    (run,) = agent.native.get_thread("t")
    # Offline, from another store handle: no model, no tool, the same state.
    offline = create_react_agent(ScriptedChatModel([]), [get_weather], prompt="Be brief.")
    replayed = offline.native.with_store(SqliteStore(tmp_path / "runs.db")).replay(
        run.run_id, stub="must"
    )
    assert replayed.messages == final["messages"]


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"pre_model_hook": lambda state: state}, "pre_model_hook"),
        ({"store": object()}, "store"),
        ({"interrupt_before": ["tools"]}, "interrupt_before"),
        ({"prompt": lambda state: []}, "prompt"),
        ({"response_format": {"type": "object"}}, "response_format"),
        ({"config_schema": dict}, "config_schema"),
    ],
)
def test_issue46_create_react_agent_refuses_what_it_does_not_map(
    kwargs: dict[str, object], named: str
) -> None:
    with pytest.raises(UsageError, match=named):
        create_react_agent(ScriptedChatModel([]), [get_weather], **kwargs)  # type: ignore[arg-type]


def test_issue46_create_react_agent_refuses_a_model_named_by_a_string() -> None:
    with pytest.raises(UsageError, match="chat model object"):
        create_react_agent("openai:gpt-4o", [get_weather])
