"""The subgraph node's runner: its input copies, its planned projection, its child run id."""

from __future__ import annotations

from functools import reduce
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, model_validator

from stargraph import END, START, Graph, reducers
from stargraph.nodes import SubgraphNode
from stargraph.nodes._runner import SubgraphRunner, _concat, _private
from stargraph.runtime._plan import ChildRunId
from stargraph.skills import Skill


def test_issue19_id_of_writes_the_child_run_id_format() -> None:
    made = ChildRunId.id_of("run-1", "rag", 3, 0)
    assert made == ChildRunId("run-1", "rag", 3, 0).format() == "run-1::rag@3.0"
    assert ChildRunId.parse(made) == ChildRunId("run-1", "rag", 3, 0)


def test_issue19_private_copies_json_like_data_at_every_level() -> None:
    value = {"rows": [{"a": 1, "tags": ["x"]}], "pair": (1, "b"), "nested": ([1], 2)}
    copy = _private(value)
    assert copy == value
    copy["rows"][0]["tags"].append("y")
    copy["nested"][0].append(3)
    assert value == {"rows": [{"a": 1, "tags": ["x"]}], "pair": (1, "b"), "nested": ([1], 2)}
    assert copy["pair"] is value["pair"]  # a tuple of scalars cannot be mutated: kept


class Point(BaseModel):
    x: int = 0


def test_issue19_private_deep_copies_what_is_not_json_like() -> None:
    value: list[Any] = [Point(x=1), {"s": {1, 2}}]
    copy = _private(value)
    assert copy == value
    assert copy[0] is not value[0]
    assert copy[1]["s"] is not value[1]["s"]


def test_issue19_private_copes_with_cycles_and_deep_nesting() -> None:
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    copy = _private(cyclic)
    assert copy is not cyclic
    assert copy[1] is copy
    deep: list[Any] = []
    inner = deep
    for _ in range(200):
        inner.append([])
        inner = inner[0]
    assert _private(deep) == deep


def test_issue19_append_fold_is_the_reduce_it_replaces() -> None:
    parts = [["a"], [], ["b", "c"], ["d"]]
    assert _concat(parts) == reduce(reducers.append.fn, parts)
    only = ["a"]
    assert _concat([only]) is reduce(reducers.append.fn, [only])


class Inner(BaseModel):
    records: list[dict[str, Any]] = []
    items: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    note: str = ""


def scribble(state: Inner) -> dict[str, Any]:
    state.records[0]["seen"] = True  # in place: must not reach the parent's state
    state.records[0]["tags"].append("child")
    return {"items": ["c1"], "total": 1}


def more(state: Inner) -> dict[str, Any]:
    return {"items": ["c2", "c3"], "total": 2, "note": "done"}


def _mounted(site: str, state: type[BaseModel], *nodes: Any) -> Graph[Any]:
    """A host graph whose one node is a skill ``site`` that runs ``nodes`` in a chain."""
    child = Graph(site, state=state)
    previous = START
    for node in nodes:
        child = child.with_node(node.__name__, node).with_edge(previous, node.__name__)
        previous = node.__name__
    skill = Skill.from_graph(
        child.with_edge(previous, END),
        name=site,
        version="1.0.0",
        kind="workflow",
        description="",
        state_schema=state,
    )
    return (
        Graph("host", state=state)
        .with_node(SubgraphNode.from_skill(skill, site=site))
        .with_edge(START, site)
        .with_edge(site, END)
    )


def _parent() -> Graph[Any]:
    return _mounted("scribbler", Inner, scribble, more)


def test_issue19_child_mutating_nested_input_leaves_the_parent_alone() -> None:
    records = [{"id": 1, "tags": ["parent"]}]
    final = _parent().compile().invoke({"records": records, "items": ["p"], "total": 10})
    assert final.records == [{"id": 1, "tags": ["parent"]}]
    assert records == [{"id": 1, "tags": ["parent"]}]
    # Shared reducers fold the child's raw writes; a plain key takes the child's value.
    assert final.items == ["p", "c1", "c2", "c3"]
    assert final.total == 13
    assert final.note == "done"


def test_issue19_projection_is_planned_once_per_key() -> None:
    app = _parent().compile()
    runner = app.steploop.plan.specs["scribbler"].fn
    assert isinstance(runner, SubgraphRunner)
    planned = {child: (parent, fold) for child, parent, fold in runner._outputs}
    assert planned["items"][1] is _concat
    assert planned["records"][1] is None
    assert planned["note"][1] is None
    total_fold = planned["total"][1]
    assert total_fold is not None
    assert total_fold([1, 2, 3]) == 6


class Counted(BaseModel):
    validations: int = 0
    seen: int = -1

    @model_validator(mode="before")
    @classmethod
    def count(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {**data, "validations": data.get("validations", 0) + 1}
        return data


def look(state: Counted) -> dict[str, Any]:
    return {"seen": state.validations}


def test_issue19_a_child_model_with_validators_still_validates_its_input() -> None:
    app = _mounted("looker", Counted, look).compile()
    runner = app.steploop.plan.specs["looker"].fn
    assert isinstance(runner, SubgraphRunner)
    assert runner._same_model is None
    # The parent's input is validated once (validations=1); the child's input, projected
    # from it, goes through the model validator again.
    assert app.invoke({}).seen == 2


def test_issue19_a_plain_shared_model_skips_revalidating_the_child_input() -> None:
    app = _parent().compile()
    runner = app.steploop.plan.specs["scribbler"].fn
    assert isinstance(runner, SubgraphRunner)
    assert runner._same_model is Inner
    assert [child for child, _ in runner._inputs] == list(Inner.model_fields)


class Lowered(BaseModel):
    model_config = ConfigDict(str_to_lower=True)
    word: str = ""
    seen: str = ""


def echo(state: Lowered) -> dict[str, Any]:
    return {"seen": state.word}


def shout(state: Lowered) -> dict[str, Any]:
    return {"word": "LOUD"}  # a node's write goes through the channel, not the model config


def test_issue19_a_child_model_whose_config_transforms_values_still_validates() -> None:
    child = Graph("echo", state=Lowered).with_node("echo", echo)
    child = child.with_edge(START, "echo").with_edge("echo", END)
    skill = Skill.from_graph(
        child, name="echo", version="1.0.0", kind="workflow", description="", state_schema=Lowered
    )
    graph = Graph("outer", state=Lowered).with_node("shout", shout)
    graph = graph.with_node(SubgraphNode.from_skill(skill, site="inner"))
    graph = graph.with_edge(START, "shout").with_edge("shout", "inner").with_edge("inner", END)
    app = graph.compile()
    runner = app.steploop.plan.specs["inner"].fn
    assert isinstance(runner, SubgraphRunner)
    assert runner._same_model is None
    assert app.invoke({}).seen == "loud"  # the child's input was validated by the model
