"""A tool of the prebuilt agent returning ``Command`` (LangGraph's ToolNode semantics):
state updates, a finish, a handoff to the parent graph; journaled and replayable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stargraph import END, START, Graph
from stargraph.checkpoint import MemoryStore, Recording, SqliteStore
from stargraph.llm import ChatMessage, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill
from stargraph.skills.agent import agent_graph, agent_tools, create_agent
from stargraph.tools import Arbiter, ToolRegistry
from tests.skills.agentcommands import (
    LOOKED_UP,
    Desk,
    Profile,
    billing,
    finish,
    look_up_invoice,
    look_up_user,
    overwrite,
    remember_name,
    transfer_to_billing,
    wander,
)


def _call(name: str, args: dict[str, Any], call_id: str) -> ChatResponse:
    message = ChatMessage.assistant(
        None, [ToolCall(id=call_id, name=name, arguments=json.dumps(args))]
    )
    return ChatResponse(message=message, finish_reason="tool_calls")


def _answer(text: str) -> ChatResponse:
    return ChatResponse(message=ChatMessage.assistant(text), finish_reason="stop")


def test_issue46_a_tools_command_updates_the_agents_state(tmp_path: Path) -> None:
    model = ScriptedChatModel([_call("remember_name", {"name": "Ann"}, "c1"), _answer("Hi Ann")])
    store = SqliteStore(tmp_path / "runs.db")
    agent = create_agent(model, [remember_name], state=Profile, store=store, workspace=tmp_path)
    final = agent.invoke({"messages": ["I am Ann"]}, run_id="r")
    assert isinstance(final, Profile)
    assert final.user_name == "Ann"
    answered = final.messages[2]
    assert (answered.role, answered.tool_call_id) == ("tool", "c1")
    # The model sees what the tool changed, as it sees any return value.
    assert answered.content == '{"user_name": "Ann"}'
    assert model.requests[-1].messages[-1].content == answered.content
    # Offline: no model, no arbiter; the journaled result carries the Command.
    offline = agent_graph([remember_name], state=Profile).compile(
        store=SqliteStore(tmp_path / "runs.db")
    )
    assert offline.replay("r", stub="must") == final


def test_issue46_a_tool_may_answer_its_call_itself(tmp_path: Path) -> None:
    model = ScriptedChatModel([_call("look_up_user", {}, "c1"), _answer("Hi Ann")])
    agent = create_agent(model, [look_up_user], state=Profile, workspace=tmp_path)
    final = agent.invoke({"messages": ["who am I?"]})
    assert isinstance(final, Profile)
    assert final.user_name == "Ann"
    assert [(m.role, m.content) for m in final.messages[1:]] == [
        ("assistant", None),
        ("tool", "Found Ann."),
        ("assistant", "Hi Ann"),
    ]


def test_issue46_a_tools_goto_end_finishes_the_run_by_rule(tmp_path: Path) -> None:
    model = ScriptedChatModel([_call("finish", {"summary": "All done."}, "c1")])
    store = MemoryStore()
    agent = create_agent(model, [finish], store=store, workspace=tmp_path)
    final = agent.invoke({"messages": ["wrap up"]}, run_id="f")
    assert len(model.requests) == 1  # no model call after the tool finished
    assert [(m.role, m.content) for m in final.messages[2:]] == [
        ("tool", "ok"),
        ("assistant", "All done."),
    ]
    assert store.get_run("f").stopped_by == "exit/done_flag"
    offline = agent_graph([finish]).compile(store=store)
    assert offline.replay("f", stub="must") == final


def test_issue46_a_command_the_agent_cannot_apply_is_a_tool_error(tmp_path: Path) -> None:
    model = ScriptedChatModel(
        [
            _call("wander", {"place": "garden"}, "c1"),
            _call("overwrite", {"value": 99}, "c2"),
            _answer("sorry"),
        ]
    )
    agent = create_agent(model, [wander, overwrite], workspace=tmp_path)
    final = agent.invoke({"messages": ["go"]})
    errors = [m.content or "" for m in final.messages if m.role == "tool"]
    assert errors[0].startswith("Error: tool 'wander' returned Command(goto='garden')")
    assert "return Command(graph=Command.PARENT, goto=...)" in errors[0]
    assert errors[1].startswith("Error: tool 'overwrite' returned a Command updating ['llm_steps']")
    assert (final.error_count, final.llm_steps) == (2, 3)


def _desk_graph() -> Graph[Desk]:
    front = Skill.from_graph(
        agent_graph([transfer_to_billing, look_up_invoice], state=Desk, name="front"),
        name="front",
        version="1.0.0",
        kind="utility",
        description="the front desk agent",
        state_schema=Desk,
    )
    return (
        Graph("desk", state=Desk)
        .with_node(SubgraphNode.from_skill(front, site="front", destinations=["billing"]))
        .with_node("billing", billing)
        .with_edge(START, "front")
        .with_edge("billing", END)
    )


def test_issue46_a_tools_command_to_the_parent_hands_the_turn_over(tmp_path: Path) -> None:
    model = ScriptedChatModel([_call("transfer_to_billing", {}, "c1"), _answer("never asked")])
    store = MemoryStore()
    with Arbiter(
        ToolRegistry.build(builtins=agent_tools([transfer_to_billing, look_up_invoice])),
        workspace=tmp_path,
    ) as arbiter:
        app = _desk_graph().compile(store=store, services={"model": model, "arbiter": arbiter})
        final = app.invoke({"messages": ["my invoice is wrong"]}, run_id="d")
    # The agent's turn ended at the tool: one model call, and the parent's billing node ran
    # with the update the tool sent, over the conversation so far (the request, the call,
    # its answer: every call of a reply is answered, as LangGraph's ToolNode does).
    assert len(model.requests) == 1
    assert (final.handed_to, final.billing_saw) == ("billing", 3)
    assert [m.role for m in final.messages] == ["user", "assistant", "tool"]
    assert final.messages[2].tool_call_id == "c1"
    offline = _desk_graph().compile(store=store)
    assert offline.replay(Recording.from_store(store, "d"), stub="must") == final


def test_issue46_a_handoff_keeps_the_other_calls_of_its_reply(tmp_path: Path) -> None:
    # One reply hands off first and looks the invoice up second: LangGraph runs both calls
    # and applies the Command, so the lookup runs and the parent gets both answers.
    LOOKED_UP.clear()
    calls = (
        ToolCall(id="c1", name="transfer_to_billing", arguments="{}"),
        ToolCall(id="c2", name="look_up_invoice", arguments='{"number": "42"}'),
    )
    reply = ChatResponse(message=ChatMessage.assistant(None, calls), finish_reason="tool_calls")
    model = ScriptedChatModel([reply, _answer("never asked")])
    store = MemoryStore()
    with Arbiter(
        ToolRegistry.build(builtins=agent_tools([transfer_to_billing, look_up_invoice])),
        workspace=tmp_path,
    ) as arbiter:
        app = _desk_graph().compile(store=store, services={"model": model, "arbiter": arbiter})
        final = app.invoke({"messages": ["my invoice 42 is wrong"]}, run_id="d")
    assert LOOKED_UP == ["42"]
    assert len(model.requests) == 1
    assert [(m.role, m.tool_call_id) for m in final.messages] == [
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("tool", "c2"),
    ]
    assert final.messages[3].content == "invoice 42: 120 EUR, unpaid"
    assert (final.handed_to, final.billing_saw) == ("billing", 4)
    # Offline: the recorded results stand in for both tools, which do not run again.
    offline = _desk_graph().compile(store=store)
    assert offline.replay(Recording.from_store(store, "d"), stub="must") == final
    assert LOOKED_UP == ["42"]
