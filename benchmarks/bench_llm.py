"""Per-call overhead of the chat models: ScriptedChatModel in memory, and OpenAIChatModel
through the real openai client to the scripted server on 127.0.0.1.

Run: ``.venv/bin/python benchmarks/bench_llm.py``. The HTTP figure is the floor any ReAct step
against a local endpoint pays; the in-memory figure is what the engine's own overhead is
measured against.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel, ScriptedChatModel
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer

CALLS = 200
REQUEST = ChatRequest(messages=(ChatMessage.user("What is 2+2?"),))


def report(name: str, run: Callable[[], object], calls: int) -> None:
    started = time.perf_counter()
    for _ in range(calls):
        run()
    per_call = (time.perf_counter() - started) / calls * 1e6
    print(f"{name:34}{per_call:9.1f} us/call")


def calc_call(request: RecordedRequest) -> Reply:
    return Reply.tool_calls([("calc", {"expr": "2+2"})])


def text_reply(request: RecordedRequest) -> Reply:
    return Reply.text("Two and two make four, as far as anyone can tell.")


class _Journal:
    """A journal that records nothing: only the binding's own cost is measured."""

    def __init__(self, tokens: Callable[[str], None] | None = None) -> None:
        self.tokens = tokens

    def call(self, kind: str, key: str, compute: Callable[[], Any], *, request: Any = None) -> Any:
        return compute()

    async def acall(self, kind: str, key: str, compute: Any, *, request: Any = None) -> Any:
        return await compute()


def main() -> None:
    scripted = ScriptedChatModel(lambda request: "4")
    report("ScriptedChatModel.complete", lambda: scripted.complete(REQUEST), 10 * CALLS)
    report("ChatRequest.fingerprint", REQUEST.fingerprint, 10 * CALLS)
    bound = scripted.bind_journal(_Journal())
    report("journaled complete (no tokens)", lambda: bound.complete(REQUEST), 10 * CALLS)
    streamed = scripted.bind_journal(_Journal(lambda text: None))
    report("journaled complete (tokens)", lambda: streamed.complete(REQUEST), 10 * CALLS)
    with (
        ScriptedOpenAIServer(calc_call) as server,
        OpenAIChatModel("m", base_url=server.base_url) as model,
    ):
        model.complete(REQUEST)  # warm up: client construction, first connection
        report("OpenAIChatModel.complete (HTTP)", lambda: model.complete(REQUEST), CALLS)
    with (
        ScriptedOpenAIServer(text_reply) as server,
        OpenAIChatModel("m", base_url=server.base_url) as model,
    ):
        model.complete(REQUEST)
        report("  text reply, unstreamed (HTTP)", lambda: model.complete(REQUEST), CALLS)
        pieces: list[str] = []
        report(
            "  text reply, streamed (HTTP)",
            lambda: model.complete_streaming(REQUEST, pieces.append),
            CALLS,
        )


if __name__ == "__main__":
    main()
