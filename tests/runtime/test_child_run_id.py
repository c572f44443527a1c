"""``ChildRunId``: the one format (and parser) of a subgraph node's child run id, and the
activation count it carries in place of the parent's global step."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph
from stargraph.checkpoint import MemoryStore
from stargraph.nodes import SubgraphNode
from stargraph.runtime._plan import ChildRunId
from tests.runtime.incskill import inc_skill


def test_a_child_run_id_formats_and_parses_back() -> None:
    child = ChildRunId("run-1", "rag", 3, 0)
    assert child.format() == "run-1::rag@3.0"
    assert ChildRunId.parse(child.format()) == child


def test_a_nested_child_parses_at_its_innermost_level() -> None:
    inner = ChildRunId(ChildRunId("r", "outer", 2, 0).format(), "inner", 1, 4)
    assert inner.format() == "r::outer@2.0::inner@1.4"
    assert ChildRunId.parse(inner.format()) == inner
    assert ChildRunId.parse(inner.parent) == ChildRunId("r", "outer", 2, 0)


@pytest.mark.parametrize(
    "run_id",
    ["run-1", "r::site", "r::site@x.0", "r::site@1", "r::@1.0", "::site@1.0", "r::site@1.y"],
)
def test_an_id_that_is_no_child_run_parses_to_none(run_id: str) -> None:
    assert ChildRunId.parse(run_id) is None


def test_descent_top_and_rebase() -> None:
    nested = "r::outer@2.0::inner@1.4"
    assert ChildRunId.descends(nested, "r")
    assert ChildRunId.descends(nested, "r::outer@2.0")
    assert not ChildRunId.descends(nested, "r::out")
    assert not ChildRunId.descends("r2::outer@2.0", "r")
    assert ChildRunId.top(nested, "r") == ChildRunId("r", "outer", 2, 0)
    assert ChildRunId.top(nested, "other") is None
    assert ChildRunId.rebase(nested, "r", "r~fork") == "r~fork::outer@2.0::inner@1.4"


class Outer(BaseModel):
    x: int = 0


def test_a_subgraph_node_stores_its_child_under_the_formatted_id() -> None:
    app = (
        Graph("outer", state=Outer)
        .with_node(SubgraphNode.from_skill(inc_skill(), site="inc"))
        .with_edge(START, "inc")
        .with_edge("inc", END)
        .compile(store=MemoryStore())
    )
    assert app.invoke({"x": 1}, run_id="p").x == 2
    child = ChildRunId("p", "inc", 1, 0).format()
    assert app.get_run(child).status == "done"


def test_activations_count_each_nodes_steps_not_the_runs() -> None:
    from stargraph.checkpoint import StepRecord, WriteRecord

    def step(n: int, *nodes: tuple[str, int]) -> StepRecord:
        return StepRecord(
            step=n, writes=[WriteRecord(node=x, index=i, writes={}) for x, i in nodes]
        )

    records = [
        step(0),
        step(1, ("plan", 0)),
        step(2, ("skill", 0), ("skill", 1), ("other", 0)),  # a Send fan-out: one step
        step(3, ("plan", 0)),
        step(4, ("skill", 0)),
    ]
    assert ChildRunId.activations(records, {"skill"}) == {(2, "skill"): 1, (4, "skill"): 2}
    # Paged: counting on from the activations before the page.
    counts: dict[str, int] = {}
    ChildRunId.activations(records[:3], {"skill"}, counts)
    assert ChildRunId.activations(records[3:], {"skill"}, counts) == {(4, "skill"): 2}
