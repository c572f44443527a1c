"""The capabilities the runtime looks for on what it is handed are named protocols."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stargraph import END, START, Graph
from stargraph.examples.basics import CounterState, bump
from stargraph.llm import ScriptedChatModel
from stargraph.nodes import SubgraphNode
from stargraph.runtime import RunContext, SeededEntropy, SystemEntropy
from stargraph.runtime._context import TaskJournal
from stargraph.runtime._protocols import (
    HasCodeHash,
    Journal,
    Journaled,
    PositionalEntropy,
    is_positional,
)
from stargraph.tools import Arbiter, ToolRegistry


def _child() -> Graph[CounterState]:
    return (
        Graph("child", state=CounterState)
        .with_node("bump", bump)
        .with_edge(START, "bump")
        .with_edge("bump", END)
    )


def test_services_that_bind_to_a_journal_are_journaled(tmp_path: Any) -> None:
    model = ScriptedChatModel(["hi"])
    arbiter = Arbiter(ToolRegistry.build(builtins=[]), workspace=tmp_path)
    try:
        assert isinstance(model, Journaled)
        assert isinstance(arbiter, Journaled)
        assert not isinstance(object(), Journaled)
        app = _child().compile(services={"model": model, "arbiter": arbiter, "db": object()})
        assert app.bindable == ("arbiter", "model")
    finally:
        arbiter.close()


def test_the_task_journal_is_the_journal_services_bind_to() -> None:
    # Checked by mypy: TaskJournal satisfies the protocol services are typed against.
    journal: Journal = TaskJournal.__new__(TaskJournal)
    assert callable(journal.call)
    assert callable(journal.acall)


def test_a_subgraph_node_has_a_code_hash_and_a_function_has_none() -> None:
    parent = (
        Graph("parent", state=CounterState)
        .with_node(SubgraphNode(node_id="sub", child=_child().to_ir(), impls=_child().impls))
        .with_edge(START, "sub")
        .with_edge("sub", END)
    )
    app = parent.compile()
    runner = app.specs["sub"].fn
    assert isinstance(runner, HasCodeHash)
    assert runner.code_hash == _child().compile().code_hash
    assert not isinstance(bump, HasCodeHash)


class _OnlyNow:
    """Sequential entropy with a stray ``now_at``: not positional."""

    def now_at(self, position: str, step: int, draw: int) -> datetime:
        raise AssertionError("not positional: never drawn by position")

    def now(self) -> datetime:
        return datetime(2030, 1, 1)

    def uuid(self) -> str:
        return "u"

    def random(self) -> float:
        return 0.5


def test_positional_entropy_is_recognised_whole() -> None:
    seeded: PositionalEntropy = SeededEntropy(1)
    assert is_positional(seeded)
    assert not is_positional(SystemEntropy())
    assert not is_positional(_OnlyNow())
    ctx = RunContext(run_id="r", step=1, node="n", index=0, path=(), config={}, entropy=_OnlyNow())
    assert ctx._now() == datetime(2030, 1, 1)
