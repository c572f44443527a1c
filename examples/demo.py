"""The flagship demo: a skill-composed agent that is killed, resumed, replayed and drawn.

``make demo`` runs this file; it needs only the base install and no network. Seven phases,
one line each (the agent itself is in ``examples/demo_agent.py``):

1. model    - start the scripted OpenAI-compatible server on 127.0.0.1 (or, with
              ``OPENAI_BASE_URL`` set, use that endpoint: ``OPENAI_API_KEY``,
              ``STARGRAPH_MODEL``);
2. graph    - compile the order desk (ReAct skill + rules + a nested workflow skill) and
              print its graph hash;
3. run      - start the run in a *worker process*, streaming its progress;
4. crash    - SIGKILL the worker after a few committed steps (a real crash, mid-run);
5. resume   - continue the run in this process from its last committed step, with live
              progress; completed steps are not run again;
6. replay   - replay the finished run offline (the model address is dead on purpose, no tool
              body may run) from a cassette, and show that its diff against the record is
              empty;
7. pictures - write the HTML report of the run and Mermaid/DOT diagrams beside the database.

Everything lands in ``.stargraph/demo/`` under the current directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import demo_agent
from rich.console import Console

from stargraph import viz
from stargraph.checkpoint import Recording, SqliteStore
from stargraph.llm import OpenAIChatModel
from stargraph.replay import diff, export_cassette, load_cassette
from stargraph.runtime import (
    CompiledGraph,
    Event,
    NodeFinished,
    RuleDecided,
    RunFinished,
    RunStarted,
    StepCompleted,
)
from stargraph.testing import ScriptedOpenAIServer
from stargraph.tools import Arbiter

RUN_ID = "desk-1"
KILL_AFTER = 3
"""Committed steps (summed over the run and its child runs) before the worker is killed: the
intake step and the agent's first think and act; the next think then waits on the model."""
WORKER_PACE = 1.0
"""Seconds each scripted model answer takes in the worker, so the kill lands mid-run."""
OUT_DIR = Path(".stargraph") / "demo"
PHASES = 7

console = Console(highlight=False, soft_wrap=True)


def phase(number: int, name: str, text: str) -> None:
    """The one line that explains a phase."""
    console.print(f"[bold cyan]{number}/{PHASES} {name:<8}[/] {text}")


def describe(event: Event) -> str | None:
    """One progress line per interesting event (``None`` for the rest)."""
    who = "/".join([*event.path, event.node or ""]).strip("/")
    where = f"run {event.run_id} step {event.step}"
    if isinstance(event, RunStarted):
        return f"{where}: {'resumed' if event.resumed else 'started'}"
    if isinstance(event, NodeFinished):
        keys = ", ".join(sorted(event.writes)) or "nothing"
        return f"{where}: {who} wrote {keys}"
    if isinstance(event, RuleDecided):
        target = f" -> {event.target}" if event.target else ""
        return f"{where}: rule {event.rule} decided {event.decision}{target}"
    if isinstance(event, StepCompleted):
        return f"{where}: committed"
    if isinstance(event, RunFinished):
        by = f" (stopped by rule {event.stopped_by})" if event.stopped_by else ""
        return f"{where}: finished{by}"
    return None


# ----------------------------------------------------------------------------- services


@contextlib.contextmanager
def live_services(workdir: Path, *, pace: float = 0.0) -> Iterator[tuple[dict[str, Any], str]]:
    """``({"model", "arbiter"}, where)``: the scripted server, or ``OPENAI_BASE_URL``."""
    with contextlib.ExitStack() as stack:
        if os.environ.get("OPENAI_BASE_URL"):
            model = OpenAIChatModel(os.environ.get("STARGRAPH_MODEL", "gpt-4o-mini"))
            where = f"the endpoint {os.environ['OPENAI_BASE_URL']} (OPENAI_BASE_URL)"
        else:
            server = stack.enter_context(ScriptedOpenAIServer(demo_agent.scripted_model(pace=pace)))
            model = OpenAIChatModel("scripted-model", base_url=server.base_url, api_key="demo")
            where = f"the scripted OpenAI-compatible server at {server.base_url}"
        stack.callback(model.close)
        arbiter = stack.enter_context(Arbiter(demo_agent.tool_registry(), workspace=workdir))
        yield {"model": model, "arbiter": arbiter}, where


@contextlib.contextmanager
def offline_services(workdir: Path) -> Iterator[dict[str, Any]]:
    """A model at a dead address (replay must never call it) and an arbiter."""
    model = OpenAIChatModel("scripted-model", base_url="http://127.0.0.1:9/v1", api_key="x")
    try:
        with Arbiter(demo_agent.tool_registry(), workspace=workdir) as arbiter:
            yield {"model": model, "arbiter": arbiter}
    finally:
        model.close()


# ----------------------------------------------------------------------------- the worker


def worker(db: str) -> None:
    """Phase 3 in the worker process: run the desk, one line per event on stdout."""
    with (
        tempfile.TemporaryDirectory() as workdir,
        live_services(Path(workdir), pace=WORKER_PACE) as (services, _),
    ):
        store = SqliteStore(db)
        app = demo_agent.desk_graph().compile(store=store, services=services)
        for event in app.stream(demo_agent.RUN_INPUT, run_id=RUN_ID):
            line = describe(event)
            if line is not None:
                print(f"{event.kind}\t{line}", flush=True)
        store.close()


def run_and_kill(db: Path, store: SqliteStore) -> tuple[int, int]:
    """Start the worker and watch its checkpoints land in the store; SIGKILL it once
    KILL_AFTER steps (at any depth) are committed. Returns ``(pid, committed steps)``."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None

    def relay(stream: Any) -> None:
        # The worker prints a root step's events when that step commits; a subgraph node's
        # child steps show up in the store first, which is what the loop below watches.
        for raw in stream:
            console.print(f"    [dim]worker {proc.pid}[/] {raw.rstrip().partition(chr(9))[2]}")

    reader = threading.Thread(target=relay, args=(proc.stdout,), daemon=True)
    reader.start()
    seen: dict[str, int] = {}
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # the worker may be creating the tables
            for record in store.list_runs(limit=100):
                if seen.get(record.run_id, 0) < record.last_step:
                    seen[record.run_id] = record.last_step
                    console.print(
                        f"    [dim]store[/] {record.run_id} committed step {record.last_step}"
                    )
        if sum(seen.values()) >= KILL_AFTER:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    reader.join(timeout=10)
    proc.stdout.close()
    return proc.pid, sum(seen.values())


# ----------------------------------------------------------------------------- phases


def resume_live(app: CompiledGraph[Any]) -> None:
    """Phase 5: resume with a rich status line showing the current step and node."""
    with console.status("resuming ...") as status:
        for event in app.resume_stream(RUN_ID):
            who = "/".join([*event.path, event.node or ""]).strip("/") or "-"
            status.update(f"step {event.step}  {who}  ({event.kind})")
            line = describe(event)
            if line is not None:
                console.print(f"    {line}")


def store_summary(store: SqliteStore) -> str:
    """``desk-1 running@2, desk-1::agent@1.0 running@3`` - what the store holds."""
    runs = sorted(store.list_runs(limit=100), key=lambda r: r.run_id)
    return ", ".join(f"{r.run_id} {r.status} at step {r.last_step}" for r in runs)


def main() -> None:
    """Run the seven phases."""
    if OUT_DIR.exists():
        shutil.rmtree(OUT_DIR)
    OUT_DIR.mkdir(parents=True)
    db = OUT_DIR / "demo.db"
    graph = demo_agent.desk_graph()
    ir = graph.to_ir()

    with tempfile.TemporaryDirectory() as workdir, live_services(Path(workdir)) as (services, at):
        phase(1, "model", f"the agent talks through the real openai client to {at}")
        store = SqliteStore(db)
        app = graph.compile(store=store, services=services)
        phase(
            2,
            "graph",
            f"{ir.name!r} is graph {app.graph_hash}: intake -> agent (ReAct skill, stopped by "
            "its termination rules) -> invoice (nested workflow skill) -> approve (only when "
            "rule desk/big_order fires)",
        )
        phase(
            3,
            "run",
            f"starting run {RUN_ID} in a worker process; every step is checkpointed to {db}",
        )
        pid, committed = run_and_kill(db, store)
        if committed < KILL_AFTER:
            raise SystemExit(f"the worker stopped after {committed} steps; see its output above")
        phase(
            4,
            "crash",
            f"killed worker {pid} with SIGKILL after {committed} committed steps; the store "
            f"holds: {store_summary(store)}",
        )
        phase(
            5,
            "resume",
            f"resuming {RUN_ID} in this process (pid {os.getpid()}) from its last committed "
            "step; finished steps are read back, not run again",
        )
        resume_live(app)
        final = app.get_state(RUN_ID)
        record = app.get_run(RUN_ID)
        console.print(f"    answer:   {final.final_answer}")
        console.print(f"    invoice:  {final.invoice}")
        console.print(f"    approval: {final.approval}")
        console.print(f"    tools:    {', '.join(c.tool for c in final.tool_calls)}")
        console.print(f"    status:   {record.status} ({store_summary(store)})")

    cassette_path = export_cassette(store, RUN_ID, OUT_DIR / f"{RUN_ID}.cassette.json")
    cassette = load_cassette(cassette_path, graph_hash=app.graph_hash)
    demo_agent.TOOL_BODIES["allowed"] = False
    try:
        with tempfile.TemporaryDirectory() as tmp, offline_services(Path(tmp)) as offline:
            replayed = graph.compile(services=offline).replay(cassette, stub="must")
    finally:
        demo_agent.TOOL_BODIES["allowed"] = True
    run_diff = diff(Recording.from_store(store, RUN_ID), cassette)
    same_state = replayed.model_dump(mode="json") == final.model_dump(mode="json")
    if not (run_diff.identical and same_state):
        raise SystemExit(f"replay differs from the record: {run_diff}")
    phase(
        6,
        "replay",
        f"replayed {RUN_ID} offline from {cassette_path} (model address dead, no tool body "
        f"ran): diff against the recorded run is empty ({len(run_diff.steps)} differing "
        "steps, same final state)",
    )

    report = OUT_DIR / f"{RUN_ID}.html"
    report.write_text(viz.html_report(ir, store, RUN_ID), encoding="utf-8")
    mermaid = OUT_DIR / "order-desk.mmd"
    mermaid.write_text(viz.to_mermaid(ir), encoding="utf-8")
    dot = OUT_DIR / "order-desk.dot"
    dot.write_text(viz.to_dot(ir), encoding="utf-8")
    pictures = [report, mermaid, dot]
    if viz.graphviz_available():
        svg = OUT_DIR / "order-desk.svg"
        svg.write_bytes(viz.render(ir, "svg"))
        pictures.append(svg)
    # Filed the way `stargraph run` does, so `stargraph show/diff` find the graph by hash.
    archive = OUT_DIR / "graphs" / f"{ir.graph_hash.removeprefix('sha256:')}.json"
    archive.parent.mkdir(exist_ok=True)
    archive.write_text(ir.to_json(indent=True), encoding="utf-8")
    # ...and the code that made it, so `stargraph show` imports its state model from any
    # folder (the agent's module is not importable from where `make demo` runs).
    agent_file = Path(demo_agent.__file__).resolve()
    source = {"spec": f"{agent_file}:desk_graph", "cwd": str(agent_file.parent)}
    archive.with_suffix(".source").write_text(json.dumps(source), encoding="utf-8")
    store.close()
    phase(7, "pictures", "wrote " + ", ".join(str(p) for p in pictures))
    console.print(f"done. Open {report} in a browser; list the runs with: stargraph runs --db {db}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main()
