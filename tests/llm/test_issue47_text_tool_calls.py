"""Tool calls a model writes as text (Qwen2.5-Coder on ``llama-server --jinja`` answers a
request that offers tools with ``{"name": ..., "arguments": ...}`` as its content) are read
as native calls on the profiles that say so, and only when the text is nothing but calls to
offered functions; the ReAct loop runs them and replays them offline."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.llm import (
    GENERIC,
    LLAMA_CPP,
    OLLAMA,
    OPENAI,
    VLLM,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    OpenAIChatModel,
    ToolCall,
)
from stargraph.replay import export_cassette, load_cassette
from stargraph.skills.react import react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, tool

TOOLS = (
    {"type": "function", "function": {"name": "multiply", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}},
)
REQUEST = ChatRequest(messages=(ChatMessage.user("3 items at 4.50?"),), tools=TOOLS)


def read(text: str, request: ChatRequest = REQUEST) -> ChatResponse:
    return LLAMA_CPP.reply(request, ChatResponse(message=ChatMessage.assistant(text)))


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (
            '{"name": "multiply", "arguments": {"a": 3, "b": 4.5}}',
            [("multiply", {"a": 3, "b": 4.5})],
        ),
        (
            '```json\n{\n  "name": "multiply",\n  "arguments": {"a": 3, "b": 4.5}\n}\n```',
            [("multiply", {"a": 3, "b": 4.5})],
        ),
        ('{"name": "add", "parameters": {"a": 1, "b": 2}}', [("add", {"a": 1, "b": 2})]),
        ('{"name": "add", "arguments": "{\\"a\\": 1}"}', [("add", {"a": 1})]),
        (
            '[{"name": "add", "arguments": {"a": 1}}, {"name": "multiply", "arguments": {}}]',
            [("add", {"a": 1}), ("multiply", {})],
        ),
        (
            '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "multiply", "arguments": {"b": 2}}\n</tool_call>',
            [("add", {"a": 1}), ("multiply", {"b": 2})],
        ),
    ],
)
def test_issue47_a_reply_that_only_spells_calls_is_read_as_those_calls(
    text: str, calls: list[tuple[str, dict[str, object]]]
) -> None:
    response = read(text)
    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == calls
    # Ids that depend on the conversation alone, distinct within the reply.
    assert [c.id for c in response.tool_calls] == [f"text_call_1_{i}" for i in range(len(calls))]
    assert response.message.content is None
    assert response.finish_reason == "tool_calls"


def test_issue47_prose_around_tagged_calls_stays_the_content() -> None:
    response = read('Let me work it out.\n<tool_call>{"name": "add", "arguments": {}}</tool_call>')
    assert [c.name for c in response.tool_calls] == ["add"]
    assert response.message.content == "Let me work it out."


@pytest.mark.parametrize(
    "text",
    [
        "The total is 13.50 EUR.",
        '{"total": 13.5}',  # an answer held to a schema
        '{"name": "divide", "arguments": {"a": 1}}',  # not an offered function
        '{"name": "add", "arguments": [1, 2]}',  # arguments that are no object
        '{"name": "add", "arguments": {"a": 1}, "total": 3}',  # more than a call
        'Here it is: {"name": "add", "arguments": {"a": 1}}',  # a call inside prose
        '{"name": "add", "arguments": {"a": 1}',  # broken JSON
        '<tool_call>{"name": "add", "arguments": {}}</tool_call><tool_call>oops</tool_call>',
        '[{"name": "add", "arguments": {}}, {"total": 3}]',
        "[]",
    ],
)
def test_issue47_any_other_text_stays_the_answer_it_is(text: str) -> None:
    response = read(text)
    assert response.tool_calls == ()
    assert response.message.content == text


def test_issue47_only_the_profiles_of_servers_that_miss_such_calls_read_them() -> None:
    text = '{"name": "add", "arguments": {"a": 1}}'
    response = ChatResponse(message=ChatMessage.assistant(text))
    for profile in (OPENAI, VLLM):
        assert profile.reply(REQUEST, response) is response
    for profile in (LLAMA_CPP, OLLAMA, GENERIC):
        assert [c.name for c in profile.reply(REQUEST, response).tool_calls] == ["add"]
    # Nothing offered, nothing to call; a reply with native calls is left as it came.
    assert LLAMA_CPP.reply(ChatRequest(messages=REQUEST.messages), response) is response
    native = ChatResponse(
        message=ChatMessage.assistant(text, tool_calls=[ToolCall(id="c", name="add")])
    )
    assert LLAMA_CPP.reply(REQUEST, native) is native


# --------------------------------------------------------------------------- in a run

PRICE = "shop.multiply@1.0.0"


@tool(id=PRICE)
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


def writes_its_call_as_text(request: RecordedRequest) -> Reply:
    """A model as Qwen2.5-Coder 0.5B answers on llama-server: its call as JSON text, then,
    once a result follows, the answer."""
    answered = [m for m in request.messages if m["role"] == "tool"]
    if not answered:
        return Reply.text('```json\n{"name": "multiply", "arguments": {"a": 3, "b": 4.5}}\n```')
    return Reply.text(f"It costs {answered[-1]['content'].split()[0]} EUR.")


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[multiply]), workspace=tmp_path) as arb:
        yield arb


def test_issue47_a_react_run_on_llama_cpp_runs_a_call_written_as_text_and_replays_it(
    tmp_path: Path, arbiter: Arbiter
) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    graph = react_graph(tools=[PRICE])
    with (
        ScriptedOpenAIServer(writes_its_call_as_text, behaves_like="llama.cpp") as server,
        OpenAIChatModel("qwen", base_url=server.base_url, profile="llama.cpp") as chat,
    ):
        app = graph.compile(store=store, services={"model": chat, "arbiter": arbiter})
        final = app.invoke({"task": "What do 3 items at 4.50 EUR cost?"}, run_id="priced")
        second = server.chat_requests[1]
    assert [(r.tool, r.status, r.summary) for r in final.tool_calls] == [(PRICE, "success", "13.5")]
    assert final.final_answer == "It costs 13.5 EUR."
    # The model is shown its call as a native one, and the result with a line after it
    # that keeps a small model from calling the tool again.
    assistant = next(m for m in second.messages if m["role"] == "assistant")
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["multiply"]
    answer = next(m for m in second.messages if m["role"] == "tool")
    assert answer["content"] == "13.5\n\nUse this result to answer the task, or call another tool."
    # Offline, with the server gone: the same run from the record.
    cassette = load_cassette(export_cassette(store, "priced", tmp_path / "priced.json"))
    assert graph.compile().replay(cassette) == final


def test_issue47_a_native_caller_reads_the_payload_alone(arbiter: Arbiter) -> None:
    script = [Reply.tool_calls([("multiply", {"a": 3, "b": 4.5})]), Reply.text("13.5 EUR.")]
    with (
        ScriptedOpenAIServer(script, behaves_like="llama.cpp") as server,
        OpenAIChatModel("qwen", base_url=server.base_url, profile="llama.cpp") as chat,
    ):
        app = react_graph(tools=[PRICE]).compile(services={"model": chat, "arbiter": arbiter})
        app.invoke({"task": "What do 3 items at 4.50 EUR cost?"})
        second = server.chat_requests[1]
    assert [m["content"] for m in second.messages if m["role"] == "tool"] == ["13.5"]


def test_issue47_calls_one_per_line_and_copied_schema_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "type": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    tools = ({"type": "function", "function": {"name": "note", "parameters": schema}}, *TOOLS)
    request = ChatRequest(messages=REQUEST.messages, tools=tools)
    text = (
        '{"name": "note", "arguments": {"path": "a.txt", "type": "log", "required": ["path"]}}\n'
        '{"name": "add", "arguments": {"a": 1, "maxLength": 24}}'
    )
    calls = read(text, request).tool_calls
    # "type" is one of note's parameters and stays; "required" is the schema's and goes. add
    # takes any object (its schema declares no properties), so its arguments stay as written.
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("note", {"path": "a.txt", "type": "log"}),
        ("add", {"a": 1, "maxLength": 24}),
    ]
