"""Running SkillSpecs against the scripted OpenAI-compatible server: rows A9-A20, the
``build_feature`` example end to end, and mounting through ``SubgraphNode.from_skill``."""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, JsonValue

from stargraph import reducers
from stargraph.errors import (
    InvalidInputError,
    LaneBusyError,
    SkillValidationError,
    ToolNotAllowedError,
)
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.skills import SkillKind
from stargraph.skills.machine import (
    MachineEvent,
    MachineRuntime,
    compile_skillspec,
    parse_skillspec,
    skillspec_graph,
    transition_records,
)
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolCall
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    HAPPY_PATH,
    MEMORY,
    MEMORY_FN,
    QUERIES,
    READ_FN,
    WRITE_FN,
    _reset,
    arbiter,
    call,
    chat,
    example_spec,
    finish,
    runtime,
    server,
    small_spec,
)

OBJECTIVES = {
    "understand": "Clarify and restate the requirement.",
    "plan": "Produce an implementation plan.",
    "modify": "Apply changes to files.",
    "validate": "Verify correctness.",
}


def _offered(request: RecordedRequest) -> list[str]:
    assert request.body is not None
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def _context(request: RecordedRequest) -> dict[str, Any]:
    text = request.messages[-1]["content"]
    assert text.startswith("## Execution context\n")
    return json.loads(text.split("\n", 1)[1])  # type: ignore[no-any-return]


def _rejections(request: RecordedRequest) -> list[dict[str, Any]]:
    return [n["data"] for n in _context(request)["notes"] if n["kind"] == "rejection"]


def test_build_feature_example_runs_to_done_and_logs_every_transition(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter
) -> None:
    server.set_script(HAPPY_PATH)
    result = runtime.run("build_feature", {"feature": "login page"})
    assert (result.status, result.reason, result.state) == ("done", "done", "done")
    assert result.output == {"summary": "added the login page", "files_changed": []}
    assert result.stopped_by == "machine/done"
    assert result.llm_steps == 6 == len(server.chat_requests)
    path = [(t["from"], t["on"], t["to"]) for t in result.transitions]
    assert path == [
        ("understand", "complete", "plan"),
        ("plan", "complete", "modify"),
        ("modify", "complete", "validate"),
        ("validate", "complete", "done"),
    ]
    logged = [
        (e.data["from"], e.data["on"], e.data["to"])
        for e in result.events
        if e.kind == "transition"
    ]
    assert logged == path
    assert [(r["from"], r["on"], r["to"]) for r in transition_records(arbiter)] == path
    assert QUERIES == ["login page"]


def test_A9_prompt_holds_context_memory_objective_and_step_context_only(
    server: ScriptedOpenAIServer, runtime: MachineRuntime
) -> None:
    server.set_script(HAPPY_PATH)
    runtime.start("build_feature", {"feature": "login"}, memory="User prefers Python.").result()
    plan = server.chat_requests[2]  # understand(tool), understand(complete), plan
    messages = plan.messages
    assert messages[0] == {
        "role": "system",
        "content": (
            "Be terse.\n\n## Skills you may run\n"
            "- build_feature: Implement a feature end-to-end.\n\n"
            "## Memory\nUser prefers Python."
        ),
    }
    assert messages[1]["content"] == (
        "## Schema: build_feature\nImplement a feature end-to-end.\n"
        "### State: plan\nProduce an implementation plan."
    )
    assert messages[2] == {"role": "user", "content": '## Input\n{"feature":"login"}'}
    assert _context(plan) == {
        "skill": "build_feature",
        "state": "plan",
        "llm_step": 3,
        "max_steps": 20,
        "notes": [],
    }
    text = json.dumps(plan.body)
    for state, objective in OBJECTIVES.items():
        assert (objective in text) == (state == "plan")
    assert "initial_state" not in text
    assert "interruptible" not in text
    # Step context is structured: the tool result of the first step is a note, not prose.
    notes = _context(server.chat_requests[1])["notes"]
    assert notes == [
        {
            "llm_step": 1,
            "kind": "tool_result",
            "data": {
                "tool": MEMORY,
                "status": "success",
                "summary": "memory has nothing about login page",
            },
        }
    ]


def test_A10_offered_exactly_allowed_tools_transitions_and_finish_in_terminal(
    server: ScriptedOpenAIServer, runtime: MachineRuntime
) -> None:
    server.set_script(HAPPY_PATH)
    runtime.run("build_feature", {"feature": "x"})
    offered = [_offered(r) for r in server.chat_requests]
    assert offered == [
        [MEMORY_FN, "complete"],
        [MEMORY_FN, "complete"],
        [MEMORY_FN, "complete", "revise"],
        [READ_FN, WRITE_FN, "complete"],
        [READ_FN, "complete", "fail"],
        ["finish"],
    ]
    last = server.chat_requests[-1].body
    assert last is not None
    assert all(t["type"] == "function" for t in last["tools"])
    assert last["tools"][0]["function"]["parameters"] == example_spec().output_schema


def test_A11_tool_not_allowed_rejection(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter, tmp_path: Path
) -> None:
    server.set_script([call(WRITE_FN, {"path": "hack.txt", "content": "x"}), *HAPPY_PATH[1:]])
    result = runtime.run("build_feature", {"feature": "x"})
    assert result.status == "done"
    assert _rejections(server.chat_requests[1]) == [
        {
            "code": "tool_not_allowed",
            "state": "understand",
            "proposed": WRITE_FN,
            "allowed_tools": ["choir.memory.query"],
            "valid_transitions": [{"on": "complete", "to": "plan"}],
            "retries_left": 2,
        }
    ]
    assert not (tmp_path / "ws" / "hack.txt").exists()
    refused = [r for r in arbiter.commit_log.records() if r.tool == "choir.fs.write@1.0.0"]
    assert [r.status for r in refused] == ["denied"]


def test_A12_invalid_transition_and_finish_not_terminal_share_the_shape(
    server: ScriptedOpenAIServer, runtime: MachineRuntime
) -> None:
    server.set_script([call("fail"), finish(summary="early", files_changed=[]), *HAPPY_PATH])
    result = runtime.run("build_feature", {"feature": "x"})
    assert result.status == "done"
    first, second = _rejections(server.chat_requests[1]), _rejections(server.chat_requests[2])
    assert first[0]["code"] == "invalid_transition"
    assert first[0]["proposed"] == "fail"
    assert second[1]["code"] == "finish_not_terminal"
    assert second[1]["retries_left"] == 1
    for rejection in second:
        assert set(rejection) == {
            "code",
            "state",
            "proposed",
            "allowed_tools",
            "valid_transitions",
            "retries_left",
        }
        assert rejection["valid_transitions"] == [{"on": "complete", "to": "plan"}]


def test_A13_valid_transition_appends_to_the_commit_log(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter
) -> None:
    server.set_script(HAPPY_PATH)
    runtime.run("build_feature", {"feature": "x"})
    first = transition_records(arbiter)[0]
    assert {k: first[k] for k in ("skill", "from", "to", "on", "step")} == {
        "skill": "build_feature",
        "from": "understand",
        "to": "plan",
        "on": "complete",
        "step": 2,
    }
    assert arbiter.commit_log.verify_chain() is None
    statuses = [r.status for r in arbiter.commit_log.records()]
    assert statuses == ["success", "transition", "transition", "transition", "transition"]


def test_A22_every_step_system_prompt_summarises_the_skills_with_their_descriptions(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    runtime = MachineRuntime(
        model=chat, arbiter=arbiter, skills=[small_spec(), example_spec()], context="Be terse."
    )
    summary = (
        "## Skills you may run\n"
        "- build_feature: Implement a feature end-to-end.\n"
        "- small: A small skill."
    )
    assert runtime.skills_summary() == summary
    server.set_script([call("complete"), finish(answer="42")])
    assert runtime.run("small").status == "done"
    assert len(server.chat_requests) == 2
    for request in server.chat_requests:
        system = request.messages[0]
        assert system == {"role": "system", "content": f"Be terse.\n\n{summary}"}
    # A skill that is not running shows its description only, never its states' objectives.
    text = json.dumps([r.body for r in server.chat_requests])
    assert not any(objective in text for objective in OBJECTIVES.values())
    assert MachineRuntime(model=chat, arbiter=arbiter).skills_summary() == ""


def test_A14_third_invalid_proposal_fires_the_error_transition(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec()])
    server.set_script([call("nope"), call("nope"), call("nope"), call("complete")])
    result = runtime.run("small")
    assert (result.status, result.reason, result.state) == (
        "error",
        "retry_budget_exhausted",
        "error",
    )
    assert result.stopped_by == "machine/retry_budget_exhausted"
    assert len(server.chat_requests) == 3
    retries = [e.data["retries_left"] for e in result.events if e.kind == "rejected"]
    assert retries == [2, 1, 0]
    assert result.transitions[-1]["to"] == "error"

    # A valid proposal resets the counter: two rejections, a valid tool call, two more
    # rejections, then the transition. Without the reset the fourth invalid proposal would
    # be the third in a row and end the skill in "error".
    before = len(server.chat_requests)
    server.set_script(
        [
            call("nope"),
            call("nope"),
            call(MEMORY_FN, {"query": "q"}),
            call("nope"),
            call("nope"),
            call("complete"),
            finish(answer="42"),
        ]
    )
    # Seven LLM steps: more than small_spec's default max_steps of 6.
    roomy = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec(max_steps=10)])
    again = roomy.run("small")
    assert (again.status, again.output) == ("done", {"answer": "42"})
    # Every scripted reply reached the model, from the script's first one.
    assert len(server.chat_requests) - before == 7
    retries = [e.data["retries_left"] for e in again.events if e.kind == "rejected"]
    assert retries == [2, 1, 2, 1]
    assert QUERIES == ["q"]


def test_A15_max_steps_counts_llm_steps_and_force_terminates(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec(max_steps=3)])
    server.set_script(lambda _: call(MEMORY_FN, {"query": "again"}))
    result = runtime.run("small")
    assert (result.status, result.reason) == ("error", "max_steps_exceeded")
    assert result.stopped_by == "machine/max_steps_exceeded"
    assert result.llm_steps == 3 == len(server.chat_requests) == len(QUERIES)
    decided = [e.rule for e in result.stream if e.kind == "rule_decided"]
    assert decided == ["machine/max_steps", "machine/max_steps_exceeded"]


def _cancel_on_second_request(runtime: MachineRuntime) -> Any:
    """A script answering the happy path that cancels the lane while answering request 2."""
    seen: list[RecordedRequest] = []

    def script(request: RecordedRequest) -> Reply:
        seen.append(request)
        if len(seen) == 2:
            runtime.cancel("core")
        return HAPPY_PATH[len(seen) - 1]

    return script


def test_A16_cancel_stops_an_interruptible_skill_at_the_next_step_boundary(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[example_spec()])
    server.set_script(_cancel_on_second_request(runtime))
    result = runtime.run("build_feature", {"feature": "x"})
    assert (result.status, result.reason, result.state) == ("cancelled", "cancelled", "plan")
    assert result.stopped_by == "machine/cancelled"
    # The step in flight finished (its transition is logged); no further LLM call was made.
    assert len(server.chat_requests) == 2
    assert [t["to"] for t in result.transitions] == ["plan"]
    assert runtime.cancel("core") == "not_running"


def test_A16_non_interruptible_skill_defers_cancel_to_a_terminal_state(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    doc = example_spec().to_json()
    doc["interruptible"] = False
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[parse_skillspec(doc)])
    server.set_script(_cancel_on_second_request(runtime))
    result = runtime.run("build_feature", {"feature": "x"})
    assert (result.status, result.state) == ("done", "done")
    assert [e.kind for e in result.events].count("cancel_deferred") == 1


def test_A17_one_active_skill_per_lane(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec()])
    gate = threading.Event()

    def script(request: RecordedRequest) -> Reply:
        gate.wait(5)
        return call("complete") if "finish" not in _offered(request) else finish(answer="a")

    server.set_script(script)
    first = runtime.start("small", lane="core")
    with pytest.raises(LaneBusyError, match="lane 'core' already runs skill 'small'"):
        runtime.start("small", lane="core")
    gate.set()
    assert first.result().status == "done"
    assert runtime.start("small", lane="core").result().status == "done"
    # Choir profile: a SkillSpec cannot declare skills to spawn (nesting depth 1).
    doc = small_spec().to_json()
    doc["states"]["work"]["spawns"] = ["other"]
    with pytest.raises(SkillValidationError, match="unknown state field 'spawns'"):
        parse_skillspec(doc)


def test_A18_input_and_output_are_validated(
    server: ScriptedOpenAIServer, runtime: MachineRuntime
) -> None:
    with pytest.raises(InvalidInputError, match="feature"):
        runtime.start("build_feature", {"feature": 3})
    assert server.chat_requests == []
    server.set_script([*HAPPY_PATH[:5], finish(summary=1), HAPPY_PATH[5]])
    result = runtime.run("build_feature", {"feature": "x"})
    assert result.status == "done"
    rejected = [e.data for e in result.events if e.kind == "rejected"]
    assert [r["code"] for r in rejected] == ["invalid_output"]
    notes = _context(server.chat_requests[-1])["notes"]
    assert any("summary" in problem for problem in notes[0]["data"]["problems"])


def test_A19_skill_code_holds_no_tool_handle(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter, tmp_path: Path
) -> None:
    skill = compile_skillspec(example_spec())
    ir = skill.subgraph
    assert ir is not None
    assert not isinstance(ir, str)
    refs = {n.ref for n in ir.nodes}  # type: ignore[union-attr]
    assert refs == {
        "stargraph.skills.machine._compile:machine_step",
        "stargraph.skills.machine._compile:machine_stop",
    }
    # Node configs are data (hashed JSON), never a callable or a tool object.
    json.dumps([n.config for n in ir.nodes])  # type: ignore[union-attr]
    # The allowlist the step node passes is enforced by the arbiter itself: even a caller
    # that skipped the state machine cannot run a tool the state does not allow.
    with pytest.raises(ToolNotAllowedError):
        arbiter.dispatch(
            ToolCall(
                tool=WRITE_FN,
                args={"path": "x.txt", "content": "x"},
                state="understand",
                allowed=("choir.memory.query",),
            )
        )
    assert not (tmp_path / "ws" / "x.txt").exists()
    server.set_script(HAPPY_PATH)
    runtime.run("build_feature", {"feature": "x"})
    calls = [r for r in arbiter.commit_log.records() if r.status == "success"]
    assert len(calls) == len(QUERIES) == 1  # every tool body ran through the arbiter


def test_A20_every_event_carries_session_lane_skill_step_lineage(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter
) -> None:
    server.set_script(HAPPY_PATH)
    result = runtime.run("build_feature", {"feature": "x"}, lane="edge")
    assert result.events
    for event in result.events:
        assert isinstance(event, MachineEvent)
        assert (event.session, event.lane, event.skill) == ("s-1", "edge", "build_feature")
        assert event.step >= 1
    for record in transition_records(arbiter):
        assert (record["session"], record["lane"], record["skill"]) == (
            "s-1",
            "edge",
            "build_feature",
        )
        assert record["step"] >= 1
    assert {r.lane for r in arbiter.commit_log.records()} == {"edge"}


class Parent(BaseModel):
    input: dict[str, JsonValue] = {}
    status: str = ""
    reason: str | None = None
    output: dict[str, JsonValue] | None = None
    state: str = ""
    llm_steps: int = 0
    transitions: Annotated[list[dict[str, JsonValue]], reducers.append] = []
    events: Annotated[list[MachineEvent], reducers.append] = []
    after: str = ""


def report(state: Parent) -> dict[str, Any]:
    return {"after": f"skill ended {state.status}"}


def test_compiled_skillspec_mounts_via_subgraph_node(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    spec = example_spec()
    skill = compile_skillspec(spec)
    assert (skill.kind, skill.name) == (SkillKind.AGENT, "build-feature")
    parent = (
        Graph("parent", state=Parent)
        .with_node(SubgraphNode.from_skill(skill, site="build", max_steps=spec.max_steps + 2))
        .with_node("report", report)
        .with_edge(START, "build")
        .with_edge("build", "report")
        .with_edge("report", END)
    )
    server.set_script(HAPPY_PATH)
    app = parent.compile(services={"model": chat, "arbiter": arbiter})
    final = app.invoke({"input": {"feature": "x"}})
    assert (final.status, final.state, final.after) == ("done", "done", "skill ended done")
    assert len(final.transitions) == 4


def test_objectives_and_allowlists_are_part_of_the_hash() -> None:
    spec = example_spec()
    base = skillspec_graph(spec).graph_hash
    doc = spec.to_json()
    doc["states"]["plan"]["objective"] = "Produce a better plan."
    assert skillspec_graph(parse_skillspec(doc)).graph_hash != base
    doc = spec.to_json()
    doc["states"]["plan"]["allowed_tools"] = []
    assert skillspec_graph(parse_skillspec(doc)).graph_hash != base
    assert skillspec_graph(parse_skillspec(spec.to_json())).graph_hash == base
