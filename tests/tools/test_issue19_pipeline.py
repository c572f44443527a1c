"""One tool call's repeated work: canonical JSON checks the scalar leaves of an object
without a call each, the main thread is told without current_thread(), and a sync dispatch
resumes its pipeline in one call per step. Each must give what the general path gives."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from stargraph.errors import ToolError
from stargraph.ir import _canonical as canonical_internals
from stargraph.ir import canonical_json
from stargraph.llm import ToolCall as LlmToolCall
from stargraph.tools import (
    Arbiter,
    LockManager,
    ToolCall,
    ToolContext,
    Workspace,
    content_ref,
    llm_name_for,
    sha256_hex,
    tool,
)
from stargraph.tools import _arbiter as arbiter_module
from stargraph.tools import _canonical as canonical_module
from stargraph.tools import _workers as workers_module
from tests.support import spy

ArbiterFactory = Callable[..., Arbiter]


@tool(id="demo.echo@1.0.0")
def echo(text: str, times: int = 1) -> str:
    """Echo ``text``."""
    return text * times


class _Boom(RuntimeError):
    """A body's error."""


@tool(id="demo.boom@1.0.0")
def boom(text: str) -> str:
    """Fail."""
    raise _Boom(f"boom {text}")


_NAME = llm_name_for("demo.echo@1.0.0")


def _call(arguments: str, index: int = 1) -> ToolCall:
    return ToolCall.from_openai(
        LlmToolCall(id=f"call_{index}", name=_NAME, arguments=arguments),
        node="act",
        allowed=("demo.echo@1.0.0",),
        strict=False,
    )


@pytest.mark.parametrize(
    ("value", "plain", "calls"),
    [
        ({}, True, 1),
        ({"i": 3, "text": 'é\u2028\x00"', "ok": True, "none": None}, True, 1),
        ({"allowed": ["a", "b"], "args": {"i": -(2**53) + 1, "s": "x"}, "node": None}, True, 3),
        ({"b": 1, "a": {"z": 2**53 - 1, "y": False}}, True, 2),
        ([{"i": 1}, "a", 2, None], True, 2),
        ({"big": 2**53}, False, 1),
        (["a", -(2**53)], False, 1),
        ({"f": 1.5}, False, 2),
        ({"é": 1}, False, 1),
    ],
)
def test_issue19_canonical_json_checks_scalar_leaves_without_a_call_each(
    monkeypatch: pytest.MonkeyPatch, value: Any, plain: bool, calls: int
) -> None:
    """Whether orjson may dump a value (the check behind every fingerprint and arguments
    hash) is one call for the value and one per nested container or float: a text, null,
    flag or integer leaf is answered in its container's loop. (That the answer keeps
    canonical_json equal to RFC 8785 is pinned by the properties in test_tools_commit.)"""
    checked = spy(monkeypatch, canonical_internals, "_is_plain")
    assert canonical_internals._is_plain(value) is plain
    assert len(checked) == calls, checked


def test_issue19_content_ref_is_the_sha256_address() -> None:
    data = b'"record 1"'
    assert canonical_module.content_ref(data) == "sha256:" + sha256_hex(data)


def test_issue19_alarm_available_does_not_ask_current_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bool] = []
    worker = threading.Thread(target=lambda: seen.append(workers_module.alarm_available()))
    worker.start()
    worker.join()
    assert seen == [False]

    def refuse() -> threading.Thread:
        raise AssertionError("current_thread() was asked")

    monkeypatch.setattr(threading, "current_thread", refuse)
    assert workers_module.alarm_available()


def test_issue19_alarm_is_not_available_under_another_handler() -> None:
    import signal

    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        assert not workers_module.alarm_available()
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert workers_module.alarm_available()


def test_issue19_a_failed_sync_body_raises_the_pipelines_error_chained(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(echo, boom)
    assert arbiter.dispatch(_call('{"text": "hi"}')).summary == "hi"
    with pytest.raises(ToolError, match="boom x") as caught:
        arbiter.dispatch(ToolCall(tool="demo.boom@1.0.0", args={"text": "x"}, call_id="c"))
    # The error is the one the pipeline raises for a failed body, chained as before.
    assert caught.value.__suppress_context__
    assert isinstance(caught.value.__cause__, _Boom)


def test_issue19_a_call_that_locks_nothing_leaves_nothing_held(
    make_arbiter: ArbiterFactory,
) -> None:
    class Wider(LockManager):
        """A lock manager of its own."""

    for locks in (LockManager(), Wider()):
        arbiter = make_arbiter(echo, locks=locks)
        assert arbiter.dispatch(_call('{"text": "hi"}')).summary == "hi"
        assert locks.snapshot() == {}
        assert locks.waiting == 0


def test_issue19_a_context_cancels_like_an_event() -> None:
    ctx = ToolContext(
        tool="t",
        call_id=None,
        lane="core",
        node=None,
        workspace=Workspace.at("."),
        timeout_s=1.0,
        deadline=2.0,
    )
    cancelled = ctx.cancelled
    assert isinstance(cancelled, threading.Event)
    assert not cancelled.is_set()
    assert not cancelled.wait(0)
    cancelled.set()
    assert cancelled.is_set()
    assert cancelled.wait(0)
    cancelled.clear()
    assert not cancelled.is_set()


def test_issue19_a_text_payload_is_stored_as_its_canonical_json(
    make_arbiter: ArbiterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[object] = []

    def counting(value: Any) -> bytes:
        walked.append(value)
        return canonical_json(value)

    arbiter = make_arbiter(echo)
    monkeypatch.setattr(arbiter_module, "canonical_json", counting)
    result = arbiter.dispatch(_call('{"text": "é\\u2028\\"x"}'))
    # Only the arguments are walked (for their hash); the text payload is not.
    assert walked == [{"text": 'é\u2028"x', "times": 1}]
    stored = canonical_json('é\u2028"x')
    assert result.artifact_ref == content_ref(stored)
    assert arbiter.artifacts.get(result.artifact_ref) == stored
    assert arbiter._store({"a": [1.5]}) == (content_ref(canonical_json({"a": [1.5]})), {"a": [1.5]})
    assert walked[1:] == [{"a": [1.5]}]


def test_issue19_a_text_payload_is_its_own_journal_copy(make_arbiter: ArbiterFactory) -> None:
    result = make_arbiter(echo).dispatch(_call('{"text": "hi"}'))
    assert result.journal_value() == result.model_dump(mode="json")
    listed = result.model_copy(update={"payload": ["a", {"b": 1}]})
    assert listed.journal_value() == listed.model_dump(mode="json")


@tool(id="demo.write@1.0.0", side_effect="write")
def write(text: str) -> str:
    """Write."""
    return text


@tool(id="demo.wait@1.0.0")
async def wait(text: str) -> str:
    """Wait."""
    return text


def test_issue19_the_plan_says_once_which_bodies_run_inline(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(echo, write, wait)
    inline = {t.spec.id: arbiter._plan(t).inline for t in (echo, write, wait)}
    assert inline == {"demo.echo@1.0.0": True, "demo.write@1.0.0": False, "demo.wait@1.0.0": False}
    assert arbiter._plan(echo) is arbiter._plan(echo)
    worker = ToolCall(tool="demo.write@1.0.0", args={"text": "w"}, call_id="w")
    assert arbiter.dispatch(worker).summary == "w"
    assert arbiter._workers._count == 1  # the writer ran on a worker thread
    assert arbiter.dispatch(_call('{"text": "i"}')).summary == "i"
    assert arbiter._workers._count == 1  # the reader ran inline, under the alarm
