"""Per-step work of the engine cut without changing what a run produces: writes to optional
text and number fields taken as they are; the ReAct ``think`` step building its request from
the kept transcript without changing (or copying) it more than once; models checked and
states read from their ``__dict__`` rather than through pydantic's attribute hook; empty
lists dumped without a serializer call; journaled calls that run no import statement; a
reply dumped without nested frames."""

from __future__ import annotations

import dataclasses
import dis
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import pytest
from pydantic import BaseModel, Field, PlainSerializer

from stargraph import reducers
from stargraph.errors import InvalidWriteError
from stargraph.graph import END, START, Graph
from stargraph.llm import (
    ChatMessage,
    ScriptedChatModel,
    Usage,
)
from stargraph.runtime import RunContext, SeededEntropy
from stargraph.runtime._plan import write_rule
from stargraph.runtime._values import jsonable
from stargraph.skills import react
from stargraph.skills.react import ToolCallRecord
from stargraph.state import build_channels, schema_ir, value_checker
from stargraph.tools import Arbiter, ToolRegistry
from tests.checkpoint.test_long_runs import ECHO, ECHO_NAME, _script, echo

# --------------------------------------------------------------------------- optional writes


class _Optionals(BaseModel):
    note: str | None = None
    count: Optional[int] = None  # noqa: UP045 - the typing spelling is a Union too
    ratio: float | None = None
    flag: bool | None = None
    short: Annotated[str | None, Field(max_length=3)] = None
    items: list[str] | None = None
    either: int | str = 0


def _rules() -> dict[str, Any]:
    channels = build_channels(_Optionals, schema_ir(_Optionals, "tests:_Optionals"))
    fields = _Optionals.model_fields
    return {name: write_rule(channel, fields[name]) for name, channel in channels.items()}


def test_issue19_an_optional_scalar_field_takes_a_value_of_its_type_as_it_is() -> None:
    rules = _rules()
    assert {name: rule[1] for name, rule in rules.items()} == {
        "note": str,
        "count": int,
        "ratio": float,
        "flag": bool,
        # A constrained field sees every value; other unions and containers are validated.
        "short": None,
        "items": None,
        "either": None,
    }
    # What the validator would hand back for such a value: the value itself.
    for name, value in [("note", "x" * 40), ("count", 10**30), ("ratio", 0.5), ("flag", True)]:
        validate, exact, _ = rules[name]
        assert type(value) is exact
        assert validate(value) is value


class _Noted(BaseModel):
    note: str | None = None
    short: Annotated[str | None, Field(max_length=3)] = None
    count: int | None = None


def _writer(write: dict[str, Any]) -> Callable[[_Noted], dict[str, Any]]:
    def node(state: _Noted) -> dict[str, Any]:
        return write

    return node


def _one_node(write: dict[str, Any]) -> Any:
    graph = (
        Graph("optional-writes", state=_Noted)
        .with_node("w", _writer(write), ref="tests.issue19_engine.writer")
        .with_edge(START, "w")
        .with_edge("w", END)
    )
    return graph.compile()


def test_issue19_optional_writes_are_held_to_their_fields_as_before() -> None:
    final = _one_node({"note": "done", "count": 4}).invoke({})
    assert (final.note, final.count) == ("done", 4)
    assert _one_node({"note": None, "count": None}).invoke({"note": "x", "count": 1}).note is None
    # Other types still reach the validator, which refuses or converts them as it did.
    assert _one_node({"count": "7"}).invoke({}).count == 7
    with pytest.raises(InvalidWriteError, match="wrote an invalid value to 'note'"):
        _one_node({"note": 5}).invoke({})
    with pytest.raises(InvalidWriteError, match="wrote an invalid value to 'short'"):
        _one_node({"short": "too long"}).invoke({})
    with pytest.raises(InvalidWriteError, match="wrote an invalid value to 'count'"):
        _one_node({"count": 1.5}).invoke({})


# --------------------------------------------------------------------------- think


@pytest.fixture
def arbiter(tmp_path: Path) -> Iterator[Arbiter]:
    arbiter = Arbiter(ToolRegistry.build(builtins=[echo]), workspace=str(tmp_path / "ws"))
    yield arbiter
    arbiter.close()


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_issue19_think_reads_the_kept_transcript_without_changing_it(
    arbiter: Arbiter, monkeypatch: pytest.MonkeyPatch, system_prompt: str | None
) -> None:
    kept = react._transcript
    handed: list[tuple[tuple[ChatMessage, ...], list[ChatMessage]]] = []

    def noted(trajectory: Any, conversation: Any) -> tuple[ChatMessage, ...]:
        found = kept(trajectory, conversation)
        handed.append((found, list(found)))  # the tuple handed over, and what it held
        return found

    monkeypatch.setattr(react, "_transcript", noted)
    model = ScriptedChatModel(_script(3))
    app = react.react_graph(tools=[ECHO], system_prompt=system_prompt, max_steps=10).compile(
        services={"model": model, "arbiter": arbiter}, max_steps=50
    )
    final = app.invoke({"task": "look three up"})
    assert final.final_answer == "finished"
    assert len(model.requests) == len(handed) == 4
    trajectory = [step.message for step in final.trajectory]
    system = [ChatMessage.system(system_prompt)] if system_prompt else []
    for n, (request, (transcript, held)) in enumerate(zip(model.requests, handed, strict=True)):
        # The kept transcript is a tuple, which nobody can change (the next step starts
        # from it); the common step (no system prompt, no task to add) sends it as it is.
        assert type(transcript) is tuple
        assert (request.messages is transcript) == (n > 0 and system_prompt is None)
        messages = list(request.messages)
        assert type(request.messages) is tuple
        # The system prompt, what the trajectory held, and the task the first step adds.
        assert messages == [*system, *trajectory[: len(messages) - len(system)]]
        assert messages[len(system) : len(system) + len(transcript)] == held
    assert [m.role for m in model.requests[0].messages] == [*(m.role for m in system), "user"]


# --------------------------------------------------------------------------- storability checks

LOOKED_UP: list[str] = []


class _Watched(BaseModel):
    """A model that notes each lookup of its text fields as an attribute."""

    title: str = ""
    body: str | None = None

    def __getattribute__(self, name: str) -> Any:
        if name in ("title", "body"):
            LOOKED_UP.append(name)
        return super().__getattribute__(name)


def test_issue19_a_model_is_checked_from_its_fields_without_attribute_lookups() -> None:
    check = value_checker(list[_Watched])
    assert check is not None
    fine = [_Watched(title="a", body="b"), _Watched(title="caf\u00e9")]
    bad = [_Watched(title="ok"), _Watched(title="x", body="lone \ud800")]
    LOOKED_UP.clear()
    assert check(fine) is None
    found = check(bad)
    assert LOOKED_UP == []
    # The same finding, named by the same path, as when the fields were read as attributes.
    text = value_checker(str)
    assert text is not None
    why = text("lone \ud800")
    assert why is not None
    assert found == ("[1].body", why[1])


# --------------------------------------------------------------------------- empty lists


class _Lists(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    notes: list[ChatMessage] = []
    shown: Annotated[list[int], PlainSerializer(len)] = []
    maybe: list[int] | None = None
    pair: tuple[int, ...] = ()


def test_issue19_an_empty_list_is_dumped_without_a_call() -> None:
    channels = build_channels(_Lists, schema_ir(_Lists, "tests:_Lists"))
    dumped: list[str] = []

    def noting(name: str, dump: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def wrapped(value: Any) -> Any:
            dumped.append(name)
            return dump(value)

        return wrapped

    counted = {}
    for name, channel in channels.items():
        assert channel.dump is not None
        counted[name] = dataclasses.replace(channel, dump=noting(name, channel.dump))
    values: dict[str, Any] = {"log": [], "notes": [], "shown": [], "maybe": [], "pair": ()}
    out = jsonable(counted, values)
    # A serializer of the list's own, or another type than a bare list, is still called.
    assert sorted(dumped) == ["maybe", "pair", "shown"]
    expected = {key: channels[key].adapter.dump_python(v, mode="json") for key, v in values.items()}
    assert out == expected == {"log": [], "notes": [], "shown": 0, "maybe": [], "pair": []}
    # Each a list of its own, not the state's.
    assert out["log"] is not values["log"]
    assert out["notes"] is not values["notes"]
    dumped.clear()
    message = ChatMessage.user("hi")
    assert jsonable(counted, {"notes": [message]}) == {"notes": [message.model_dump(mode="json")]}
    assert dumped == ["notes"]


# --------------------------------------------------------------------------- journaled calls


def test_issue19_a_journaled_call_runs_no_import_statement() -> None:
    from stargraph.runtime import _context

    # (A replay that misses its record imports its error: that call fails anyway.)
    hot: list[Callable[..., Any]] = [
        _context.TaskJournal.call,
        _context.TaskJournal._record,
        _context._fingerprint,
    ]
    for function in hot:
        ops = {instruction.opname for instruction in dis.get_instructions(function)}
        assert "IMPORT_NAME" not in ops, function.__qualname__
    # What they imported in the call is the same object at the module's top.
    from stargraph.checkpoint import JournalEntry
    from stargraph.ir import content_hash

    assert getattr(_context, "JournalEntry") is JournalEntry  # noqa: B009 - not exported
    assert getattr(_context, "content_hash") is content_hash  # noqa: B009 - not exported


# --------------------------------------------------------------------------- state reads


def _context(arbiter: Arbiter, model: ScriptedChatModel) -> RunContext:
    return RunContext(
        run_id="r",
        step=1,
        node="think",
        index=0,
        path=(),
        config={"tools": [ECHO], "error_budget": 3, "max_steps": 5},
        entropy=SeededEntropy(0),
        services={"model": model, "arbiter": arbiter},
    )


def test_issue19_think_and_observe_step_from_the_state(
    arbiter: Arbiter,
) -> None:
    model = ScriptedChatModel(_script(1))
    state = react.ReactState(task="look it up", usage=Usage(prompt_tokens=1, total_tokens=1))
    thought = react.think(state, _context(arbiter, model))
    assert thought["llm_steps"] == 1
    assert thought["usage"] == Usage(prompt_tokens=1, total_tokens=1)
    assert [s.kind for s in thought["trajectory"]] == ["task", "reply"]
    assert [m.content for m in model.requests[0].messages] == ["look it up"]
    answer = ChatMessage.tool("call_0", "observation 0", name=ECHO_NAME)
    record = ToolCallRecord(
        llm_step=1,
        call_id="call_0",
        name=ECHO_NAME,
        arguments='{"i": 0}',
        tool=ECHO,
        status="success",
        summary="observation 0",
    )
    acted = react.ReactState(
        trajectory=thought["trajectory"],
        tool_calls=[record],
        pending=[answer],
        last_event="tool_success",
    )
    observed = react.observe(acted)
    assert observed["pending"] == []
    assert observed["last_event"] == "tool_success"
    assert observed["tool_result"] == "success"
    assert [(s.llm_step, s.kind, s.message) for s in observed["trajectory"]] == [
        (1, "observation", answer)
    ]


def test_issue19_usages_add_up() -> None:
    total = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3) + Usage(
        prompt_tokens=10, completion_tokens=20, total_tokens=30
    )
    assert total == Usage(prompt_tokens=11, completion_tokens=22, total_tokens=33)
    assert type(total) is Usage
    assert total.model_fields_set == set(Usage.model_fields)
