"""Async runs and streams at invoke speed: an async step of sync nodes runs as ``invoke``
runs it; ``values`` items are cheap copies equal to validated states; ``events`` streams
keep their items, order and liveness."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, model_validator

from stargraph import reducers
from stargraph.graph import END, START, Graph
from stargraph.runtime._values import values_item

TIMEOUT = 30.0  # only to catch a hang

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


class S(BaseModel):
    n: int = 0
    seen: Annotated[list[str], reducers.append] = []


def _looks(name: str) -> Any:
    def look(state: S) -> dict[str, Any]:
        here = "loop" if _on_loop() else "elsewhere"
        return {"seen": [f"{name}:{REQUEST.get()}:{here}"]}

    return look


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def fork(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def join(state: S) -> dict[str, Any]:
    return {"n": state.n + 1}


def _fan_out(**options: Any) -> Graph[S]:
    graph = Graph("fan", state=S).with_node("fork", fork).with_node("join", join)
    branches = ["b1", "b2", "b3"]
    for name in branches:
        graph = graph.with_node(name, _looks(name), ref=f"t.{name}", **options)
        graph = graph.with_edge("fork", name)
    return graph.with_edge(START, "fork").with_edge(branches, "join").with_edge("join", END)


@pytest.mark.parametrize("how", ["ainvoke", "astream"])
def test_issue45_async_fan_out_of_sync_nodes_runs_as_invoke_does(how: str) -> None:
    """A step of several sync nodes under ``ainvoke``/``astream(updates)`` runs in the
    work-stealing batch the loop's thread takes part in, as ``invoke`` runs it: the first
    task in task order runs on the loop's thread, in the awaiting task's context (a worker
    thread would see neither), and the writes are those of ``invoke``."""
    app = _fan_out().compile()

    async def main() -> list[str]:
        REQUEST.set("req")
        if how == "ainvoke":
            state = await app.ainvoke({})
            return list(state.seen)
        seen: list[str] = []
        async for item in app.astream({}, mode="updates"):
            for writes in item.values():
                seen += writes.get("seen", [])
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert [s.split(":")[0] for s in seen] == ["b1", "b2", "b3"]
    assert seen[0] == "b1:req:loop"
    assert app.invoke({}).n == 2


def test_issue45_blocking_fan_out_keeps_the_event_loop_free() -> None:
    """``blocking=True`` sync nodes of an async run's step run on worker threads: the loop
    goes on meanwhile (here it sets the event the nodes wait for; were they run on the
    loop's thread, the run would hang)."""
    go = threading.Event()

    def waits(state: S) -> dict[str, Any]:
        assert go.wait(TIMEOUT), "the event loop was blocked"
        return {"seen": ["waited"]}

    graph = Graph("blocking", state=S).with_node("fork", fork).with_node("join", join)
    for name in ("w1", "w2"):
        graph = graph.with_node(name, waits, ref="t.waits", blocking=True)
        graph = graph.with_edge("fork", name)
    app = graph.with_edge(START, "fork").with_edge(["w1", "w2"], "join").with_edge("join", END)

    async def main() -> S:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, go.set)
        return await app.compile().ainvoke({})

    state = asyncio.run(asyncio.wait_for(main(), TIMEOUT))
    assert state.seen == ["waited", "waited"]


# ------------------------------------------------------------------------- values items


class Leaf(BaseModel):
    x: int = 0


class Rich(BaseModel):
    n: int = 0
    names: Annotated[list[str], reducers.append] = []
    table: dict[str, list[int]] = {}
    anything: Any = None
    maybe: list[int] | None = None
    pair: tuple[int, ...] = ()
    leaves: list[Leaf] = []
    tags: set[str] = set()


_json = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=6,
)
_rich_values = st.fixed_dictionaries(
    {
        "n": st.integers(),
        "names": st.lists(st.text(max_size=3), max_size=4),
        "table": st.dictionaries(st.text(max_size=2), st.lists(st.integers(), max_size=3)),
        "anything": _json,
        "maybe": st.none() | st.lists(st.integers(), max_size=3),
        "pair": st.lists(st.integers(), max_size=3).map(tuple),
        "leaves": st.lists(st.builds(Leaf, x=st.integers()), max_size=3),
        "tags": st.sets(st.text(max_size=2), max_size=3),
    }
)


@settings(max_examples=60, deadline=None)
@given(_rich_values)
def test_issue45_a_values_item_equals_the_validated_state_and_is_its_own(
    values: dict[str, Any],
) -> None:
    """A ``values`` item, made without validating the run's values again, equals
    ``State.model_validate`` of them; changing any container in it changes neither the
    values it was made of nor another item made of them."""
    make = values_item(Rich)
    assert make is not None
    before = Rich.model_validate(values)
    item = make(values)
    assert item == before
    assert type(item) is Rich
    item.names.append("x")
    item.table["new"] = [1]
    for row in item.table.values():
        row.append(7)
    if isinstance(item.anything, list | dict):
        item.anything.clear()
    if item.maybe is not None:
        item.maybe.append(1)
    item.leaves.append(Leaf())
    item.tags.add("new-tag")
    assert Rich.model_validate(values) == before
    assert make(values) == before


class Checked(BaseModel):
    n: int = 0
    label: str = ""

    @model_validator(mode="after")
    def labelled(self) -> Checked:
        object.__setattr__(self, "label", f"n={self.n}")
        return self


def test_issue45_a_state_with_a_validator_streams_validated_values() -> None:
    """A state model whose validator sees the whole state has no cheap item: its
    ``values`` items are validated, as the validator expects."""
    assert values_item(Checked) is None
    app = (
        Graph("checked", state=Checked)
        .with_node("one", _bump_checked)
        .with_edge(START, "one")
        .with_edge("one", END)
        .compile()
    )
    assert [s.label for s in app.stream({}, mode="values")] == ["n=0", "n=1"]


def _bump_checked(state: Checked) -> dict[str, Any]:
    return {"n": state.n + 1}


def test_issue45_changing_a_values_item_changes_neither_the_run_nor_later_items() -> None:
    """The consumer owns each ``values`` item: appending to its list reaches neither the
    nodes that run after it nor the next items nor the final state."""
    app = _fan_out().compile()
    items = []
    for item in app.stream({}, mode="values"):
        items.append(item.model_copy(deep=True))
        item.seen.append("consumer")
    assert [i.seen for i in items] == [
        [],
        [],
        ["b1:none:elsewhere", "b2:none:elsewhere", "b3:none:elsewhere"],
        ["b1:none:elsewhere", "b2:none:elsewhere", "b3:none:elsewhere"],
    ]


RAN = threading.Event()


def _marks(state: S) -> dict[str, Any]:
    RAN.set()
    return {"seen": [threading.current_thread().name]}


def test_issue45_a_values_stream_runs_its_first_step_when_the_consumer_is_back() -> None:
    """Holding the first ``values`` item (the state the run starts from), the consumer is
    not told that anything started: the first step waits for it to come back and then
    runs on its thread, as ``invoke`` runs it (only an ``events`` stream hands a step to
    a worker while its consumer is away)."""
    RAN.clear()
    app = Graph("away", state=S).with_node("m", _marks).with_edge(START, "m")
    stream = app.with_edge("m", END).compile().stream({}, mode="values")
    assert next(stream) == S()
    assert not RAN.wait(0.2)  # away for a while: nothing ran meanwhile
    assert list(stream) == [S(seen=[threading.current_thread().name])]
