"""``replay_stream`` takes ``mode=`` as ``stream`` does: a replay yields the same
``updates``, ``values`` and ``custom`` items (and ``(mode, item)`` pairs) as the live run,
from a real SQLite store, with no node asked to run again."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph, reducers
from stargraph.checkpoint import SqliteStore
from stargraph.errors import InvalidInputError
from stargraph.runtime import RunContext


class State(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: int = 0


def add(state: State, ctx: RunContext) -> dict[str, Any]:
    ctx.emit({"adding": 2})
    return {"log": ["add"], "total": state.total + 2}


def double(state: State) -> dict[str, Any]:
    return {"log": ["double"], "total": state.total * 2}


def graph() -> Graph[State]:
    return (
        Graph("modes", state=State)
        .with_node("add", add)
        .with_node("double", double)
        .with_edge(START, "add")
        .with_edge("add", "double")
        .with_edge("double", END)
    )


def _plain(items: list[Any]) -> list[Any]:
    return [i.model_dump(mode="json") if isinstance(i, BaseModel) else i for i in items]


@pytest.mark.parametrize("mode", ["updates", "values", "custom", ["updates", "custom"]])
def test_issue47_replay_stream_yields_the_live_items_of_each_mode(
    tmp_path: Path, mode: Any
) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        app = graph().compile(store=store)
        live = list(app.stream({"total": 1}, run_id="r", mode=mode))
        replayed = list(app.replay_stream("r", mode=mode))
    assert live  # every mode made items
    assert _plain(replayed) == _plain(live)


def test_issue47_replay_stream_of_updates_is_what_each_node_wrote(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        app = graph().compile(store=store)
        app.invoke({"total": 1}, run_id="r")
        replayed = list(app.replay_stream("r", mode="updates"))
    assert replayed == [
        {"add": {"log": ["add"], "total": 3}},
        {"double": {"log": ["double"], "total": 6}},
    ]


def test_issue47_replay_stream_refuses_an_unknown_mode(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        app = graph().compile(store=store)
        app.invoke({}, run_id="r")
        with pytest.raises(InvalidInputError, match="stream mode"):
            list(app.replay_stream("r", mode="tokens"))  # type: ignore[arg-type]
