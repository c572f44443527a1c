"""The records a tool call leaves (its journal request, its result's dump, the tool
message content read back, the normalised call) are built directly for plain values: each
must equal what pydantic makes of the same values, key order and fields set included."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from stargraph.errors import ToolArgumentError
from stargraph.llm import ToolCall as LlmToolCall
from stargraph.tools import ToolCall, ToolResult
from stargraph.tools._recorded import tool_message_content
from stargraph.tools._result import ToolFailure

_ARGS: list[dict[str, Any]] = [
    {},
    {"i": 1, "s": "x", "b": True, "n": None},
    {"nested": [1, 2.5, None, {"deep": ["a", False]}]},
    {"inf": float("inf")},
]


@pytest.mark.parametrize("args", _ARGS)
@pytest.mark.parametrize("allowed", [None, ("a.b@1.0.0", "c.*")])
@pytest.mark.parametrize("raw", [None, "not json"])
def test_issue19_journal_request_is_the_json_dump(
    args: dict[str, Any], allowed: tuple[str, ...] | None, raw: str | None
) -> None:
    call = ToolCall(
        tool="t", args=args, call_id="c1", node="act", allowed=allowed, raw_arguments=raw
    )
    direct, dumped = call.journal_request(), call.model_dump(mode="json")
    assert direct == dumped
    assert list(direct) == list(dumped)


@pytest.mark.parametrize("arguments", ['{"i": 3}', '{"x": [1, {"y": null}]}', "{}"])
def test_issue19_from_openai_builds_the_validated_call(arguments: str) -> None:
    llm_call = LlmToolCall(id="call_1", name="bench__lookup", arguments=arguments)
    built = ToolCall.from_openai(llm_call, lane="core", node="act", allowed=["a", "b"])
    validated = ToolCall.from_openai(
        llm_call.model_dump(), lane="core", node="act", allowed=["a", "b"]
    )
    assert built == validated
    assert built.__dict__ == validated.__dict__
    assert built.model_fields_set == validated.model_fields_set


def test_issue19_from_openai_still_validates_what_is_not_plain() -> None:
    lane: Any = 3
    with pytest.raises(ToolArgumentError, match="lane"):
        ToolCall.from_openai(LlmToolCall(id="c", name="n", arguments="{}"), lane=lane)


def _results() -> list[ToolResult]:
    failure = ToolFailure(code="tool_failed", tool="t", message="it broke", hint="retry")
    out = [ToolResult(tool="t", status="error", summary="it broke", call_id="c", error=failure)]
    exposures: list[Any] = ["both", "edge", "core", "none"]
    for payload, exposure, mask, ref, call_id in itertools.product(
        [None, "text", {"k": [1, 2.5]}, float("inf")],
        exposures,
        [False, True],
        [None, "sha256:" + "0" * 64],
        [None, "c"],
    ):
        out.append(
            ToolResult(
                tool="t",
                call_id=call_id,
                status="success",
                summary='a "quoted" summary é',
                artifact_ref=ref,
                payload=payload,
                exposure=exposure,
                prompt_mask=mask,
            )
        )
    return out


def test_issue19_journal_value_is_the_json_dump() -> None:
    for result in _results():
        direct, dumped = result.journal_value(), result.model_dump(mode="json")
        assert direct == dumped
        assert list(direct) == list(dumped)


@pytest.mark.parametrize("lane", ["core", "edge"])
def test_issue19_tool_message_content_is_the_validated_results(lane: str) -> None:
    for result in _results():
        value = {"result": result.model_dump(mode="json")}
        validated = ToolResult.model_validate(value["result"]).model_text(lane)
        assert tool_message_content({"lane": lane}, value) == validated


def test_issue19_tool_message_content_of_an_odd_record_goes_through_validation() -> None:
    value = {"result": {"tool": "t", "status": "success", "summary": "s", "prompt_mask": 1}}
    validated = ToolResult.model_validate(value["result"]).model_text("core")
    assert tool_message_content({"lane": "core"}, value) == validated
    assert tool_message_content({"lane": "core"}, {"result": {"status": "odd"}}) is None


@pytest.mark.parametrize("depth", [3, 100, 300])
def test_issue19_from_openai_nesting_is_held_to_validation(depth: int) -> None:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    text = '{"a": ' + "[" * depth + "1" + "]" * depth + "}"
    llm_call = LlmToolCall(id="c", name="n", arguments=text)
    try:
        expected: Any = ToolCall(tool="n", args={"a": value}, call_id="c")
    except ToolArgumentError:
        with pytest.raises(ToolArgumentError):
            ToolCall.from_openai(llm_call)
        return
    call = ToolCall.from_openai(llm_call)
    assert call == expected
    assert call.journal_request() == call.model_dump(mode="json")
