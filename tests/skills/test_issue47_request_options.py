"""Request options on every model-calling node (issue 47): ReAct, the prebuilt agent, the
SkillSpec machines (``MachineRuntime``, the spec's own ``temperature``/``request``,
``SchemaSession``) and SKILL.md agents take ``temperature=`` and
``request=RequestOptions(max_tokens=..., seed=...)`` the same way; every model call sends
them (the real ``openai`` client against the scripted server), the run's record keeps them
and replays offline, bad values are typed errors naming the field, and nodes without
options hash as before. The reference skills are in ``refs/test_issue47_request_options``."""

# Fixtures are imported from test_machine_helpers and then requested as arguments, which
# pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.errors import ChatDataError, SkillValidationError
from stargraph.graph import Graph
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel, RequestOptions
from stargraph.runtime import CompiledGraph
from stargraph.skills.agent import agent_graph, agent_tools, create_agent
from stargraph.skills.machine import (
    MachineRuntime,
    SchemaLibrary,
    SchemaSession,
    parse_skillspec,
    skillspec_graph,
)
from stargraph.skills.markdown import parse_skill_md
from stargraph.skills.react import react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    MEMORY_FN,
    _reset,
    arbiter,
    call,
    chat,
    finish,
    server,
    small_spec,
)
from tests.skills.machine.test_machine_schemas import FOCUS

OPTIONS = RequestOptions(max_tokens=64, seed=7)
SENT = (0.2, 64, 7)
MACHINE_PATH = [call(MEMORY_FN, {"query": "x"}), call("complete"), finish(answer="42")]


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


ADD = agent_tools([add])[0]


def sent_options(request: RecordedRequest) -> tuple[Any, Any, Any]:
    """(temperature, max tokens, seed) as the server received them."""
    body = request.body
    assert body is not None
    tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    return body.get("temperature"), tokens, body.get("seed")


@pytest.fixture
def add_arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[ADD]), workspace=tmp_path) as arb:
        yield arb


def recorded_llm_requests(store: SqliteStore, run_id: str) -> list[Any]:
    return [e.request for s in store.get_steps(run_id) for e in s.calls if e.kind == "llm"]


# --------------------------------------------------------------------------- the wire


def test_issue47_seed_is_a_request_field_sent_as_the_body_seed() -> None:
    request = ChatRequest(messages=(ChatMessage.user("hi"),), seed=7, max_tokens=5)
    assert request.to_openai("m")["seed"] == 7
    assert RequestOptions(seed=7).model_dump(exclude_defaults=True) == {"seed": 7}
    # A request without a seed fingerprints as before the field existed.
    bare = ChatRequest(messages=(ChatMessage.user("hi"),))
    assert "seed" not in bare.model_dump(exclude_defaults=True)


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"seed": True}, "seed"),
        ({"seed": "7"}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokns": 5}, "max_tokns"),
    ],
)
def test_issue47_bad_request_options_are_chat_data_errors_naming_the_field(
    given: dict[str, Any], field: str
) -> None:
    with pytest.raises(ChatDataError) as info:
        RequestOptions(**given)
    assert [p.pointer for p in info.value.problems] == [field]
    assert info.value.problems[0].hint


def test_issue47_react_sends_options_in_every_call_and_replays_them(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, add_arbiter: Arbiter, tmp_path: Path
) -> None:
    server.set_script([Reply.tool_calls([("add", {"a": 2, "b": 3})]), Reply.text("5")])
    graph = react_graph(tools=[ADD.spec.id], temperature=0.2, request=OPTIONS)
    store = SqliteStore(tmp_path / "runs.db")
    live = graph.compile(store=store, services={"model": chat, "arbiter": add_arbiter})
    final = live.invoke({"task": "2+3?"}, run_id="r")
    assert final.final_answer == "5"
    assert [sent_options(r) for r in server.chat_requests] == [SENT] * 2
    first = recorded_llm_requests(store, "r")[0]
    assert (first["temperature"], first["max_tokens"], first["seed"]) == SENT
    offline = graph.compile(store=store)
    assert offline.replay("r") == final == live.get_state("r")
    store.close()


def test_issue47_the_openai_profile_sends_max_tokens_as_max_completion_tokens(
    server: ScriptedOpenAIServer, add_arbiter: Arbiter
) -> None:
    server.set_script([Reply.text("5")])
    model = OpenAIChatModel("m", base_url=server.base_url, api_key="sk", profile="openai")
    try:
        graph = react_graph(tools=[ADD.spec.id], request=OPTIONS)
        graph.compile(services={"model": model, "arbiter": add_arbiter}).invoke({"task": "x"})
    finally:
        model.close()
    (body,) = [r.body for r in server.chat_requests]
    assert body is not None
    assert (body["max_completion_tokens"], body["seed"]) == (64, 7)
    assert "max_tokens" not in body
    assert "temperature" not in body  # not given: the endpoint's default


def test_issue47_the_prebuilt_agent_sends_options_in_every_call(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, tmp_path: Path
) -> None:
    server.set_script([Reply.tool_calls([("add", {"a": 2, "b": 3})]), Reply.text("5")])
    agent = create_agent(chat, [add], workspace=tmp_path, temperature=0.2, request=OPTIONS)
    final = agent.invoke({"messages": ["2+3?"]})
    assert final.messages[-1].content == "5"
    assert [sent_options(r) for r in server.chat_requests] == [SENT] * 2


def test_issue47_a_machine_runtime_sends_options_in_every_call(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script(MACHINE_PATH)
    runtime = MachineRuntime(
        model=chat, arbiter=arbiter, skills=[small_spec()], temperature=0.2, request=OPTIONS
    )
    result = runtime.run("small", {})
    assert result.status == "done"
    assert [sent_options(r) for r in server.chat_requests] == [SENT] * 3


def test_issue47_a_skillspec_carries_its_own_options_and_replays_them(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, tmp_path: Path
) -> None:
    spec = small_spec(temperature=0.2, request={"max_tokens": 64, "seed": 7})
    assert spec.to_json()["request"] == {"max_tokens": 64, "seed": 7}
    assert "request" not in small_spec().to_json()
    server.set_script(MACHINE_PATH)
    graph = skillspec_graph(spec)
    store = SqliteStore(tmp_path / "runs.db")
    live = graph.compile(store=store, services={"model": chat, "arbiter": arbiter})
    final = live.invoke({"input": {}}, run_id="m")
    assert final.status == "done"
    assert [sent_options(r) for r in server.chat_requests] == [SENT] * 3
    first = recorded_llm_requests(store, "m")[0]
    assert (first["temperature"], first["max_tokens"], first["seed"]) == SENT
    offline = graph.compile(store=store)
    assert offline.replay("m") == final == live.get_state("m")
    # The caller's options replace the spec's.
    mine = skillspec_graph(spec, temperature=1.0, request=RequestOptions(seed=1))
    (work,) = [n for n in mine.to_ir().nodes if n.id == "work"]
    config = work.config  # type: ignore[union-attr]
    assert (config["temperature"], config["request"]) == (1.0, {"seed": 1})
    store.close()


def test_issue47_a_skillspec_with_bad_options_names_them_in_the_file() -> None:
    with pytest.raises(SkillValidationError) as info:
        small_spec(temperature=5, request={"max_tokens": 0, "sead": 7})
    pointers = sorted(p.pointer for p in info.value.problems)
    assert pointers == [
        "<memory>#/request/max_tokens",
        "<memory>#/request/sead",
        "<memory>#/temperature",
    ]
    assert "request: {max_tokens: 256, seed: 7}" in str(info.value)
    with pytest.raises(SkillValidationError, match="must be a mapping of request options"):
        small_spec(request=64)


def test_issue47_a_schema_session_sends_options_in_every_call(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    server.set_script([call("said")])
    session = SchemaSession(
        SchemaLibrary.build([FOCUS]),
        model=chat,
        arbiter=arbiter,
        root="focus",
        temperature=0.2,
        request=OPTIONS,
    )
    session.send("one word?")
    assert server.chat_requests
    assert [sent_options(r) for r in server.chat_requests] == [SENT] * len(server.chat_requests)


SKILL_MD = """\
---
name: adder
description: Adds numbers.
kind: agent
tools: [{tool}]
temperature: 0.2
request: {{max_tokens: 64, seed: 7}}
---
Add the numbers you are given.
"""


def test_issue47_a_skill_md_agent_sends_its_options(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, add_arbiter: Arbiter
) -> None:
    skill = parse_skill_md(SKILL_MD.format(tool=ADD.spec.id))
    assert skill.subgraph is not None
    assert not isinstance(skill.subgraph, str)
    server.set_script([Reply.text("5")])
    app: CompiledGraph[Any] = Graph(skill.subgraph, impls=skill.impls).compile(
        services={"model": chat, "arbiter": add_arbiter}
    )
    app.invoke({"task": "2+3?"})
    assert [sent_options(r) for r in server.chat_requests] == [SENT]


def test_issue47_a_skill_md_with_bad_options_names_them() -> None:
    text = SKILL_MD.format(tool=ADD.spec.id).replace("seed: 7", "seed: seven")
    with pytest.raises(SkillValidationError) as info:
        parse_skill_md(text, source="adder/SKILL.md")
    assert [p.pointer for p in info.value.problems] == ["adder/SKILL.md#/request/seed"]


# --------------------------------------------------------------------------- hashes and errors


def _react(**kw: Any) -> Graph[Any]:
    return react_graph(tools=[ADD.spec.id], **kw)


def _agent(**kw: Any) -> Graph[Any]:
    return agent_graph([add], **kw)


def _machine(**kw: Any) -> Graph[Any]:
    return skillspec_graph(small_spec(), **kw)


@pytest.mark.parametrize("build", [_react, _agent, _machine], ids=["react", "agent", "machine"])
def test_issue47_options_are_in_the_hash_and_no_options_hash_as_before(build: Any) -> None:
    plain = build()
    assert build(request=RequestOptions()).graph_hash == plain.graph_hash
    assert build(temperature=None, request=None).graph_hash == plain.graph_hash
    seeded = build(request=RequestOptions(seed=7))
    assert seeded.graph_hash != plain.graph_hash
    assert build(request=RequestOptions(seed=8)).graph_hash != seeded.graph_hash
    assert build(temperature=0.2).graph_hash != plain.graph_hash


def test_issue47_a_spec_without_options_hashes_as_before() -> None:
    doc = small_spec().to_json()
    assert "temperature" not in doc
    assert "request" not in doc
    assert skillspec_graph(parse_skillspec(doc)).graph_hash == _machine().graph_hash


@pytest.mark.parametrize(
    "build",
    [
        _react,
        _agent,
        _machine,
        lambda **kw: MachineRuntime(model=None, arbiter=None, **kw),  # type: ignore[arg-type]
    ],
    ids=["react", "agent", "machine", "runtime"],
)
def test_issue47_bad_options_are_refused_naming_the_argument(build: Any) -> None:
    with pytest.raises(SkillValidationError) as info:
        build(temperature=True, request={"max_tokens": 64})
    assert [p.pointer for p in info.value.problems] == ["/temperature", "/request"]
    assert "pass request=RequestOptions(max_tokens=256, seed=7)" in str(info.value)
