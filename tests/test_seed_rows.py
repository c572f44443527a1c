"""Seed rows proven on the real paths: E2 enforced where skills are registered, compiled (from
a graph and from IR JSON) and mounted; the registry's tool-presence check; decision 3
(configurable nesting depth, the Choir profile: a skill cannot start a skill); E8 for sets
inside nested models; A11 for a skill state without an allowlist."""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stargraph.checkpoint import MemoryStore
from stargraph.compile import compile_ir
from stargraph.errors import (
    MissingServiceError,
    SkillValidationError,
    ToolError,
    ToolNotAllowedError,
)
from stargraph.graph import END, START, Graph
from stargraph.ir import GraphIR, SubgraphNodeIR
from stargraph.nodes import SubgraphNode, nesting_chain
from stargraph.plugin import Registry, get_plugin_manager, hookimpl
from stargraph.skills import (
    CHOIR_NESTING,
    DEFAULT_NESTING,
    NestingProfile,
    Skill,
    SkillKind,
    builtin_side_effects,
)
from stargraph.skills.markdown import parse_skill_md, skill_md_loaders
from stargraph.skills.refs.autoresearch import RETRIEVE_TOOL, autoresearch_skill
from stargraph.tools import Arbiter, ToolCall, ToolOutput, ToolRegistry, failure_of, tool

WRITE_EXEC = ("choir.fs.write@1.0.0", "choir.exec@1.0.0")


class Out(BaseModel):
    answer: str = ""


def answer(state: Out) -> dict[str, Any]:
    return {"answer": "42"}


def small_graph(name: str = "scrub") -> Graph[Out]:
    return (
        Graph(name, state=Out)
        .with_node("answer", answer)
        .with_edge(START, "answer")
        .with_edge("answer", END)
    )


def make_skill(
    kind: str = "utility", tools: tuple[str, ...] = WRITE_EXEC, name: str = "scrub"
) -> Skill:
    """A skill built directly (no compile-time check), as a plugin or loader could."""
    ir = small_graph(name).to_ir().model_copy(update={"outputs": ("answer",)})
    return Skill(
        name=name,
        version="1.0.0",
        kind=kind,
        description="d",
        subgraph=GraphIR.model_validate(ir.model_dump()),
        state_schema=Out,
        tools=tools,
    )


def refusal(exc: SkillValidationError) -> list[str]:
    return sorted(p.message for p in exc.problems)


UTILITY_REFUSAL = [
    "utility skill uses tool 'choir.exec@1.0.0' whose side effect is 'write'",
    "utility skill uses tool 'choir.fs.write@1.0.0' whose side effect is 'write'",
]


class Provides:
    def __init__(self, *skills: Skill, tools: tuple[Any, ...] = ()) -> None:
        self.skills = skills
        self.tools = tools

    @hookimpl
    def register_skills(self, register: Any) -> None:
        for skill in self.skills:
            register(skill)

    @hookimpl
    def register_tools(self, register: Any) -> None:
        for item in self.tools:
            register(item)


def registry_of(*skills: Skill, tools: tuple[Any, ...] = (), **options: Any) -> Registry:
    pm = get_plugin_manager(plugins=[Provides(*skills, tools=tools)], entry_points=False)
    return Registry.build(pm, **options)


@tool(id="web.search@1.0.0", side_effect="read")
def web_search(query: str) -> ToolOutput:
    """Search the web."""
    return ToolOutput(summary=query)


@tool(id="mail.send@1.0.0", side_effect="external")
def mail_send(to: str) -> ToolOutput:
    """Send a mail."""
    return ToolOutput(summary=to)


# --------------------------------------------------------------------------- E2


def test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_registered() -> None:
    with pytest.raises(SkillValidationError) as info:
        registry_of(make_skill())
    assert refusal(info.value) == UTILITY_REFUSAL
    assert sorted(p.pointer.rsplit(": ", 1)[1] for p in info.value.problems) == [
        "skills/scrub/tools/0",
        "skills/scrub/tools/1",
    ]
    # The same tools in a workflow skill are fine: the rule is the utility kind's.
    assert "scrub" in registry_of(make_skill(kind="workflow")).skills
    # A new registry version (an approved proposal) is held to the same rule.
    base = registry_of()
    with pytest.raises(SkillValidationError, match="utility skill uses tool"):
        base.with_skill(make_skill())
    assert base.with_skill(make_skill(kind="agent")).version == base.version + 1


def test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_compiled() -> None:
    with pytest.raises(SkillValidationError) as info:
        Skill.from_graph(
            small_graph(),
            name="scrub",
            version="1.0.0",
            kind="utility",
            description="d",
            state_schema=Out,
            tools=WRITE_EXEC,
        )
    assert refusal(info.value) == UTILITY_REFUSAL
    # A tool the compile step is told about counts too: an external one is refused.
    with pytest.raises(SkillValidationError, match=r"'mail\.send@1\.0\.0' whose side effect is"):
        Skill.from_graph(
            small_graph(),
            known_tools=[mail_send],
            name="mailer",
            version="1.0.0",
            kind="utility",
            description="d",
            state_schema=Out,
            tools=("mail.send@1.0.0",),
        )
    # A SKILL.md utility workflow compiles through the same check, named by file.
    text = (
        "---\nname: scrub\ndescription: d\nkind: utility\n"
        "tools: [choir.fs.read@1.0.0, choir.fs.write@1.0.0]\n"
        "workflow:\n  - {step: read, tool: choir.fs.read@1.0.0, params: {path: a}}\n"
        "  - {step: write, tool: choir.fs.write@1.0.0, params: {path: b, content: c}}\n---\n"
    )
    with pytest.raises(SkillValidationError) as md:
        parse_skill_md(text, source="skills/scrub/SKILL.md")
    assert [p.pointer for p in md.value.problems] == ["skills/scrub/SKILL.md#/tools/1"]
    parse_skill_md(text.replace("kind: utility", "kind: workflow"), source="ok.md")


def test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_mounted() -> None:
    with pytest.raises(SkillValidationError) as info:
        SubgraphNode.from_skill(make_skill(), site="s")
    assert refusal(info.value) == UTILITY_REFUSAL
    read_only = make_skill(tools=("choir.fs.read@1.0.0",))
    graph = small_graph("parent").with_node(SubgraphNode.from_skill(read_only, site="s"))
    assert "s" in {n.id for n in graph.to_ir().nodes}
    with pytest.raises(SkillValidationError, match=r"'mail\.send@1\.0\.0' whose side effect"):
        SubgraphNode.from_skill(
            make_skill(tools=("mail.send@1.0.0",)), site="s", known_tools=[mail_send]
        )


def test_E2_registry_build_requires_a_skills_tools_to_be_registered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    searcher = make_skill(kind="agent", tools=("web.search@1.0.0",), name="searcher")
    with pytest.raises(SkillValidationError) as info:
        registry_of(searcher)
    assert refusal(info.value) == ["tool 'web.search@1.0.0' is not registered"]
    assert info.value.problems[0].pointer.endswith("skills/searcher/tools/0")
    assert "searcher" in registry_of(searcher, tools=(web_search,)).skills
    # A skill file naming an unregistered tool: strict fails, lenient skips and reports it.
    folder = tmp_path / "agent" / "finder"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: finder\ndescription: d\nkind: agent\ntools: [web.search@1.0.0]\n---\n"
    )
    options: dict[str, Any] = {"agent_dir": tmp_path / "agent", "skill_loaders": skill_md_loaders()}
    with pytest.raises(SkillValidationError, match=r"'web\.search@1\.0\.0' is not registered"):
        registry_of(**options)
    with caplog.at_level(logging.WARNING, logger="stargraph.registry"):
        lenient = registry_of(strict=False, **options)
    assert "finder" not in lenient.skills
    assert lenient.report.skipped == (str(folder / "SKILL.md"),)
    assert (lenient.report.loaded, lenient.report.total_on_disk) == (0, 1)
    assert "web.search@1.0.0" in caplog.text
    assert "finder" in registry_of(tools=(web_search,), **options).skills


def test_E2_default_registry_registers_every_reference_skill_tool(tmp_path: Path) -> None:
    registry = Registry.build(get_plugin_manager(entry_points=False))
    assert set(autoresearch_skill.tools) <= set(registry.tools)
    assert registry.tools[RETRIEVE_TOOL].spec.side_effect == "read"
    # Registered unbound: a call says how to bind it to stores instead of inventing results.
    with (
        registry.arbiter(tmp_path) as arbiter,
        pytest.raises(ToolError, match=r"bound to no passage store.*research_arbiter"),
    ):
        arbiter.dispatch(ToolCall(tool=RETRIEVE_TOOL, args={"query": "x"}))
    assert builtin_side_effects()["choir.exec@1.0.0"] == "write"


def mounted(skill: Skill, site: str) -> Graph[Out]:
    """A parent graph running ``skill`` mounted at ``site`` as its only node."""
    node = SubgraphNode.from_skill(skill, site=site)
    return Graph("parent", state=Out).with_node(node).with_edge(START, site).with_edge(site, END)


def _retyped(graph: Graph[Out], kind: Any) -> GraphIR:
    """``graph``'s IR as JSON with the mounted skill's recorded kind changed to ``kind``, as
    an IR written by hand, by another implementation or edited after export could say."""
    data = json.loads(graph.to_ir().to_json())
    (node,) = [n for n in data["nodes"] if n["kind"] == "subgraph"]
    node["metadata"]["skill_kind"] = kind
    return GraphIR.from_json(json.dumps(data))


def test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_compiled_from_ir() -> None:
    agent = make_skill(kind="agent")
    graph = mounted(agent, "s")
    (node,) = [n for n in graph.to_ir().nodes if isinstance(n, SubgraphNodeIR)]
    assert node.metadata == {"skill_kind": "agent", "skill_tools": list(WRITE_EXEC)}
    Graph(GraphIR.from_json(graph.to_ir().to_json()), state=Out).compile()  # an agent may
    utility = _retyped(graph, "utility")
    assert utility.graph_hash == graph.graph_hash  # declarations, not hashed behaviour
    with pytest.raises(SkillValidationError) as info:
        Graph(utility, state=Out).compile()
    assert sorted((p.pointer, p.message) for p in info.value.problems) == [
        (
            "/nodes/0/metadata/skill_tools/0",
            "node 's' (skill scrub@1.0.0): utility skill uses tool 'choir.fs.write@1.0.0' "
            "whose side effect is 'write'",
        ),
        (
            "/nodes/0/metadata/skill_tools/1",
            "node 's' (skill scrub@1.0.0): utility skill uses tool 'choir.exec@1.0.0' whose "
            "side effect is 'write'",
        ),
    ]
    with pytest.raises(SkillValidationError, match="utility skill uses tool"):
        compile_ir(utility, state=Out)
    for bad in ("wizard", ["utility"]):
        with pytest.raises(SkillValidationError, match=r"declares skill kind .*no skill kind"):
            Graph(_retyped(graph, bad), state=Out).compile()


def test_E2_ir_compile_judges_tools_by_the_arbiter_it_is_given(tmp_path: Path) -> None:
    mailer = make_skill(tools=("mail.send@1.0.0",), name="mailer")
    # Mounted without known_tools: mail.send is judged when its side effect is known.
    graph = mounted(mailer, "m")
    graph.compile()
    with Arbiter(ToolRegistry.build(builtins=[mail_send]), workspace=tmp_path) as arbiter:
        with pytest.raises(SkillValidationError, match=r"'mail\.send@1\.0\.0' whose side effect"):
            graph.compile(services={"arbiter": arbiter})
        read_only = make_skill(tools=("web.search@1.0.0",), name="finder")
        fine = mounted(read_only, "f")
        with Arbiter(ToolRegistry.build(builtins=[web_search]), workspace=tmp_path) as reader:
            fine.compile(services={"arbiter": reader})


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["utility", "agent", "workflow"])
    | st.sampled_from(WRITE_EXEC) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=_JSON, tools=_JSON)
def test_E2_any_recorded_kind_and_tools_compile_or_raise_only_skill_validation_errors(
    kind: Any, tools: Any
) -> None:
    data = json.loads(mounted(make_skill(kind="agent"), "s").to_ir().to_json())
    (node,) = [n for n in data["nodes"] if n["kind"] == "subgraph"]
    node["metadata"] = {"skill_kind": kind, "skill_tools": tools}
    with contextlib.suppress(SkillValidationError):
        Graph(GraphIR.from_json(json.dumps(data)), state=Out).compile()


def llm(state: Out) -> dict[str, Any]:
    return {"answer": "routed"}


def route(state: Out) -> str:
    return "end"


def test_E2_workflow_skill_routing_on_an_llm_node_is_refused_where_compiled_from_ir() -> None:
    child = (
        Graph("router", state=Out)
        .with_node("llm", llm, must_stub=True)
        .with_edge(START, "llm")
        .with_conditional_edges("llm", route, {"end": END})
    )
    routed = Skill.from_graph(
        child, name="router", version="1.0.0", kind="agent", description="d", state_schema=Out
    )
    graph = mounted(routed, "r")
    graph.compile()
    with pytest.raises(SkillValidationError) as info:
        Graph(_retyped(graph, "workflow"), state=Out).compile()
    assert [(p.pointer, p.message) for p in info.value.problems] == [
        (
            "/nodes/0/subgraph/edges/0",
            "node 'r' (skill router@1.0.0): workflow skill routes on the output of LLM node 'llm'",
        )
    ]


def plain(state: Out) -> dict[str, Any]:
    return {"answer": state.answer + "."}


def two_hops(*, check: bool = False) -> Graph[Out]:
    """llm -> copy -> judge -> router: the model's answer reaches the router two nodes on."""
    return (
        Graph("hops", state=Out)
        .with_node("llm", llm, must_stub=True)
        .with_node("copy", plain)
        .with_node("judge", plain, metadata={"check": True} if check else None)
        .with_edge(START, "llm")
        .with_edge("llm", "copy")
        .with_edge("copy", "judge")
        .with_conditional_edges("judge", route, {"end": END})
    )


def as_workflow(graph: Graph[Out], name: str = "hops") -> Skill:
    return Skill.from_graph(
        graph, name=name, version="1.0.0", kind="workflow", description="d", state_schema=Out
    )


def test_E2_a_router_two_plain_nodes_after_an_llm_node_is_refused_naming_the_path() -> None:
    with pytest.raises(SkillValidationError) as info:
        as_workflow(two_hops())
    assert [(p.pointer, p.message) for p in info.value.problems] == [
        (
            "/subgraph/edges/0",
            "workflow skill routes at 'judge' on state LLM node 'llm' wrote before it "
            "(path llm -> copy -> judge)",
        )
    ]
    # The same graph is a fine agent skill, and a declared check of the model's output by
    # code may route in a workflow.
    Skill.from_graph(
        two_hops(), name="hops", version="1.0.0", kind="agent", description="d", state_schema=Out
    )
    assert as_workflow(two_hops(check=True)).kind is SkillKind.WORKFLOW


def test_E2_a_router_after_a_subgraph_that_calls_a_model_is_refused() -> None:
    # The LLM node sits inside a mounted agent skill: its output reaches the parent's router.
    inner = Skill.from_graph(
        Graph("inner", state=Out).with_node("llm", llm, must_stub=True).with_edge(START, "llm"),
        name="inner",
        version="1.0.0",
        kind="agent",
        description="d",
        state_schema=Out,
    )
    outer = (
        Graph("outer", state=Out)
        .with_node(SubgraphNode.from_skill(inner, site="ask"))
        .with_node("copy", plain)
        .with_edge(START, "ask")
        .with_edge("ask", "copy")
        .with_conditional_edges("copy", route, {"end": END})
    )
    with pytest.raises(SkillValidationError) as info:
        as_workflow(outer, "outer")
    assert [p.message for p in info.value.problems] == [
        "workflow skill routes at 'copy' on state subgraph node 'ask' (its graph calls a "
        "model) wrote before it (path ask -> copy)"
    ]


def test_E2_a_routed_path_is_refused_where_a_workflow_skill_is_compiled_from_ir() -> None:
    routed = Skill.from_graph(
        two_hops(), name="hops", version="1.0.0", kind="agent", description="d", state_schema=Out
    )
    graph = mounted(routed, "r")
    graph.compile()
    with pytest.raises(SkillValidationError) as info:
        Graph(_retyped(graph, "workflow"), state=Out).compile()
    assert [(p.pointer, p.message) for p in info.value.problems] == [
        (
            "/nodes/0/subgraph/edges/0",
            "node 'r' (skill hops@1.0.0): workflow skill routes at 'judge' on state LLM node "
            "'llm' wrote before it (path llm -> copy -> judge)",
        )
    ]


# --------------------------------------------------------------------------- E12


SIDE_EFFECTS: list[str] = []


def before(state: Out) -> dict[str, Any]:
    SIDE_EFFECTS.append("before ran")
    return {"answer": "asked"}


def needs_a_model() -> Skill:
    """A skill declaring it needs ``services['model']`` (its node does not ask on this path,
    so only the declaration can stop a run that lacks it)."""
    return Skill.from_graph(
        small_graph("asker"),
        name="asker",
        version="1.0.0",
        kind="agent",
        description="d",
        state_schema=Out,
        requires=("service:model", "gpu:any"),
    )


def host() -> Graph[Out]:
    return (
        Graph("host", state=Out)
        .with_node("before", before)
        .with_node(SubgraphNode.from_skill(needs_a_model(), site="ask"))
        .with_edge(START, "before")
        .with_edge("before", "ask")
        .with_edge("ask", END)
    )


def test_E12_a_live_run_without_a_required_service_does_not_start() -> None:
    SIDE_EFFECTS.clear()
    store = MemoryStore()
    for app in (
        host().compile(store=store),
        host().compile(store=store, services={"arbiter": object()}),
        Graph(GraphIR.from_json(host().to_ir().to_json()), state=Out).compile(store=store),
    ):
        with pytest.raises(MissingServiceError) as info:
            app.invoke({}, run_id="r")
        assert (info.value.node, info.value.service) == ("ask", "model")
        assert str(info.value).startswith(
            "node 'ask' (skill asker@1.0.0) requires service:model, which the graph was not "
            "given; compile it with services={'model': ...}"
        )
    assert SIDE_EFFECTS == []  # refused before any node ran
    # Given the service, the same graph runs.
    live = host().compile(store=store, services={"model": object()})
    assert live.invoke({}, run_id="r").answer == "42"
    assert SIDE_EFFECTS == ["before ran"]


def test_E12_replay_needs_no_services_and_resume_does() -> None:
    store = MemoryStore()
    live = host().compile(store=store, services={"model": object()})
    final = live.invoke({}, run_id="r")
    offline = host().compile(store=store)
    assert offline.replay("r") == final
    fork = live.fork("r", 1)
    with pytest.raises(MissingServiceError, match=r"requires service:model"):
        offline.resume(fork)
    assert live.resume(fork) == final


# --------------------------------------------------------------------------- decision 3, A17


def nested_skill(depth: int) -> Skill:
    """A skill whose graph mounts a skill ... ``depth`` skill levels in all."""
    skill = make_skill(kind="workflow", tools=(), name="level-1")
    for level in range(2, depth + 1):
        graph = small_graph(f"level-{level}").with_node(
            SubgraphNode.from_skill(skill, site=f"inner-{level}")
        )
        skill = Skill.from_graph(
            graph,
            name=f"level-{level}",
            version="1.0.0",
            kind="workflow",
            description="d",
            state_schema=Out,
        )
    return skill


def test_decision3_nesting_depth_is_configurable_and_the_choir_profile_is_depth_one() -> None:
    three = nested_skill(3)
    assert three.subgraph is not None
    assert not isinstance(three.subgraph, str)
    assert nesting_chain(three.subgraph) == ("level-2@1.0.0", "level-1@1.0.0")
    assert DEFAULT_NESTING.max_depth == 16
    SubgraphNode.from_skill(three, site="s")  # 3 levels: fine by default
    SubgraphNode.from_skill(three, site="s", nesting=NestingProfile(max_depth=3))
    with pytest.raises(SkillValidationError) as info:
        SubgraphNode.from_skill(three, site="s", nesting=NestingProfile(name="flat", max_depth=2))
    assert str(info.value) == (
        "skill 'level-3' is invalid: /subgraph: level-3@1.0.0 > level-2@1.0.0 > level-1@1.0.0 "
        "nests 3 skill levels; under the 'flat' nesting profile skills nest at most 2 levels "
        "deep (fix: flatten the composition, or use a profile with a larger max_depth)"
    )
    # Choir: a skill may be mounted, but a skill that starts another skill may not.
    assert not CHOIR_NESTING.skills_start_skills
    SubgraphNode.from_skill(nested_skill(1), site="s", nesting=CHOIR_NESTING)
    with pytest.raises(SkillValidationError, match="a skill cannot start another skill"):
        SubgraphNode.from_skill(nested_skill(2), site="s", nesting=CHOIR_NESTING)
    with pytest.raises(SkillValidationError, match=r"/max_depth: .*\(got 0\)"):
        NestingProfile(max_depth=0)
    # The compiler's own backstop for hand-written IR is the same default depth.
    from stargraph.compile._subgraphs import MAX_DEPTH

    assert DEFAULT_NESTING.max_depth == MAX_DEPTH


# --------------------------------------------------------------------------- E8


class Leaf(BaseModel):
    seen: set[str] = set()


class Branch(BaseModel):
    leaves: list[Leaf] = []


class Ok(BaseModel):
    seen: frozenset[str] = frozenset()


class WithNested(BaseModel):
    answer: str = ""
    branch: Branch | None = None
    ok: dict[str, Ok] = {}


def test_E8_a_set_inside_a_nested_model_is_rejected() -> None:
    with pytest.raises(SkillValidationError) as info:
        Skill(
            name="nested",
            version="1.0.0",
            kind=SkillKind.AGENT,
            description="d",
            subgraph=None,
            state_schema=WithNested,
        )
    assert [p.pointer for p in info.value.problems] == [
        "/state_schema/fields/branch/Branch/leaves/Leaf/seen"
    ]
    assert "field 'seen' of nested model Leaf has type set[str]" in str(info.value)

    class Fine(BaseModel):
        ok: dict[str, Ok] = {}
        maybe: list[Ok] | None = None

    Skill(
        name="fine",
        version="1.0.0",
        kind="agent",
        description="d",
        subgraph=None,
        state_schema=Fine,
    )


# --------------------------------------------------------------------------- A11: no allowlist


def test_A11_a_call_from_a_skill_state_without_an_allowlist_admits_no_tool(
    tmp_path: Path,
) -> None:
    ran: list[str] = []

    @tool(id="demo.note@1.0.0", side_effect="read")
    def note(text: str) -> ToolOutput:
        """Note something."""
        ran.append(text)
        return ToolOutput(summary=text)

    with Arbiter(ToolRegistry.build(builtins=[note]), workspace=tmp_path) as arbiter:
        for allowed in (None, ()):
            call = ToolCall(tool="demo.note", args={"text": "x"}, state="plan", allowed=allowed)
            with pytest.raises(ToolNotAllowedError, match=r"'demo\.note@1\.0\.0' is not allowed"):
                arbiter.dispatch(call)
        failure = None
        try:
            arbiter.dispatch(ToolCall(tool="demo.note", args={"text": "x"}, state="plan"))
        except ToolNotAllowedError as exc:
            failure = failure_of(exc)
        assert failure is not None
        assert (failure.code, failure.details["allowed_tools"]) == ("tool_not_allowed", [])
        assert "has no allowlist" in failure.message
        assert ran == []  # nothing ran
        assert [r.status for r in arbiter.commit_log.records()] == ["denied"] * 3
        # Host code calling the arbiter itself (no skill state) is not a model's proposal.
        assert arbiter.dispatch(ToolCall(tool="demo.note", args={"text": "y"})).summary == "y"
        assert ran == ["y"]
