"""The console's wake-ups and partial model output (``stargraph.ui._live``), in isolation."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from stargraph.checkpoint import SqliteStore
from stargraph.llm import ChatMessage, ChatResponse, ScriptedChatModel
from stargraph.runtime import MessageChunk
from stargraph.ui._live import Closing, LiveText, Wakeup, Wakeups
from tests.ui.ui_graphs import letter_graph


def _chunk(run_id: str, step: int, text: str, node: str = "write") -> MessageChunk:
    return MessageChunk(run_id=run_id, step=step, node=node, text=text)


def test_partial_text_grows_per_task_and_leaves_when_its_step_commits() -> None:
    live = LiveText(Wakeups())
    live.add("r", _chunk("r", 2, "Dear"))
    live.add("r", _chunk("r", 2, " Ada"))
    live.add("r", _chunk("r::hotel@2.0", 1, "Booked", node="book"))  # a skill's model call
    shown = [(p.run_id, p.step, p.node, p.text) for p in live.of("r")]
    assert shown == [("r", 2, "write", "Dear Ada"), ("r::hotel@2.0", 1, "book", "Booked")]
    assert [p.text for p in live.of("r::hotel@2.0")] == ["Booked"]
    live.committed("r", 2)
    assert [p.text for p in live.of("r")] == ["Booked"]
    live.ended("r")
    assert live.of("r") == []
    assert live.of("r::hotel@2.0") == []


def test_tokens_wake_the_pages_of_their_runs_and_closing_wakes_every_page() -> None:
    async def main() -> None:
        wakeups = Wakeups()
        page, other, runs_list = Wakeup(), Wakeup(), Wakeup()
        wakeups.add("r", page)
        wakeups.add("s", other)
        wakeups.add(None, runs_list)
        live = LiveText(wakeups)
        # From another thread, as the console's run thread does.
        thread = threading.Thread(target=live.add, args=("r", _chunk("r", 1, "Hi")))
        thread.start()
        thread.join()
        await page.wait(60.0)
        await asyncio.sleep(0)  # anything else woken would be set by now
        assert page._event.is_set()
        assert not other._event.is_set()
        assert not runs_list._event.is_set()  # the runs list shows no tokens
        closing = Closing(wakeups)
        closing.set()
        await other.wait(60.0)
        await runs_list.wait(60.0)
        assert closing.is_set()
        assert other._event.is_set()
        assert runs_list._event.is_set()

    asyncio.run(main())


def test_resume_stream_takes_the_stream_modes_of_stream(tmp_path: Path) -> None:
    """What the console resumes runs with: ``resume_stream(..., mode=[...])``."""
    reply = ChatResponse(message=ChatMessage(role="assistant", content="Dear Ada, hello."))
    model = ScriptedChatModel(lambda request: reply)
    with SqliteStore(tmp_path / "runs.db") as store:
        app = letter_graph().compile(store=store, services={"model": model})
        app.invoke({"to": "Ada"}, run_id="l")
        items = list(app.resume_stream("l", response=True, mode=["messages", "events"]))
        chunks = [item for mode, item in items if mode == "messages"]
        assert all(isinstance(c, MessageChunk) for c in chunks)
        assert "".join(c.text for c in chunks) == "Dear Ada, hello."
        assert {c.node for c in chunks} == {"write"}
        assert [item.kind for mode, item in items if mode == "events"][-1] == "run_finished"
        assert app.get_state("l").text == "Dear Ada, hello."
