"""A chat graph for thread tests, importable by the tests and by the subprocesses they kill.

``python -c "from tests.runtime import threadgraph; threadgraph.main()" DB THREAD TEXT`` (from the
repository root) runs the next turn of
``THREAD`` with the user message ``TEXT`` and prints the final state as JSON. With
``SG_HANG_FILE=<path>`` set, the ``reply`` node writes that file and then hangs, so a test can
kill the process in the middle of a turn, after its step 1 was committed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import CheckpointStore, SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.runtime import CompiledGraph


class Chat(BaseModel):
    """A conversation: messages append, ``mood`` is overwritten, ``heard`` counts words."""

    messages: Annotated[list[str], reducers.append] = []
    mood: str = "calm"
    heard: Annotated[int, reducers.add] = 0


def hear(state: Chat) -> dict[str, Any]:
    """Count the words of the newest message (step 1 of a turn)."""
    return {"heard": len(state.messages[-1].split())}


def reply(state: Chat) -> dict[str, Any]:
    """Answer the newest message, naming how many messages came before it (step 2)."""
    hang = os.environ.get("SG_HANG_FILE")
    if hang:
        Path(hang).write_text("in reply", encoding="utf-8")
        threading.Event().wait(600)  # killed long before this
    before = len(state.messages) - 1
    return {"messages": [f"{state.mood} reply to {state.messages[-1]!r} after {before}"]}


def graph() -> Graph[Chat]:
    """hear -> reply."""
    return (
        Graph("chat", state=Chat)
        .with_node("hear", hear)
        .with_node("reply", reply)
        .with_edge(START, "hear")
        .with_edge("hear", "reply")
        .with_edge("reply", END)
    )


def app(store: CheckpointStore) -> CompiledGraph[Chat]:
    """The chat graph compiled on ``store``."""
    return graph().compile(store=store)


def main() -> None:
    """Run one turn (see the module docstring)."""
    db, thread, text = sys.argv[1:4]
    with SqliteStore(db) as store:
        final = app(store).invoke({"messages": [text]}, thread_id=thread)
    print(json.dumps(final.model_dump()))
