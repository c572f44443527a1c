"""Row B2 in the SkillSpec loop: a proposal is a structured tool call, never text. A reply
whose text reads like a call (``name({...})``) -- of a tool, of a transition event, of
``finish`` -- proposes nothing: it is rejected as ``no_proposal`` (costing retry budget),
no tool body runs, the state does not move and the commit log holds no call."""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import pytest

from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import MachineRuntime
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    MEMORY,
    MEMORY_FN,
    QUERIES,
    _reset,
    arbiter,
    call,
    chat,
    finish,
    server,
    small_spec,
)

CALL_LIKE_TEXTS = [
    f'{MEMORY_FN}({{"query": "secret plans"}})',
    'choir.memory.query({"query": "secret plans"})',
    f'{MEMORY}({{"query": "secret plans"}})',
    '{"name": "choir__memory__query__v1_0_0", "arguments": {"query": "secret plans"}}',
    "complete({})",
    'finish({"answer": "42"})',
]


@pytest.mark.parametrize("text", CALL_LIKE_TEXTS)
def test_B2_call_like_text_in_a_skill_step_proposes_nothing(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter, text: str
) -> None:
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec()])
    # Three text replies in a row exhaust the default retry budget of 2.
    server.set_script([Reply.text(text)] * 3)
    result = runtime.run("small")
    assert (result.status, result.reason) == ("error", "retry_budget_exhausted")
    assert len(server.chat_requests) == 3
    rejected = [e.data for e in result.events if e.kind == "rejected"]
    assert [r["code"] for r in rejected] == ["no_proposal"] * 3
    assert [r["retries_left"] for r in rejected] == [2, 1, 0]
    # The text is kept as what the model said, with no function proposed.
    proposals = [e.data for e in result.events if e.kind == "proposal"]
    assert proposals == [{"functions": [], "text": text}] * 3
    assert QUERIES == []
    # Neither a tool call nor a transition out of "work" was committed: only the error
    # transition the exhausted budget fires.
    records = arbiter.commit_log.records()
    assert [r.status for r in records] == ["transition"]
    assert [(t["from"], t["on"], t["to"]) for t in result.transitions] == [
        ("work", "error", "error")
    ]


def test_B2_text_beside_a_structured_call_is_ignored(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    """Call-like text next to a structured call: only the structured call is proposed."""
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[small_spec()])
    mixed = call(MEMORY_FN, {"query": "real"}).model_copy(
        update={"content": f'{MEMORY_FN}({{"query": "from text"}}) complete({{}})'}
    )
    server.set_script([mixed, call("complete"), finish(answer="42")])
    result = runtime.run("small")
    assert (result.status, result.output) == ("done", {"answer": "42"})
    assert QUERIES == ["real"]
    assert [e.data["code"] for e in result.events if e.kind == "rejected"] == []
