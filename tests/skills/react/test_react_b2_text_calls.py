"""Row B2 in ReAct ``think``: calls are accepted only from the structured tool channel. An
assistant message whose *text* looks like a call (``name({...})``) is plain output: it is
the final answer, no tool body runs and nothing reaches the arbiter's commit log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from stargraph.llm import OpenAIChatModel
from stargraph.skills.react import react_graph
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools, llm_name_for, tool

CALC = "demo.calc@1.0.0"
WRITE = "choir.fs.write@1.0.0"
ENTERED: list[dict[str, int]] = []


@tool(id=CALC)
def calc(a: int, b: int) -> int:
    """Multiply two integers."""
    ENTERED.append({"a": a, "b": b})
    return a * b


@pytest.fixture(autouse=True)
def _reset() -> None:
    ENTERED.clear()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def arbiter(workspace: Path) -> Iterator[Arbiter]:
    with Arbiter(ToolRegistry.build(builtins=[calc, *builtin_tools()]), workspace=workspace) as a:
        yield a


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer() as srv:
        yield srv


@pytest.fixture
def chat(server: ScriptedOpenAIServer) -> Iterator[OpenAIChatModel]:
    with OpenAIChatModel(
        "gpt-test", base_url=server.base_url, api_key="sk-test", timeout=5.0, max_retries=0
    ) as model:
        yield model


# Every spelling a text parser might pick up: the LLM function name, the canonical name,
# the id, a fenced JSON "tool_call" object and an XML-ish wrapper.
CALL_LIKE_TEXTS = [
    f'{llm_name_for(CALC)}({{"a": 6, "b": 7}})',
    'demo.calc({"a": 6, "b": 7})',
    f'{CALC}({{"a": 6, "b": 7}})',
    '```json\n{"name": "demo__calc__v1_0_0", "arguments": {"a": 6, "b": 7}}\n```',
    '<tool_call>{"name": "demo.calc", "arguments": {"a": 6, "b": 7}}</tool_call>',
    f'{llm_name_for(WRITE)}({{"path": "pwned.txt", "content": "x"}})',
]


@pytest.mark.parametrize("text", CALL_LIKE_TEXTS)
def test_B2_call_like_text_in_a_react_reply_is_the_answer_not_a_call(
    server: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
    workspace: Path,
    text: str,
) -> None:
    server.set_script([Reply.text(text)])
    app = react_graph(tools=(CALC, WRITE)).compile(services={"model": chat, "arbiter": arbiter})
    final = app.invoke({"task": "What is 6*7?"})
    assert final.final_answer == text
    assert final.done is True
    assert final.tool_calls == []
    assert final.llm_steps == 1 == len(server.chat_requests)
    assert ENTERED == []
    assert len(arbiter.commit_log) == 0
    assert list(workspace.iterdir()) == []
    # The text went into the trajectory as the assistant's content, with no tool call.
    reply = final.trajectory[-1].message
    assert (reply.content, reply.tool_calls) == (text, ())


def test_B2_only_the_structured_call_runs_when_text_also_looks_like_one(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    """A reply with call-like text *and* a structured call: the structured call runs, once,
    with its own arguments; the text's arguments are never used."""
    mixed = Reply.tool_calls([(llm_name_for(CALC), {"a": 2, "b": 3})]).model_copy(
        update={"content": f'{llm_name_for(CALC)}({{"a": 6, "b": 7}})'}
    )
    server.set_script([mixed, Reply.text("6")])
    app = react_graph(tools=(CALC,)).compile(services={"model": chat, "arbiter": arbiter})
    final = app.invoke({"task": "What is 2*3?"})
    assert ENTERED == [{"a": 2, "b": 3}]
    assert [(r.tool, json.loads(r.arguments)) for r in final.tool_calls] == [
        (CALC, {"a": 2, "b": 3})
    ]
    assert [r.status for r in arbiter.commit_log.records()] == ["success"]
    assert final.final_answer == "6"
