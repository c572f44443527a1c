"""The ReAct graph as data (nodes, config, hash, rules), the skill, and in-process runs with
``ScriptedChatModel`` (no HTTP)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from stargraph import fathom
from stargraph.errors import NodeError, SkillValidationError
from stargraph.ir import FunctionNodeIR, GraphIR
from stargraph.llm import ChatMessage, ChatResponse, ScriptedChatModel, ToolCall
from stargraph.skills.react import (
    ReactOutput,
    ReactState,
    ReactStep,
    react_graph,
    react_skill,
    termination_pack,
)
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool
from tests.support import finished

ADD = "demo.add@1.0.0"


@tool(id=ADD)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[add]), workspace=tmp_path) as arb:
        yield arb


def calls(*pairs: tuple[int, int]) -> ChatResponse:
    return ChatResponse(
        message=ChatMessage.assistant(
            tool_calls=[
                ToolCall(id=f"c{i}", name=llm_name_for(ADD), arguments=f'{{"a": {a}, "b": {b}}}')
                for i, (a, b) in enumerate(pairs)
            ]
        )
    )


class Answer(BaseModel):
    value: int


# --------------------------------------------------------------------------- the graph


def test_graph_shape_config_and_rules() -> None:
    ir = react_graph(tools=[ADD], model="m", system_prompt="hi", temperature=0.0).to_ir()
    assert all(isinstance(n, FunctionNodeIR) for n in ir.nodes)
    nodes = {str(n.id): n for n in ir.nodes if isinstance(n, FunctionNodeIR)}
    assert sorted(nodes) == ["act", "observe", "think"]
    assert [n.id for n in ir.nodes if n.must_stub] == ["think"]
    assert nodes["think"].config == {
        "tools": [ADD],
        "error_budget": 3,
        "max_steps": 10,
        "model": "m",
        "system_prompt": "hi",
        "temperature": 0.0,
    }
    # The budgets and the success rules are mounted on observe, which ends every ReAct step.
    assert ir.rule_packs == ()
    mounted = {n.id: [(p.id, p.version) for p in n.rules] for n in ir.nodes}
    assert mounted == {
        "act": [],
        "observe": [("termination", "react-2"), ("exit", "react-1")],
        "think": [],
    }
    assert ir.entry == ("think",)


def test_every_behavioural_option_changes_the_hash_and_a_repeated_tool_does_not() -> None:
    base = react_graph(tools=[ADD, "choir.fs.read@1.0.0"]).graph_hash
    assert react_graph(tools=[ADD, "choir.fs.read@1.0.0", ADD]).graph_hash == base
    variants = [
        react_graph(tools=[ADD]),
        # The order is what the model is offered, so it is behaviour.
        react_graph(tools=["choir.fs.read@1.0.0", ADD]),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], model="other"),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], system_prompt="x"),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], max_steps=4),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], error_budget=5),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], temperature=0.5),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], output_model=Answer),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], done_field="done"),
        react_graph(tools=[ADD, "choir.fs.read@1.0.0"], rules=[]),
    ]
    hashes = {g.graph_hash for g in variants}
    assert len(hashes) == len(variants)
    assert base not in hashes


def test_output_model_schema_is_part_of_the_config() -> None:
    think = next(
        n for n in react_graph(tools=[ADD], output_model=Answer).to_ir().nodes if n.id == "think"
    )
    assert isinstance(think, FunctionNodeIR)
    assert think.config["output_model"].endswith(":Answer")
    assert think.config["output_schema"] == Answer.model_json_schema()


def test_bad_options_are_reported_together() -> None:
    with pytest.raises(SkillValidationError) as caught:
        react_graph(tools="demo.add@1.0.0", max_steps=0, error_budget=-1, temperature=3.0)
    pointers = sorted(p.pointer for p in caught.value.problems)
    assert pointers == ["/error_budget", "/max_steps", "/temperature", "/tools"]
    assert "ReAct graph 'react'" in str(caught.value)


def test_termination_pack_rules_and_validation() -> None:
    pack = termination_pack(max_steps=4, error_budget=2)
    fathom.validate_pack(
        pack,
        fact_fields=fathom.fact_fields(ReactState),
        successors={"think": frozenset({"act"}), "act": frozenset({"observe"})},
    )
    for rule in ("error_budget", "max_steps"):
        assert f"(defrule {rule}" in pack.source
    assert "(defrule done" not in pack.source  # the success rules are the exit pack's
    with pytest.raises(SkillValidationError):
        termination_pack(max_steps=True, error_budget=1)


def test_state_round_trips_through_json() -> None:
    state = ReactState(
        task="t",
        trajectory=[ReactStep(llm_step=0, kind="task", message=ChatMessage.user("t"))],
        done=True,
        final_answer="a",
    )
    assert ReactState.model_validate_json(state.model_dump_json()) == state


# --------------------------------------------------------------------------- the skill


def test_react_skill_is_an_agent_with_declared_outputs() -> None:
    skill = react_skill(name="calc-agent", tools=[ADD], system_prompt="be brief")
    assert skill.kind == "agent"
    assert skill.tools == (ADD,)
    assert skill.system_prompt == "be brief"
    assert skill.state_schema is ReactOutput
    assert skill.declared_outputs == (
        "done",
        "error_budget",
        "final_answer",
        "final_output",
        "tool_calls",
        "trajectory",
    )
    assert isinstance(skill.subgraph, GraphIR)
    assert sorted(n.id for n in skill.subgraph.nodes) == ["act", "observe", "think"]
    assert skill.subgraph.outputs == skill.declared_outputs


# --------------------------------------------------------------------------- running in-process


def test_in_process_run_with_the_scripted_model(arbiter: Arbiter) -> None:
    model = ScriptedChatModel([calls((1, 2), (3, 4)), "3 and 7"])
    app = react_graph(tools=[ADD]).compile(services={"model": model, "arbiter": arbiter})
    events = list(app.stream({"task": "add"}))
    final = finished(events)
    assert final.stopped_by == "exit/final_answer"
    assert final.state["final_answer"] == "3 and 7"
    assert [r["summary"] for r in final.state["tool_calls"]] == ["3", "7"]
    second = model.requests[1]
    assert [m.role for m in second.messages] == ["user", "assistant", "tool", "tool"]
    assert [m.tool_call_id for m in second.messages[2:]] == ["c0", "c1"]
    # Offered under its short name; the record keeps the canonical id.
    (view,) = arbiter.registry.llm_tools([ADD])
    assert second.tools == ({**view, "function": {**view["function"], "name": "add"}},)
    assert [r["tool"] for r in final.state["tool_calls"]] == [ADD, ADD]


def test_ainvoke_runs_the_same_loop(arbiter: Arbiter) -> None:
    model = ScriptedChatModel([calls((2, 2)), "4"])
    app = react_graph(tools=[ADD]).compile(services={"model": model, "arbiter": arbiter})
    final = asyncio.run(app.ainvoke({"task": "2+2"}))
    assert (final.final_answer, final.llm_steps) == ("4", 2)


def test_a_trajectory_can_seed_the_conversation(arbiter: Arbiter) -> None:
    model = ScriptedChatModel(["again: hi"])
    app = react_graph(tools=[ADD]).compile(services={"model": model, "arbiter": arbiter})
    history = [
        ReactStep(llm_step=0, kind="task", message=ChatMessage.user("hi")),
        ReactStep(llm_step=0, kind="reply", message=ChatMessage.assistant("hi")),
        ReactStep(llm_step=0, kind="task", message=ChatMessage.user("say it again")),
    ]
    final = app.invoke({"trajectory": history})
    assert [m.content for m in model.requests[0].messages] == ["hi", "hi", "say it again"]
    assert final.final_answer == "again: hi"


def test_rules_can_read_the_tool_result_channel(arbiter: Arbiter) -> None:
    guard = fathom.RulePack.from_spec(
        {
            "id": "guard",
            "version": "1",
            "rules": [
                {
                    "name": "stop_on_invalid",
                    "when": [{"node": "observe"}, {"tool_result": "invalid"}],
                    "then": {"halt": "invalid tool call"},
                }
            ],
        }
    )
    bad = ChatResponse(
        message=ChatMessage.assistant(
            tool_calls=[ToolCall(id="x", name=llm_name_for(ADD), arguments='{"a": "z"}')]
        )
    )
    model = ScriptedChatModel(lambda _: bad)
    graph = react_graph(tools=[ADD], error_budget=9).with_rules(guard)
    events = list(graph.compile(services={"model": model, "arbiter": arbiter}).stream({}))
    assert finished(events).stopped_by == "guard/stop_on_invalid"
    assert len(model.requests) == 1


def test_missing_services_are_named(arbiter: Arbiter) -> None:
    app = react_graph(tools=[ADD]).compile(services={"arbiter": arbiter})
    with pytest.raises(NodeError, match=r"needs a ChatModel as services\['model'\]"):
        app.invoke({"task": "x"})
    model = ScriptedChatModel(["x"])
    app = react_graph(tools=[ADD]).compile(services={"model": model, "arbiter": object()})
    with pytest.raises(NodeError, match=r"needs a tool Arbiter as services\['arbiter'\]"):
        app.invoke({"task": "x"})


def test_an_allowlisted_tool_the_registry_lacks_is_named(arbiter: Arbiter) -> None:
    model = ScriptedChatModel(["x"])
    app = react_graph(tools=[ADD, "demo.nope@1.0.0", "demo.*"]).compile(
        services={"model": model, "arbiter": arbiter}
    )
    with pytest.raises(NodeError, match=r"allows tools \['demo.nope@1.0.0'\]"):
        app.invoke({"task": "x"})
    assert model.requests == []


def test_scripted_model_running_dry_is_a_typed_error(arbiter: Arbiter) -> None:
    from stargraph.errors import LLMError

    model = ScriptedChatModel([calls((1, 1))])
    app = react_graph(tools=[ADD]).compile(services={"model": model, "arbiter": arbiter})
    with pytest.raises(LLMError):
        app.invoke({"task": "x"})
