"""``CompiledGraph.with_store``: the same graph and options, its runs kept elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext
from stargraph.checkpoint import MemoryStore, SqliteStore
from stargraph.errors import CompileError, StepLimitExceeded
from stargraph.nodes import SubgraphNode
from stargraph.plugin import get_plugin_manager, hookimpl
from stargraph.runtime import Event, SeededEntropy
from stargraph.runtime._plan import ChildRunId
from tests.runtime.incskill import inc_skill


class Outer(BaseModel):
    x: int = 0
    token: str = ""
    greeting: str = ""


def mint(state: Outer, ctx: RunContext) -> dict[str, Any]:
    return {"token": ctx.uuid(), "greeting": ctx.services["greeter"](state.x)}


class Seen:
    def __init__(self) -> None:
        self.events: list[str] = []

    @hookimpl
    def on_event(self, event: Event) -> None:
        self.events.append(type(event).__name__)


def _graph(*, pause: bool = True) -> Graph[Outer]:
    return (
        Graph("outer", state=Outer)
        .with_node(SubgraphNode.from_skill(inc_skill(), site="inc"))
        .with_node("mint", mint, interrupt_before=pause)
        .with_edge(START, "inc")
        .with_edge("inc", "mint")
        .with_edge("mint", END)
    )


def test_with_store_keeps_every_other_option_and_moves_the_runs(tmp_path: Path) -> None:
    seen = Seen()
    plugins = get_plugin_manager()
    plugins.register(seen)
    app = _graph().compile(
        store=MemoryStore(),
        services={"greeter": lambda x: f"hello {x}"},
        plugins=plugins,
        entropy=lambda: SeededEntropy(7),
    )
    with SqliteStore(tmp_path / "runs.db") as store:
        durable = app.with_store(store)
        assert durable is not app
        assert durable.store is store
        assert isinstance(app.store, MemoryStore)
        assert durable.graph_hash == app.graph_hash
        durable.invoke({"x": 1}, run_id="r")  # waits before mint
        assert store.get_run("r").status == "interrupted"
        # The embedded subgraph's child run is in the new store too.
        assert store.get_run(ChildRunId("r", "inc", 1, 0).format()).status == "done"
        seen.events.clear()
        # Another graph object over the same store resumes it: same hash, same options.
        again = _graph().compile(
            store=MemoryStore(),
            services={"greeter": lambda x: f"hello {x}"},
            plugins=plugins,
            entropy=lambda: SeededEntropy(7),
        )
        final = again.with_store(store).resume("r")
    assert final.greeting == "hello 2"  # the services came along
    assert seen.events[-1] == "RunFinished"  # so did the plugins
    # And the seeded entropy: the token is the one a run compiled with it in one go mints.
    reference = _graph().compile(
        store=MemoryStore(),
        services={"greeter": lambda x: f"hello {x}"},
        entropy=lambda: SeededEntropy(7),
    )
    reference.invoke({"x": 1}, run_id="r")
    assert final.token == reference.resume("r").token != ""


def test_with_store_sets_max_steps_only_when_asked() -> None:
    app = _graph(pause=False).compile(max_steps=1, services={"greeter": str})
    assert app.with_store(MemoryStore()).max_steps == 1
    longer = app.with_store(MemoryStore(), max_steps=5)
    assert longer.max_steps == 5
    with pytest.raises(StepLimitExceeded):
        app.with_store(MemoryStore()).invoke({"x": 0}, run_id="short")
    with pytest.raises(CompileError, match="max_steps"):
        app.with_store(MemoryStore(), max_steps=0)


def test_with_store_none_runs_without_a_store() -> None:
    app = _graph(pause=False).compile(store=MemoryStore(), services={"greeter": str})
    plain = app.with_store(None)
    assert plain.store is None
    assert plain.invoke({"x": 4}).greeting == "5"


def test_with_store_is_checked_as_compile_is() -> None:
    """A graph that interrupts needs a store to wait in: ``with_store(None)`` is refused
    the way ``compile()`` without a store is."""
    app = _graph().compile(store=MemoryStore(), services={"greeter": str})
    with pytest.raises(CompileError, match="needs a checkpoint store"):
        app.with_store(None)
