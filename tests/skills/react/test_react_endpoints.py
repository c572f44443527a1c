"""The ReAct loop on a llama.cpp-like server, request options as data, truncated replies,
replay without live services, and malformed arguments through the arbiter (issue 20: P1, P2,
P5, P6, P7)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.errors import SkillValidationError
from stargraph.ir import FunctionNodeIR
from stargraph.llm import OpenAIChatModel, RequestOptions, ResponseFormat
from stargraph.replay import export_cassette, load_cassette
from stargraph.skills.react import react_graph
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.testing.pytest_plugin import scripted_openai  # noqa: F401
from stargraph.tools import Arbiter, ToolRegistry, llm_name_for, tool

CALC = "endpoints.calc@1.0.0"
CALC_NAME = llm_name_for(CALC)


@tool(id=CALC)
def calc(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


class Answer(BaseModel):
    value: int


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[calc]), workspace=tmp_path) as arb:
        yield arb


@pytest.fixture
def llama() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(behaves_like="llama.cpp") as server:
        yield server


def model_for(server: ScriptedOpenAIServer, **options: Any) -> OpenAIChatModel:
    return OpenAIChatModel("smollm2", base_url=server.base_url, timeout=5.0, **options)


# --------------------------------------------------------------------------- P1 + P2


def test_p1_p2_a_tool_calling_run_on_llama_cpp(
    llama: ScriptedOpenAIServer, arbiter: Arbiter
) -> None:
    """The stock agent on llama.cpp: its tools are offered (P2: tool_choice is sent) and the
    step after a tool call is accepted (P1: no ``"content": null``)."""
    llama.set_script([Reply.tool_calls([(CALC_NAME, {"a": 6, "b": 7})]), Reply.text("It is 42.")])
    with model_for(llama) as chat:
        app = react_graph(tools=[CALC]).compile(services={"model": chat, "arbiter": arbiter})
        final = app.invoke({"task": "6*7?"})
    assert [(r.tool, r.status, r.summary) for r in final.tool_calls] == [(CALC, "success", "42")]
    assert final.final_answer == "It is 42."
    first, second = (r.body for r in llama.chat_requests)
    assert first is not None
    assert first["tool_choice"] == "auto"
    assert second is not None
    assert second["messages"][1]["content"] == ""


def test_p2_request_options_reach_the_endpoint_and_the_hash() -> None:
    base = react_graph(tools=[CALC])
    options = RequestOptions(
        tool_choice={"type": "function", "function": {"name": CALC_NAME}},
        max_tokens=64,
        response_format=ResponseFormat.for_schema(Answer),
        extra={"seed": 7},
    )
    graph = react_graph(tools=[CALC], request=options)
    think = next(n for n in graph.to_ir().nodes if n.id == "think")
    assert isinstance(think, FunctionNodeIR)
    assert think.config["request"] == options.model_dump(mode="json", exclude_defaults=True)
    variants = {
        graph.graph_hash,
        react_graph(tools=[CALC], request=RequestOptions(max_tokens=65)).graph_hash,
        react_graph(tools=[CALC], request=RequestOptions(tool_choice="none")).graph_hash,
        react_graph(tools=[CALC], request=RequestOptions(extra={"seed": 8})).graph_hash,
        base.graph_hash,
    }
    assert len(variants) == 5
    # Options left at their defaults change nothing: such graphs hash as before.
    assert react_graph(tools=[CALC], request=RequestOptions()).graph_hash == base.graph_hash


def test_p2_every_request_option_is_sent(llama: ScriptedOpenAIServer, arbiter: Arbiter) -> None:
    llama.set_script([Reply.text('{"value": 42}')])
    options = RequestOptions(
        tool_choice="auto",
        max_tokens=64,
        response_format=ResponseFormat.for_schema(Answer),
        extra={"seed": 7},
    )
    with model_for(llama, profile="llama.cpp") as chat:
        app = react_graph(tools=[CALC], output_model=Answer, request=options).compile(
            services={"model": chat, "arbiter": arbiter}
        )
        final = app.invoke({"task": "6*7?"})
    assert final.final_output == Answer(value=42)
    body = llama.chat_requests[0].body
    assert body is not None
    assert (body["tool_choice"], body["max_tokens"], body["seed"]) == ("auto", 64, 7)
    # A llama.cpp grammar over the whole reply would leave no room for a tool call: with
    # tools offered the schema stays out, and the system prompt names the fields.
    assert "response_format" not in body
    assert "value (integer)" in body["messages"][0]["content"]


def test_issue47_without_tools_the_output_model_is_the_endpoints_grammar(
    llama: ScriptedOpenAIServer, arbiter: Arbiter
) -> None:
    llama.set_script([Reply.text('{"value": 42}')])
    with model_for(llama, profile="llama.cpp") as chat:
        app = react_graph(tools=[], output_model=Answer).compile(
            services={"model": chat, "arbiter": arbiter}
        )
        assert app.invoke({"task": "6*7?"}).final_output == Answer(value=42)
    body = llama.chat_requests[0].body
    assert body is not None
    assert body["response_format"] == {"type": "json_object", "schema": Answer.model_json_schema()}
    assert "properties" not in body["messages"][0]["content"]


def test_request_must_be_request_options() -> None:
    with pytest.raises(SkillValidationError) as caught:
        react_graph(tools=[CALC], request={"max_tokens": 5})  # type: ignore[arg-type]
    assert [p.pointer for p in caught.value.problems] == ["/request"]
    assert "pass request=RequestOptions(" in str(caught.value)


# --------------------------------------------------------------------------- P5


def test_p5_a_reply_cut_off_by_the_token_limit_is_not_the_answer(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    arbiter: Arbiter,
) -> None:
    scripted_openai.set_script(
        [Reply(content="The answer is", finish_reason="length"), Reply.text("42")]
    )
    with model_for(scripted_openai) as chat:
        app = react_graph(tools=[CALC]).compile(services={"model": chat, "arbiter": arbiter})
        final = app.invoke({"task": "6*7?"})
    assert final.final_answer == "42"
    assert final.llm_steps == 2
    assert final.error_count == 1
    replies = [step for step in final.trajectory if step.kind == "reply"]
    assert [step.finish_reason for step in replies] == ["length", "stop"]
    note = final.trajectory[2]
    assert note.kind == "observation"
    assert "cut off at the token limit" in (note.message.content or "")


# --------------------------------------------------------------------------- P6


def test_p6_replay_needs_no_live_arbiter_or_model(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    arbiter: Arbiter,
    store: SqliteStore,
    tmp_path: Path,
) -> None:
    scripted_openai.set_script(
        [
            Reply.tool_calls([(CALC_NAME, {"a": 6, "b": 7})]),
            Reply.tool_calls([(CALC_NAME, '{"a": 6, "b": ')]),  # malformed: refused
            Reply.text("42"),
        ]
    )
    graph = react_graph(tools=[CALC])
    with model_for(scripted_openai) as chat:
        live = graph.compile(store=store, services={"model": chat, "arbiter": arbiter})
        final = live.invoke({"task": "6*7?"}, run_id="p6")
    assert [r.status for r in final.tool_calls] == ["success", "invalid"]
    cassette = export_cassette(store, "p6", tmp_path / "p6.json")

    # No services at all: the record stands in for the model and the arbiter.
    offline = graph.compile(store=store)
    assert offline.replay("p6") == final
    assert graph.compile().replay(load_cassette(cassette)) == final


# --------------------------------------------------------------------------- P7


def test_p7_malformed_arguments_go_through_the_arbiter(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    arbiter: Arbiter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The most common real-model failure is audited like every other refusal: a commit-log
    record and a log line, both naming the canonical tool id, as does the run's record."""
    scripted_openai.set_script(
        [Reply.tool_calls([("c1", CALC_NAME, '{"a": 6, "b": ')]), Reply.text("sorry")]
    )
    caplog.set_level(logging.WARNING, logger="stargraph.tools")
    with model_for(scripted_openai) as chat:
        app = react_graph(tools=[CALC]).compile(services={"model": chat, "arbiter": arbiter})
        final = app.invoke({"task": "6*7?"})
    (record,) = final.tool_calls
    assert (record.name, record.tool, record.status) == (CALC_NAME, CALC, "invalid")
    assert record.error_code == "invalid_arguments"
    assert record.arguments == '{"a": 6, "b": '
    (entry,) = arbiter.commit_log.records()
    assert (entry.tool, entry.status, entry.call_id) == (CALC, "invalid", "c1")
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1
    assert CALC in refusals[0]
    assert "not valid JSON" in refusals[0]
    # The model sees why, answering the call's id.
    answer = scripted_openai.chat_requests[1].messages[-1]
    assert answer["tool_call_id"] == "c1"
    assert answer["content"].startswith(f"Error: tool {CALC!r} got invalid arguments")


def test_p7_recorded_requests_of_good_calls_are_unchanged(
    scripted_openai: ScriptedOpenAIServer,  # noqa: F811
    arbiter: Arbiter,
    store: SqliteStore,
) -> None:
    """The arbiter's call data gained a field; a well-formed call is recorded exactly as
    before, so runs recorded earlier still replay."""
    scripted_openai.set_script([Reply.tool_calls([(CALC_NAME, {"a": 2, "b": 3})]), Reply.text("6")])
    with model_for(scripted_openai) as chat:
        app = react_graph(tools=[CALC]).compile(
            store=store, services={"model": chat, "arbiter": arbiter}
        )
        app.invoke({"task": "2*3"}, run_id="r")
    requests = [
        entry.request
        for step in store.get_steps("r")
        for entry in step.calls
        if entry.kind == "tool"
    ]
    assert requests == [
        {
            "tool": CALC_NAME,
            "args": {"a": 2, "b": 3},
            "call_id": "call_0001",
            "lane": "core",
            "node": "act",
            "state": None,
            "allowed": [CALC],
        }
    ]
