"""Replay vs live: a recorded 1,000-step ReAct run replayed offline (issue 8).

Run: ``.venv/bin/python benchmarks/bench_replay.py [llm_steps]`` (default 333).

Live: ``react_graph`` with a termination pack of ``llm_steps`` LLM steps runs against the
scripted OpenAI-compatible HTTP server (:class:`~stargraph.testing.ScriptedOpenAIServer`,
a function script that always answers with one tool call, so the model never finishes),
with a trivial ``@tool`` and a :class:`~stargraph.checkpoint.SqliteStore`. Each LLM step is
three graph steps (think, act, observe): 333 LLM steps are 999 graph steps.

Replay: the server is stopped, the model points at a dead address, and the run is replayed
from the store (``app.replay(run_id)``, reading the recording included) and from a
recording already in memory. Both must give the live final state. Printed: total seconds
and ms per graph step for each, and the live/replay ratio (target: at least 20x).
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from pathlib import Path

from stargraph.checkpoint import Recording, SqliteStore
from stargraph.llm import OpenAIChatModel
from stargraph.runtime import SeededEntropy
from stargraph.skills.react import react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, Workspace, llm_name_for, tool

ADD = "bench.replay_add@1.0.0"
ADD_NAME = llm_name_for(ADD)
RUN_ID = "bench-replay"


@tool(id=ADD, side_effect="none")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main(argv: list[str]) -> int:
    llm_steps = int(argv[0]) if argv else 333
    graph = react_graph(tools=[ADD], max_steps=llm_steps, error_budget=3)
    counter = itertools.count()

    def script(request: RecordedRequest) -> Reply:
        del request
        n = next(counter)
        return Reply.tool_calls([(ADD_NAME, {"a": n, "b": 1})])

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        arbiter = Arbiter(ToolRegistry.build(builtins=[add]), workspace=Workspace.at(workdir))
        store = SqliteStore(workdir / "bench.db")
        try:
            with ScriptedOpenAIServer(script) as server:
                model = OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="x")
                app = graph.compile(
                    store=store,
                    services={"model": model, "arbiter": arbiter},
                    entropy=lambda: SeededEntropy(0),
                    max_steps=10 * llm_steps,
                )
                started = time.perf_counter()
                final = app.invoke({"task": "count forever"}, run_id=RUN_ID)
                live_s = time.perf_counter() - started
                model.close()
                app.close()
            steps = app.get_run(RUN_ID).last_step
            dead = OpenAIChatModel("scripted-model", base_url="http://127.0.0.1:9/v1", api_key="x")
            offline = graph.compile(
                store=store,
                services={"model": dead, "arbiter": arbiter},
                entropy=lambda: SeededEntropy(0),
                max_steps=10 * llm_steps,
            )
            started = time.perf_counter()
            replayed = offline.replay(RUN_ID)  # the default: warns of the re-run bodies
            replay_s = time.perf_counter() - started
            recording = Recording.from_store(store, RUN_ID)
            started = time.perf_counter()
            in_memory = offline.replay(recording)
            memory_s = time.perf_counter() - started
            # What a default replay adds before it starts: working out which node bodies
            # run again (for its warning).
            started = time.perf_counter()
            offline.replay_plan(recording)
            plan_s = time.perf_counter() - started
            dead.close()
            offline.close()
        finally:
            store.close()
    if not replayed == in_memory == final:
        print("FAIL: the replayed state differs from the live one")
        return 1
    calls = len(final.tool_calls) if hasattr(final, "tool_calls") else "?"
    print(f"ReAct run: {llm_steps} LLM steps, {steps} graph steps, tool calls: {calls}")
    rows: list[tuple[str, float]] = [
        ("live (HTTP server, SQLite)", live_s),
        ("replay from the store", replay_s),
        ("replay of a loaded recording", memory_s),
        ("its replay plan", plan_s),
    ]
    for label, seconds in rows:
        print(f"  {label:30} {seconds:8.3f} s  {1000 * seconds / steps:7.3f} ms/step")
    ratio = live_s / replay_s
    print(f"  live / replay (from the store):  {ratio:6.1f}x  (target >= 20x)")
    print(f"  live / replay (loaded):          {live_s / memory_s:6.1f}x")
    return 0 if ratio >= 20 else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
