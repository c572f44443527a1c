"""Machines that tell the model the truth: a forbidden tool is refused as forbidden (and
spends the retry budget) whatever its arguments; a workspace refusal inside an allowed tool
says what was refused and why; an unknown tool reads the same in the run and the commit log.

Against the scripted server through the real ``openai`` client, with a real arbiter.
"""

# Fixtures are imported from test_machine_helpers (no conftest here) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stargraph.skills.machine import MachineRuntime
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    HAPPY_PATH,
    MEMORY_FN,
    WRITE_FN,
    _reset,
    arbiter,
    call,
    chat,
    example_spec,
    runtime,
    server,
)


def _notes(request: RecordedRequest) -> list[dict[str, Any]]:
    text = request.messages[-1]["content"]
    assert text.startswith("## Execution context\n")
    notes: list[dict[str, Any]] = json.loads(text.split("\n", 1)[1])["notes"]
    return notes


def _rejections(request: RecordedRequest) -> list[dict[str, Any]]:
    return [n["data"] for n in _notes(request) if n["kind"] == "rejection"]


def test_issue47_a_forbidden_tool_with_invalid_arguments_is_not_allowed_and_spends_budget(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter
) -> None:
    # "understand" allows only the memory tool; fs.write is sent without its required
    # arguments. The model must hear "not allowed", not "fix the arguments".
    server.set_script([call(WRITE_FN, {}), *HAPPY_PATH])
    assert runtime.run("build_feature", {"feature": "x"}).status == "done"
    rejected = _rejections(server.chat_requests[1])
    assert [(r["code"], r["proposed"], r["retries_left"]) for r in rejected] == [
        ("tool_not_allowed", WRITE_FN, 2)
    ]
    refused = [r for r in arbiter.commit_log.records() if r.tool == "choir.fs.write@1.0.0"]
    assert [r.status for r in refused] == ["denied"]


def test_issue47_a_forbidden_tool_with_arguments_that_are_no_json_is_not_allowed(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter
) -> None:
    server.set_script([Reply.raw_arguments("{not json", name=WRITE_FN), *HAPPY_PATH])
    assert runtime.run("build_feature", {"feature": "x"}).status == "done"
    rejected = _rejections(server.chat_requests[1])
    assert [(r["code"], r["retries_left"]) for r in rejected] == [("tool_not_allowed", 2)]
    refused = [r for r in arbiter.commit_log.records() if r.tool == "choir.fs.write@1.0.0"]
    assert [r.status for r in refused] == ["denied"]


def test_issue47_forbidden_calls_exhaust_the_retry_budget(
    server: ScriptedOpenAIServer, runtime: MachineRuntime
) -> None:
    server.set_script([call(WRITE_FN, {}), call(WRITE_FN, {}), call(WRITE_FN, {})])
    result = runtime.run("build_feature", {"feature": "x"})
    assert (result.status, result.reason) == ("error", "retry_budget_exhausted")
    assert len(server.chat_requests) == 3


def test_issue47_a_path_refusal_in_an_allowed_tool_says_what_was_refused_and_why(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, tmp_path: Path
) -> None:
    # Three "complete"s reach "modify", where fs.write is allowed; the path climbs out.
    escape = call(WRITE_FN, {"path": "../outside.txt", "content": "x"})
    server.set_script([*HAPPY_PATH[:3], escape, *HAPPY_PATH[3:]])
    assert runtime.run("build_feature", {"feature": "x"}).status == "done"
    notes = _notes(server.chat_requests[4])
    assert not [n for n in notes if n["kind"] == "rejection"]
    (seen,) = [n["data"] for n in notes if n["kind"] == "tool_result"]
    assert seen["tool"] == "choir.fs.write@1.0.0"
    assert seen["status"] == "denied"
    assert "path='../outside.txt'" in seen["summary"]
    assert "it contains '..'" in seen["summary"]
    assert "tool_not_allowed" not in json.dumps(notes)
    assert not (tmp_path / "outside.txt").exists()


def test_issue47_an_unknown_tool_that_looks_like_ours_has_one_name_everywhere(
    server: ScriptedOpenAIServer, runtime: MachineRuntime, arbiter: Arbiter
) -> None:
    ghost = MEMORY_FN.replace("__v1_0_0", "__v9_0_0")  # our tool, a version not loaded
    server.set_script([call(ghost, {"query": "x"}), *HAPPY_PATH])
    assert runtime.run("build_feature", {"feature": "x"}).status == "done"
    (rejected,) = _rejections(server.chat_requests[1])
    assert (rejected["code"], rejected["proposed"]) == ("tool_not_allowed", ghost)
    (entry,) = [r for r in arbiter.commit_log.records() if r.status == "invalid"]
    assert entry.tool == ghost
