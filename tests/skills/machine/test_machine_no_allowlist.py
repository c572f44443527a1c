"""A skill state with no allowlist admits no tool (deny by default).

Seed 000: "Each state defines exactly which tools the LLM may call. This is a hard
constraint" -- so a state built with ``allowed_tools=None`` (or a schema state with
``tools=None``) is a state that lists no tool, never one that admits any: a proposed tool
call is rejected as ``tool_not_allowed`` and its body never runs.
"""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import json
from typing import Any

from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import (
    MachineRuntime,
    SchemaLibrary,
    SchemaSession,
    SchemaState,
    StateSpec,
)
from stargraph.testing import RecordedRequest, ScriptedOpenAIServer
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


def _rejections(request: RecordedRequest) -> list[dict[str, Any]]:
    text = request.messages[-1]["content"]
    notes = json.loads(text.split("\n", 1)[1])["notes"]
    return [n["data"] for n in notes if n["kind"] == "rejection"]


def test_A11_state_built_with_allowed_tools_none_admits_no_tool(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    spec = small_spec()
    work = StateSpec(
        objective="Do the work.", allowed_tools=None, transitions=spec.states["work"].transitions
    )
    assert work.allowed_tools == ()
    spec = spec.model_copy(update={"states": {**spec.states, "work": work}})
    runtime = MachineRuntime(model=chat, arbiter=arbiter, skills=[spec], session="s-1")
    server.set_script([call(MEMORY_FN, {"query": "x"}), call("complete"), finish(answer="a")])
    result = runtime.run("small", {})
    assert result.status == "done"
    # The model was offered no tool, proposed one anyway, and was told no tool is allowed.
    assert [r["code"] for r in _rejections(server.chat_requests[1])] == ["tool_not_allowed"]
    assert _rejections(server.chat_requests[1])[0]["allowed_tools"] == []
    assert QUERIES == []  # the body never ran
    refused = [r for r in arbiter.commit_log.records() if r.tool == MEMORY]
    assert [r.status for r in refused] == ["denied"]


def test_A11_schema_state_with_tools_none_admits_no_tool(
    server: ScriptedOpenAIServer, chat: OpenAIChatModel, arbiter: Arbiter
) -> None:
    main = {
        "name": "main",
        "initial_state": "listen",
        "max_steps": 4,
        "states": {
            "listen": {
                "prompt": "Understand the request.",
                "tools": None,
                "transitions": [{"on": "answer", "to": "reply", "description": "Answer it."}],
            },
            "reply": {"prompt": "Reply.", "terminal": True},
        },
    }
    assert SchemaState(prompt="p", tools=None).tools == ()
    server.set_script([call(MEMORY_FN, {"query": "x"}), call("answer")])
    SchemaSession(SchemaLibrary.build([main]), model=chat, arbiter=arbiter).send("q")
    assert QUERIES == []  # the body never ran
    refused = [r for r in arbiter.commit_log.records() if r.tool == MEMORY]
    assert [r.status for r in refused] == ["denied"]
    assert "tool_not_allowed" in server.chat_requests[1].messages[-1]["content"]
