"""Proposals (B14) and the built-in skill-builder / tool-builder SkillSpecs (A21).

The meta-tools run through a real arbiter; the builder runs against the scripted
OpenAI-compatible server through the real ``openai`` client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolError
from stargraph.llm import OpenAIChatModel
from stargraph.plugin import Registry
from stargraph.skills.machine import (
    ExecutableProposalError,
    InvalidProposalError,
    MachineRuntime,
    ProposalNotFoundError,
    ProposalStateError,
    ProposalStore,
    SkillSpecRegistry,
    builtin_skillspecs,
    parse_skillspec,
    proposal_tools,
    validator_tools,
)
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolCall, ToolRegistry, builtin_tools, llm_name_for, tool
from tests.skills.machine.test_machine_helpers import (
    MEMORY,
    MEMORY_FN,
    call,
    finish,
    memory_query,
    small_spec,
)
from tests.support import data

VALIDATE_FN = llm_name_for("skill.validate@1.0.0")
PROPOSE_SKILL_FN = llm_name_for("propose.skill@1.0.0")

GREETER: dict[str, Any] = {
    "name": "greeter",
    "description": "Greet someone by name.",
    "initial_state": "recall",
    "input_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
    "output_schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
    },
    "states": {
        "recall": {
            "objective": "Look the person up in memory.",
            "allowed_tools": ["choir.memory.query"],
            "transitions": [{"on": "complete", "to": "done"}],
        },
        "done": {"objective": "Greet them.", "terminal": True},
    },
    "max_steps": 5,
    "interruptible": True,
}
MANIFEST: dict[str, Any] = {
    "llm": {
        "name": "acme.greet",
        "description": "Greet someone.",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
    "runtime": {"version": "1.0.0", "timeout_ms": 5000, "side_effect": "none"},
}


def broken_greeter() -> dict[str, Any]:
    """GREETER with an unreachable state and a tool nobody registered."""
    doc = copy.deepcopy(GREETER)
    doc["states"]["orphan"] = {
        "objective": "Never reached.",
        "allowed_tools": ["acme.nuke"],
        "transitions": [{"on": "complete", "to": "done"}],
    }
    return doc


def _context(request: RecordedRequest) -> dict[str, Any]:
    text = request.messages[-1]["content"]
    context: dict[str, Any] = json.loads(text.split("\n", 1)[1])
    return context


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ProposalStore]:
    known: list[str] = []
    with ProposalStore(tmp_path / "proposals.db", tools=lambda: known) as proposals:
        proposals.known = known  # type: ignore[attr-defined]
        yield proposals


@pytest.fixture
def arbiter(tmp_path: Path, store: ProposalStore) -> Iterator[Arbiter]:
    known: list[str] = store.known  # type: ignore[attr-defined]
    registry = ToolRegistry.build(
        builtins=[
            memory_query,
            *builtin_tools(),
            *proposal_tools(store, session="s-14"),
            *validator_tools(tools=lambda: known),
        ]
    )
    known.extend(registry.ids)
    root = tmp_path / "ws"
    root.mkdir()
    with Arbiter(registry, workspace=root) as arb:
        yield arb


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


@pytest.fixture
def chat(server: ScriptedOpenAIServer) -> Iterator[OpenAIChatModel]:
    model = OpenAIChatModel(
        "gpt-test", base_url=server.base_url, api_key="sk-test", timeout=10.0, max_retries=0
    )
    yield model
    model.close()


def test_B14_meta_tools_only_create_pending_proposals(
    store: ProposalStore, arbiter: Arbiter, tmp_path: Path
) -> None:
    base = SkillSpecRegistry.build(builtins=[small_spec()])
    skill = arbiter.dispatch(
        ToolCall(tool="propose.skill", args={"spec": GREETER, "rationale": "users ask"})
    )
    config = arbiter.dispatch(
        ToolCall(tool="propose.config_change", args={"changes": {"model": "gpt-x"}}, lane="edge")
    )
    new_tool = arbiter.dispatch(ToolCall(tool="propose.tool", args={"manifest": MANIFEST}))
    ids: list[str] = [data(r)["proposal_id"] for r in (skill, config, new_tool)]
    for result, pid in zip((skill, config, new_tool), ids, strict=True):
        assert result.status == "success"
        assert result.payload == {"status": "pending", "proposal_id": pid}
    assert [(p.kind, p.status, p.lane) for p in store.list(status="pending")] == [
        ("skill", "pending", "core"),
        ("config_change", "pending", "edge"),
        ("tool", "pending", "core"),
    ]
    # Nothing executed or installed: the registries are what they were.
    assert "greeter" not in base
    assert "acme.greet" not in arbiter.registry
    # The meta-tools went through the arbiter's pipeline: the commit log has them.
    logged = [r.tool for r in arbiter.commit_log.records()]
    assert logged == [
        "propose.skill@1.0.0",
        "propose.config_change@1.0.0",
        "propose.tool@1.0.0",
    ]

    # Executable code is refused with a typed error; nothing is stored.
    with_exec = copy.deepcopy(MANIFEST)
    with_exec["runtime"]["exec_path"] = "/choir/tools/agent/greet"
    with pytest.raises(ToolError, match=r"ExecutableProposalError.*exec_path"):
        arbiter.dispatch(ToolCall(tool="propose.tool", args={"manifest": with_exec}))
    with pytest.raises(ExecutableProposalError) as caught:
        store.submit("tool", {"manifest": with_exec})
    assert [p.pointer for p in caught.value.problems] == [
        "proposal:tool#/manifest/runtime/exec_path"
    ]
    python_body = copy.deepcopy(GREETER)
    python_body["description"] = "import os\ndef run():\n    os.system('rm -rf /')\n"
    with pytest.raises(ExecutableProposalError, match="Python function definition"):
        store.submit("skill", {"spec": python_body})
    for changes in ({"hooks.on_start": "scripts/boot.sh"}, {"agent": {"command": "make"}}):
        with pytest.raises(ExecutableProposalError):
            store.submit("config_change", {"changes": changes})
    with pytest.raises(InvalidProposalError, match="unreachable states"):
        store.submit("skill", {"spec": broken_greeter()})
    assert len(store) == 3

    # Approval builds a new registry version; the old one is untouched.
    v2 = store.approve(ids[0], base)
    assert isinstance(v2, SkillSpecRegistry)
    assert "greeter" in v2
    assert "greeter" not in base
    assert v2.version != base.version
    approved = store.get(ids[0])
    assert (approved.status, approved.registry_version) == ("approved", v2.version)
    with pytest.raises(ProposalStateError, match="already approved"):
        store.approve(ids[0], base)
    # A tool proposal is approved with the implementation a human wrote.

    @tool(id="acme.greet@1.0.0")
    def greet(name: str) -> str:
        """Greet someone."""
        return f"hello {name}"

    tools_v2 = store.approve(ids[2], arbiter.registry, implementation=greet)
    assert "acme.greet" in tools_v2
    assert "acme.greet" not in arbiter.registry
    assert tools_v2.digest != arbiter.registry.digest
    # Rejection is recorded, durably.
    store.reject(ids[1], "not now")
    with ProposalStore(store.path) as reopened:
        rejected = reopened.get(ids[1])
        assert (rejected.status, rejected.reason) == ("rejected", "not now")
        assert [p.status for p in reopened.list()] == ["approved", "rejected", "approved"]
        assert [(e["proposal_id"], e["action"]) for e in reopened.log()][-3:] == [
            (ids[0], "approved"),
            (ids[2], "approved"),
            (ids[1], "rejected"),
        ]
        with pytest.raises(ProposalNotFoundError):
            reopened.get("prop-9999-deadbeef")


def test_B14_running_session_keeps_its_registry_version(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, store: ProposalStore
) -> None:
    v1 = SkillSpecRegistry.build(builtins=[small_spec()])
    changed = small_spec().to_json()
    changed["states"]["work"]["objective"] = "Do the NEW work."
    pid = store.submit("skill", {"spec": changed}).id
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=v1, session="old")
    versions: dict[str, SkillSpecRegistry] = {}

    def script(request: RecordedRequest) -> Reply:
        step: int = _context(request)["llm_step"]
        if step == 1:  # the run is under way: approve the change now
            versions["v2"] = store.approve(pid, v1)
            return call(MEMORY_FN, {"query": "x"})
        return [call("complete"), finish(answer="42")][step - 2]

    server.set_script(script)
    result = runtime.run("small")
    assert result.status == "done"
    # The running session went on with the version it started with.
    second = json.dumps(server.chat_requests[1].messages)
    assert "Do the work." in second
    assert "NEW" not in second
    assert runtime.skills["small"].states["work"].objective == "Do the work."
    v2 = versions["v2"]
    assert v2.version != v1.version
    assert v1["small"].states["work"].objective == "Do the work."
    # A session started on the new version sees the change.
    fresh_replies = [call("complete"), finish(answer="43")]
    server.set_script(lambda request: fresh_replies[_context(request)["llm_step"] - 1])
    fresh = MachineRuntime(model=chat, arbiter=arbiter, skills=v2, session="new")
    assert fresh.run("small").output == {"answer": "43"}
    assert "Do the NEW work." in json.dumps(server.chat_requests[-2].messages)
    # The plugin registry works the same way: with_skill gives a new version.
    plugin_v1 = Registry([])
    plugin_v2 = store.approve(store.submit("skill", {"spec": GREETER}).id, plugin_v1)
    assert (plugin_v1.version, plugin_v2.version) == (1, 2)
    assert "greeter" in plugin_v2.skills
    assert "greeter" not in plugin_v1.skills


def test_A21_builtin_builders_have_the_seed_shape(arbiter: Arbiter) -> None:
    builders = {s.name: s for s in builtin_skillspecs(tools=arbiter.registry)}
    assert sorted(builders) == ["skill-builder", "tool-builder"]
    for name, kind in (("skill-builder", "skill"), ("tool-builder", "tool")):
        spec = builders[name]
        edges = {(state, t.on, t.to) for state, s in spec.states.items() for t in s.transitions}
        assert edges == {
            ("understand", "complete", "design"),
            ("design", "complete", "validate"),
            ("design", "revise", "understand"),
            ("validate", "complete", "propose"),
            ("validate", "fail", "design"),
            ("propose", "complete", "done"),
            ("propose", "fail", "design"),
        }
        assert spec.states["done"].terminal
        allowed = {state: s.allowed_tools for state, s in spec.states.items()}
        assert allowed == {
            "understand": ("choir.memory.query", "choir.fs.read"),
            "design": ("choir.memory.query",),
            "validate": ("choir.memory.query", f"{kind}.validate"),
            "propose": (f"propose.{kind}",),
            "done": (),
        }
    # tool.validate is the real ToolSpec validator.
    bad = copy.deepcopy(MANIFEST)
    bad["llm"]["name"] = "NoNamespace"
    bad["runtime"]["exec_path"] = "./greet.sh"
    result = arbiter.dispatch(ToolCall(tool="tool.validate", args={"manifest": bad}))
    assert isinstance(result.payload, dict)
    assert result.payload["valid"] is False
    problems = " | ".join(str(p) for p in result.payload["problems"])  # type: ignore[union-attr]
    assert "exec_path" in problems
    assert "NoNamespace" in problems
    good = arbiter.dispatch(ToolCall(tool="tool.validate", args={"manifest": MANIFEST}))
    assert good.payload == {"valid": True, "problems": []}


def test_A21_skill_builder_runs_end_to_end_and_its_proposal_loads(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, store: ProposalStore
) -> None:
    builders = builtin_skillspecs(tools=arbiter.registry)
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=builders, session="s-a21")

    def pending_id() -> str:
        return store.list(status="pending")[0].id

    plan = {
        "skill-builder": [
            lambda: call(MEMORY_FN, {"query": "greeting workflow"}),  # understand
            lambda: call("complete"),
            lambda: call("complete"),  # design
            lambda: call(VALIDATE_FN, {"spec": broken_greeter()}),  # validate: problems
            lambda: call("fail"),  # back to design
            lambda: call("complete"),  # design again
            lambda: call(VALIDATE_FN, {"spec": GREETER}),  # validate: clean
            lambda: call("complete"),
            lambda: call(PROPOSE_SKILL_FN, {"spec": GREETER, "rationale": "asked for"}),
            lambda: call("complete"),
            lambda: finish(proposal_id=pending_id(), status="pending"),  # done
        ],
        "greeter": [lambda: call("complete"), lambda: finish(greeting="hello Ada")],
    }

    def script(request: RecordedRequest) -> Reply:
        context = _context(request)
        step: int = context["llm_step"]
        return plan[context["skill"]][step - 1]()

    server.set_script(script)
    result = runtime.run("skill-builder", {"request": "a skill that greets people"})
    assert (result.status, result.reason) == ("done", "done")
    [proposal] = store.list()
    assert result.output == {"proposal_id": proposal.id, "status": "pending"}
    path = [(t["from"], t["on"], t["to"]) for t in result.transitions]
    assert path == [
        ("understand", "complete", "design"),
        ("design", "complete", "validate"),
        ("validate", "fail", "design"),
        ("design", "complete", "validate"),
        ("validate", "complete", "propose"),
        ("propose", "complete", "done"),
    ]
    # The validate step ran the real validator through the arbiter.
    checks = [
        json.loads(arbiter.artifacts.get(r.artifact_ref))
        for r in arbiter.commit_log.records()
        if r.tool == "skill.validate@1.0.0" and r.artifact_ref
    ]
    assert [e.data["tool"] for e in result.events if e.kind == "tool"].count(
        "skill.validate@1.0.0"
    ) == 2
    assert [c["valid"] for c in checks] == [False, True]
    first = " | ".join(checks[0]["problems"])
    assert "unreachable states" in first
    assert "orphan" in first
    assert "'acme.nuke', which is not in the tool registry" in first
    # Nothing was installed by the run: the proposal is pending.
    assert (proposal.kind, proposal.status, proposal.subject) == ("skill", "pending", "greeter")
    assert "greeter" not in runtime.skills
    # A human approves: the new registry version has the skill, and it loads and runs.
    v1 = SkillSpecRegistry.build(builtins=builders, tools=arbiter.registry)
    v2 = store.approve(proposal.id, v1)
    assert "greeter" not in v1
    assert v2["greeter"].to_json() == parse_skillspec(GREETER, tools=arbiter.registry).to_json()
    assert v2["greeter"].states["recall"].allowed_tools == ("choir.memory.query",)
    fresh = MachineRuntime(model=chat, arbiter=arbiter, skills=v2, session="s-a21b")
    assert fresh.run("greeter", {"name": "Ada"}).output == {"greeting": "hello Ada"}
    assert store.get(proposal.id).registry_version == v2.version
    assert MEMORY in {r.tool for r in arbiter.commit_log.records()}
