"""Small bugs found by reading (issue 17 item 5), each pinned by a test that failed before.

- a resume refused for a partly finished step printed ``{last.step}`` literally;
- a bad rule pack on node ``b`` was reported at ``/nodes/0/rules`` (node ``a``'s slot);
- ``aresume`` (and ``resume_stream``) took no ``migration=``;
- ``fork`` built its run with ``SystemEntropy`` instead of the graph's entropy factory;
- the subgraph nesting limit was a constant; ``compile(nesting=...)`` now sets it.

(``aresume(wait=True)`` blocking the event loop and a ``KeyboardInterrupt`` keeping the lease
are tested in ``test_cancel.py``.)
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import fathom, reducers
from stargraph.checkpoint import MemoryStore
from stargraph.errors import CompileError, GraphHashMismatch, NodeError, RunNotResumableError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext, SeededEntropy

FAIL: set[str] = set()


class S(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    note: str = ""


def work(state: S, ctx: RunContext) -> dict[str, Any]:
    if ctx.node in FAIL:
        raise RuntimeError(f"{ctx.node} is broken")
    return {"log": [ctx.node]}


@pytest.fixture(autouse=True)
def _reset() -> Any:
    FAIL.clear()
    yield
    FAIL.clear()


def chain(n: int, name: str = "fix-chain") -> Graph[S]:
    graph = Graph(name, state=S)
    names = [f"c{i}" for i in range(n)]
    for node in names:
        graph = graph.with_node(node, work)
    graph = graph.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        graph = graph.with_edge(a, b)
    return graph.with_edge(names[-1], END)


def test_update_refused_for_a_partly_finished_step_names_the_step_to_fork_from() -> None:
    graph = (
        Graph("fix-diamond", state=S)
        .with_node("start", work)
        .with_node("a", work)
        .with_node("b", work)
        .with_edge(START, "start")
        .with_edge("start", "a")
        .with_edge("start", "b")
        .with_edge("a", END)
        .with_edge("b", END)
    )
    app = graph.compile(store=MemoryStore())
    FAIL.add("b")
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r")  # step 2: a finished (pending), b failed
    with pytest.raises(RunNotResumableError) as info:
        app.resume("r", update={"note": "x"})
    assert str(info.value) == (
        "run 'r' has a partly finished step 2; resume it without update=, or fork it from "
        "step 1 with the update"
    )


def test_a_bad_rule_pack_is_reported_at_its_own_nodes_pointer() -> None:
    bad = fathom.RulePack.from_spec(
        {
            "id": "bad",
            "version": "1",
            "rules": [{"name": "jump", "when": [{"step": 1}], "then": {"goto": "nowhere"}}],
        }
    )
    graph = (
        Graph("fix-rules", state=S)
        .with_node("a", work)
        .with_node("b", work, rules=[bad])
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", END)
    )
    with pytest.raises(CompileError) as info:
        graph.compile()
    pointers = [p.pointer for p in info.value.problems]
    assert len(pointers) == 1
    assert pointers[0].startswith("/nodes/1/rules/0"), pointers  # b is node 1, not node 0


def _migrate(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "note": "migrated"}


def test_aresume_and_resume_stream_take_a_migration() -> None:
    store = MemoryStore()
    old = chain(3).compile(store=store)
    new = chain(4).compile(store=store)
    for run_id in ("async", "stream"):
        FAIL.add("c1")
        with pytest.raises(NodeError):
            old.invoke({}, run_id=run_id)
        FAIL.clear()
    with pytest.raises(GraphHashMismatch):
        asyncio.run(new.aresume("async"))
    final = asyncio.run(new.aresume("async", migration=_migrate))
    assert (final.log, final.note) == (["c0", "c1", "c2", "c3"], "migrated")
    events = list(new.resume_stream("stream", migration=_migrate))
    assert events[-1].kind == "run_finished"
    assert new.get_state("stream") == final
    assert new.get_run("stream").graph_hash == new.graph_hash


def test_fork_uses_the_graphs_entropy_factory() -> None:
    made: list[SeededEntropy] = []

    def entropy() -> SeededEntropy:
        made.append(SeededEntropy(7))
        return made[-1]

    app = chain(3).compile(store=MemoryStore(), entropy=entropy)
    app.invoke({}, run_id="r")
    before = len(made)
    fork_id = app.fork("r", 1, update={"note": "changed"})
    assert len(made) == before + 1, "the fork's run was built by the graph's factory"
    assert app.resume(fork_id).note == "changed"


def _nested(depth: int) -> Graph[S]:
    """A graph whose subgraphs nest ``depth`` levels deep."""
    from stargraph.nodes import SubgraphNode
    from stargraph.skills import Skill

    graph = chain(2, "level-0")
    for level in range(1, depth + 1):
        skill = Skill.from_graph(
            graph,
            name=f"level-{level}",
            version="1.0.0",
            kind="workflow",
            description="d",
            state_schema=S,
        )
        graph = (
            Graph(f"level-{level}", state=S)
            .with_node(SubgraphNode.from_skill(skill, site=f"inner-{level}"))
            .with_edge(START, f"inner-{level}")
            .with_edge(f"inner-{level}", END)
        )
    return graph


def test_compile_takes_the_nesting_limit_from_a_nesting_profile() -> None:
    from stargraph.skills import NestingProfile

    graph = _nested(3)
    graph.compile()  # 3 levels: fine under the default profile (16)
    graph.compile(nesting=NestingProfile(name="three", max_depth=3))
    with pytest.raises(CompileError) as info:
        graph.compile(nesting=NestingProfile(name="flat", max_depth=2))
    assert "subgraphs nest deeper than 2 levels (the 'flat' nesting profile)" in str(info.value)
    with pytest.raises(CompileError, match="is not a nesting profile"):
        graph.compile(nesting=2)  # type: ignore[arg-type]  # the wrong type is the point
