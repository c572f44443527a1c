"""Per-step work of the step loop cut without changing what it produces: channel values
dumped as they are when their dump would give them back unchanged, and text checked for
storability without a call per ASCII string, with the same findings as before."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, PlainSerializer

from stargraph import reducers
from stargraph.llm import ChatMessage, ToolCall
from stargraph.runtime._values import jsonable
from stargraph.state import Channel, build_channels, schema_ir, value_checker


class _Scalars(BaseModel):
    text: str = ""
    count: int = 0
    flag: bool = False
    maybe: str | None = None
    shown: Annotated[int, PlainSerializer(lambda v: f"#{v}")] = 0
    log: Annotated[list[str], reducers.append] = []
    number: float = 0.0


def _counted(channels: Mapping[str, Channel]) -> tuple[dict[str, Channel], list[str]]:
    """The channels with dumps that note each call (the channel's name)."""
    calls: list[str] = []

    def counting(name: str, dump: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapped(value: Any) -> Any:
            calls.append(name)
            return dump(value)

        return wrapped

    counted = {}
    for name, channel in channels.items():
        assert channel.dump is not None
        counted[name] = dataclasses.replace(channel, dump=counting(name, channel.dump))
    return counted, calls


def test_issue19_scalar_values_are_dumped_without_a_call() -> None:
    channels = build_channels(_Scalars, schema_ir(_Scalars, "tests:_Scalars"))
    counted, calls = _counted(channels)
    values = {
        "text": "h\u00e9llo",
        "count": 7,
        "flag": True,
        "maybe": None,
        "shown": 3,
        "log": ["a"],
        "number": 2,
    }
    out = jsonable(counted, values)
    # Only the fields whose dump may change a value were dumped: a serializer, a list, a
    # float field (whatever it holds).
    assert sorted(calls) == ["log", "number", "shown"]
    expected = {key: channels[key].adapter.dump_python(v, mode="json") for key, v in values.items()}
    assert out == expected
    assert out["shown"] == "#3"
    assert [type(v) for v in out.values()] == [type(v) for v in expected.values()]


def test_issue19_other_types_in_a_scalar_channel_are_still_dumped() -> None:
    channels = build_channels(_Scalars, schema_ir(_Scalars, "tests:_Scalars"))
    counted, calls = _counted(channels)
    # An int subclass (a bool in an int field) is not an exact int: dumped by its channel.
    assert jsonable(counted, {"count": True}) == {"count": True}
    assert calls == ["count"]


@contextmanager
def _python_calls() -> Iterator[list[str]]:
    """The names of the Python functions called inside the block."""
    seen: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def _message() -> ChatMessage:
    return ChatMessage.assistant(
        "let me look", tool_calls=[ToolCall(id="c1", name="search", arguments='{"q": "x"}')]
    )


def test_issue19_ascii_messages_are_checked_without_a_call_per_text() -> None:
    check = value_checker(list[ChatMessage])
    assert check is not None
    messages = [_message(), ChatMessage.user("hi"), ChatMessage.tool("c1", "ok", name="search")]
    with _python_calls() as seen:
        assert check(messages) is None
    assert "_check_text" not in seen
    assert "_text_why" not in seen


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (ChatMessage.user("a\ud800b"), "[1].content"),
        (ChatMessage.tool("c\ud800", "ok"), "[1].tool_call_id"),
        (
            ChatMessage.assistant(
                None, tool_calls=[ToolCall(id="c1", name="f", arguments='"\udfff"')]
            ),
            "[1].tool_calls[0].arguments",
        ),
    ],
)
def test_issue19_lone_surrogates_are_still_found(value: ChatMessage, path: str) -> None:
    check = value_checker(list[ChatMessage])
    assert check is not None
    found = check([ChatMessage.user("fine \u00e9"), value])
    assert found is not None
    assert found[0] == path
    assert "lone surrogate" in found[1]


def test_issue19_optional_text_is_checked_as_text() -> None:
    check = value_checker(str | None)
    assert check is not None
    assert check(None) is None
    assert check("ok \u00e9") is None
    found = check("x\ud800")
    assert found is not None
    assert found[0] == ""
    assert "lone surrogate '\\ud800' at index 1" in found[1]


class _Counting:
    """A DecisionMaker that counts the snapshots asked of it (a new dict per decision)."""

    def __init__(self) -> None:
        self.snapshots = 0
        self.facts: dict[str, Any] = {"n": 0}

    def decide(self, **kwargs: Any) -> Any:
        self.facts = {"n": self.facts["n"] + 1}
        return _Continue()

    def snapshot(self) -> dict[str, Any]:
        self.snapshots += 1
        return self.facts

    def restore(self, snapshot: Any) -> None:
        self.facts = dict(snapshot)

    def close(self) -> None:
        pass


class _Continue:
    kind = "continue"
    target = None
    reason = None
    rule = None


def test_issue19_engines_are_not_asked_for_facts_they_cannot_have_changed() -> None:
    from stargraph.runtime._rules import RuleSet

    engine = _Counting()
    rules = RuleSet(None, {"think": lambda: engine})
    rules.decide(1, ["think"], {})
    first = rules.snapshot()
    assert first == {"node:think": {"n": 1}}
    assert engine.snapshots == 1
    # Steps of nodes no engine watches: the same facts, without asking the engine.
    assert rules.snapshot() is first
    assert rules.snapshot() is first
    assert engine.snapshots == 1
    rules.decide(4, ["think"], {})
    assert rules.snapshot() == {"node:think": {"n": 2}}
    assert engine.snapshots == 2
    rules.restore({"node:think": {"n": 7}})
    assert rules.snapshot() == {"node:think": {"n": 7}}
    assert engine.snapshots == 3


def test_issue19_one_task_step_applies_without_a_generator() -> None:
    from stargraph.runtime._rules import RuleSet

    rules = RuleSet(None, {"think": _Counting})

    class _Task:
        def __init__(self, node: str) -> None:
            self.node = node

    with _python_calls() as seen:
        assert rules.applies([_Task("think")])
        assert not rules.applies([_Task("act")])
    assert "<genexpr>" not in seen
    assert rules.applies([_Task("act"), _Task("think")])
    assert not rules.applies([_Task("act"), _Task("observe")])


def test_issue19_a_lone_surrogate_in_a_request_is_refused_as_before() -> None:
    from stargraph.ir import canonical_json
    from stargraph.llm import ChatRequest
    from stargraph.llm._recorded import encode_request

    message = ChatMessage.user("a\ud800")
    data = message.model_dump(mode="json", exclude_defaults=True)
    with pytest.raises(TypeError) as before:
        canonical_json(data)
    with pytest.raises(TypeError) as now:
        encode_request(ChatRequest(messages=(message,)))
    assert type(now.value) is type(before.value)
    assert str(now.value) == str(before.value)
