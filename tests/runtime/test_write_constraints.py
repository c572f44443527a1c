"""A write is held to its field's constraints where it is written, and a state the model's
own validators refuse is a typed error naming the run, never a bare pydantic error."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, BaseModel, Field, field_validator

from stargraph import END, START, Graph, Send
from stargraph.checkpoint import MemoryStore
from stargraph.errors import InvalidPayloadError, InvalidWriteError


def _even(value: int) -> int:
    if value % 2:
        raise ValueError("must be even")
    return value


class Counted(BaseModel):
    count: Annotated[int, Field(ge=0)] = 0
    label: str = Field("", max_length=5)
    pairs: Annotated[int, AfterValidator(_even)] = 0
    later: str = ""


def negative(state: Counted) -> dict[str, Any]:
    return {"count": -5}


def negative_float(state: Counted) -> dict[str, Any]:
    return {"count": -5.0}


def long_label(state: Counted) -> dict[str, Any]:
    return {"label": "far too long"}


def odd(state: Counted) -> dict[str, Any]:
    return {"pairs": 3}


def fitting(state: Counted) -> dict[str, Any]:
    return {"count": 3, "label": "ok", "pairs": 4}


def second(state: Counted) -> dict[str, Any]:
    return {"later": "ran"}


def _graph(first: Any) -> Graph[Counted]:
    return (
        Graph("constrained", state=Counted)
        .with_node("first", first)
        .with_node("second", second)
        .with_edge(START, "first")
        .with_edge("first", "second")
        .with_edge("second", END)
    )


@pytest.mark.parametrize(
    ("first", "key", "message"),
    [
        # An int is the field's exact type: the write must not skip the constraint.
        (negative, "count", "greater than or equal to 0"),
        (negative_float, "count", "greater than or equal to 0"),
        (long_label, "label", "at most 5 characters"),
        (odd, "pairs", "must be even"),
    ],
)
def test_a_write_breaking_a_field_constraint_is_refused_at_its_node(
    first: Any, key: str, message: str
) -> None:
    store = MemoryStore()
    app = _graph(first).compile(store=store)
    with pytest.raises(InvalidWriteError) as info:
        app.invoke({}, run_id="bad")
    text = str(info.value)
    assert f"node 'first' at step 1 of run 'bad': wrote an invalid value to {key!r}" in text
    assert message in text
    assert info.value.node == "first"
    # The next node never ran on the bad value, and the run's stored steps stay readable.
    assert store.get_run("bad").status == "failed"
    assert app.get_state("bad").later == ""


def test_values_that_meet_the_constraints_pass() -> None:
    state = _graph(fitting).compile().invoke({})
    assert (state.count, state.label, state.pairs, state.later) == (3, "ok", 4, "ran")


def fan(state: Counted) -> list[Send]:
    return [Send("worker", {"count": -1})]


def nothing(state: Counted) -> None:
    return None


def test_a_send_payload_breaking_a_constraint_is_refused() -> None:
    graph = (
        Graph("sent", state=Counted)
        .with_node("start", nothing)
        .with_node("worker", nothing)
        .with_edge(START, "start")
        .with_conditional_edges("start", fan, ["worker"])
        .with_edge("worker", END)
    )
    with pytest.raises(InvalidPayloadError) as info:
        graph.compile().invoke({}, run_id="sent")
    text = str(info.value)
    assert "node 'worker' at step 2 of run 'sent' was sent an invalid value for 'count'" in text
    assert "greater than or equal to 0" in text
    assert (info.value.node, info.value.field) == ("worker", "count")


class Checked(BaseModel):
    small: int = 0

    @field_validator("small")
    @classmethod
    def _at_most_ten(cls, value: int) -> int:
        if value > 10:
            raise ValueError("too big")
        return value


def grow(state: Checked) -> dict[str, Any]:
    return {"small": 50}


def test_a_state_the_models_validators_refuse_is_a_typed_error_naming_the_run() -> None:
    graph = (
        Graph("checked", state=Checked)
        .with_node("grow", grow)
        .with_edge(START, "grow")
        .with_edge("grow", END)
    )
    store = MemoryStore()
    with pytest.raises(InvalidWriteError) as info:
        graph.compile(store=store).invoke({}, run_id="big")
    text = str(info.value)
    assert "the state of run 'big' at step 1 does not validate against Checked" in text
    assert "small: Value error, too big" in text
    assert "Annotated[int, Field(ge=0)]" in text  # the fix it names
    assert info.value.run_id == "big"
    # The run itself finished and stays stored as it was.
    assert store.get_run("big").status == "done"
