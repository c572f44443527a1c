"""The cells of the combination grid: stores, drivers, the record a cell is judged by.

A cell runs one feature's whole story (its run, the answer to an interrupt, a thread's
second turn) on one store through one driver, and returns the final state and a summary of
every run it made. The test compares both with the reference cell: the feature run by plain
``invoke`` on the in-memory store.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pydantic_core

import stargraph
from stargraph import END, START, interrupt_of
from stargraph.checkpoint import CheckpointStore, MemoryStore, SqliteStore
from stargraph.reducers import Reducer
from stargraph.runtime import CompiledGraph
from tests.grid.features import FEATURES, LEDGER, NO_ANSWER, Feature, grid_extra

STORES: Final = ("memory", "sqlite", "postgres")
STREAM_MODES: Final = ("events", "updates", "values", "custom", "messages")
"""Every mode ``stream`` accepts (``test_issue44_grid_streams_every_mode`` keeps it so)."""
METADATA_KEY: Final = "__metadata__"
"""The key of an ``updates`` item's flags (``{"cached": True}``: a node cache served it)."""
INTERRUPT_KEY: Final = "__interrupt__"
"""The key of the item ``updates`` and ``values`` streams end with at an interrupt."""
DRIVERS: Final[tuple[str, ...]] = (
    "invoke",
    *(f"stream_{mode}" for mode in STREAM_MODES),
    "stream_all",
    "ainvoke",
    "astream",
    "closed_stream",
    "closed_astream",
    "worker",
    "sigkill",
    "sigkill_journaled",
    "replay",
    "replay_stream",
    "replay_versions",
    "fork_as_node",
    "serve",
    "console",
)
"""Every way a run is driven; ``stream_all`` asks for every mode at once; ``serve`` drives
the story over HTTP, through ``stargraph serve`` and LangGraph's own client; ``console``
plays it by ``invoke`` and reads every run of it through the run console's pages."""

REFERENCE: Final = ("memory", "invoke")

_NO_PATH = "a worker opens the store by its file or DSN; the memory store has neither"
_DIES = "the memory store dies with the process that is killed: nothing is left to resume"
_NO_THREAD = "submit() queues a run, not a thread's turn: it takes no thread_id"
_NO_JOURNAL = "no node makes a journaled call: there is no point inside a step to die at"
_NO_DB = "stargraph serve opens its database by file or DSN; the memory store has neither"

IMPOSSIBLE: Final[dict[str, str]] = {
    **{f"{f}-memory-worker": _NO_PATH for f in FEATURES},
    **{f"{f}-memory-serve": _NO_DB for f in FEATURES},
    **{f"{f}-memory-{d}": _DIES for f in FEATURES for d in ("sigkill", "sigkill_journaled")},
    **{
        f"{f}-{s}-sigkill_journaled": _NO_JOURNAL
        for f in FEATURES
        if FEATURES[f].journaled is None
        for s in ("sqlite", "postgres")
    },
    "thread-sqlite-worker": _NO_THREAD,
    "thread-postgres-worker": _NO_THREAD,
}
"""The cells that cannot exist, each with the reason."""


def cell_id(feature: str, store: str, driver: str) -> str:
    """``chain-sqlite-stream_updates``."""
    return f"{feature}-{store}-{driver}"


def all_cells() -> list[tuple[str, str, str]]:
    """Every (feature, store, driver), impossible ones included."""
    return [(f, s, d) for f in FEATURES for s in STORES for d in DRIVERS]


# ----------------------------------------------------------------------------- stores


@dataclass
class Backend:
    """Where a cell's runs are kept: opens fresh handles as a new process would."""

    kind: str
    tmp: Path
    dsn: str | None = None
    schema: str = "stargraph"
    memory: MemoryStore = field(default_factory=MemoryStore)
    opened: list[CheckpointStore] = field(default_factory=list)

    @property
    def db(self) -> str:
        """What a worker or a child process opens: the SQLite file or the DSN."""
        return self.dsn if self.kind == "postgres" else str(self.tmp / "runs.db")  # type: ignore[return-value]

    def open(self) -> CheckpointStore:
        """A handle on the cell's store (the one in-process store for ``memory``)."""
        if self.kind == "memory":
            return self.memory
        made = open_store(self.kind, self.db, self.schema)
        self.opened.append(made)
        return made

    def close(self) -> None:
        """Close every handle opened."""
        for made in self.opened:
            made.close()


def open_store(kind: str, db: str, schema: str) -> CheckpointStore:
    """A new handle on a SQLite file or a PostgreSQL schema."""
    if kind == "postgres":
        from stargraph.checkpoint import PostgresStore

        return PostgresStore(db, schema=schema)
    return SqliteStore(db)


# ----------------------------------------------------------------------------- records


def _json(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value)


def run_summary(store: CheckpointStore, run_id: str, *, after: int = -1) -> dict[str, Any]:
    """What a cell is judged by for one run: status, steps and their writes, who stopped it,
    its turn, and the same of its child runs (by site and step), those of steps after
    ``after`` only."""
    record = store.get_run(run_id)
    steps = store.get_steps(run_id)
    children = {}
    prefix = f"{run_id}::"
    for child in store.list_runs(limit=10_000):
        rest = child.run_id.removeprefix(prefix)
        if rest == child.run_id or "::" in rest:
            continue
        step = int(rest.partition("@")[2].partition(".")[0] or -1)
        if step > after:
            children[rest] = run_summary(store, child.run_id)
    return {
        "status": record.status,
        "steps": len(steps),
        "writes": [sorted((w.node, w.index, _json(w.writes)) for w in s.writes) for s in steps[1:]],
        "stopped_by": record.stopped_by,
        "error": record.error,
        "turn": record.turn,
        "children": children,
    }


@dataclass
class Result:
    """A cell's outcome: the final state of its last run, the summary of each run, and the
    tool bodies that ran (in every process of the cell)."""

    final: dict[str, Any]
    runs: dict[str, dict[str, Any]]
    effects: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- drivers


def _reducers(model: type[Any]) -> dict[str, Reducer]:
    found = {}
    for name, hint in typing.get_type_hints(model, include_extras=True).items():
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Reducer):
                found[name] = meta
    return found


def merge_updates(model: type[Any], start: dict[str, Any], items: list[Any]) -> dict[str, Any]:
    """``start`` with every ``{node: writes}`` of an updates stream applied through the
    state's reducers, as the run applied them."""
    reducers = _reducers(model)
    state = dict(start)
    for item in items:
        for node, writes in item.items():
            if node in (INTERRUPT_KEY, METADATA_KEY):
                continue
            for name, value in _json(writes).items():
                fn = reducers.get(name)
                # As JSON again: a reducer may build models (add_messages makes messages).
                state[name] = value if fn is None else _json(fn(state[name], value))
    return state


def _dump(state: Any) -> dict[str, Any]:
    return dict(state.model_dump(mode="json"))


@dataclass
class Driver:
    """Runs a story's parts: a run's start and the answer to its interrupt."""

    name: str
    events: dict[str, list[Any]] = field(default_factory=dict)
    """The events each run's streams yielded, in order (stream drivers with ``events``)."""

    def start(
        self, app: CompiledGraph[Any], input: Any, run_id: str, thread_id: str | None
    ) -> None:
        """Start ``run_id`` and drive it to its end or its interrupt."""
        kw: dict[str, Any] = {"run_id": run_id, "thread_id": thread_id}
        if self.name == "closed_stream":
            _close_mid_step(app, app.stream(input, **kw), run_id)
        elif self.name == "closed_astream":
            asyncio.run(_aclose_mid_step(app, app.astream(input, **kw), run_id))
        elif self.name == "ainvoke":
            asyncio.run(app.ainvoke(input, **kw))
        elif self.name == "astream":
            self._stream(app, run_id, None, lambda mode: app.astream(input, mode=mode, **kw))
        elif self.name.startswith("stream_"):
            self._stream(app, run_id, None, lambda mode: app.stream(input, mode=mode, **kw))
        else:
            app.invoke(input, **kw)

    def answer(self, app: CompiledGraph[Any], run_id: str, response: Any) -> None:
        """Resume the interrupted ``run_id`` with ``response``."""
        if self.name in ("ainvoke", "astream"):
            asyncio.run(app.aresume(run_id, response=response))
        elif self.name.startswith("stream_"):
            before = _dump(app.get_state(run_id))
            self._stream(
                app,
                run_id,
                before,
                lambda mode: app.resume_stream(run_id, response=response, mode=mode),
            )
        else:
            app.resume(run_id, response=response)

    def _modes(self) -> Any:
        if self.name in ("stream_all", "astream"):
            return list(STREAM_MODES)
        return self.name.removeprefix("stream_")

    def _stream(
        self,
        app: CompiledGraph[Any],
        run_id: str,
        before: dict[str, Any] | None,
        open_stream: Callable[[Any], Any],
    ) -> None:
        modes = self._modes()
        if self.name == "astream":
            items = asyncio.run(_collect(open_stream(modes)))
        else:
            items = list(open_stream(modes))
        pairs = items if isinstance(modes, list) else [(modes, item) for item in items]
        check_stream(app, run_id, before, pairs)
        self.events.setdefault(run_id, []).extend(i for m, i in pairs if m == "events")


def _close_mid_step(app: CompiledGraph[Any], events: Any, run_id: str) -> None:
    """Read ``events`` until the run's first node finishes and close the stream there,
    inside the step: that step still commits, then the run stops (``play`` resumes it)."""
    for event in events:
        if event.kind == "node_finished" and event.run_id == run_id:
            events.close()
            _closed_at(app, run_id, event.step)
            return


async def _aclose_mid_step(app: CompiledGraph[Any], events: Any, run_id: str) -> None:
    """:func:`_close_mid_step` over an async stream: it must end the same way."""
    async for event in events:
        if event.kind == "node_finished" and event.run_id == run_id:
            await events.aclose()
            _closed_at(app, run_id, event.step)
            return


def _closed_at(app: CompiledGraph[Any], run_id: str, step: int) -> None:
    record = app.get_run(run_id)
    assert record.last_step >= step, (
        f"the stream was closed in step {step}, which finished a node, but the run's last "
        f"committed step is {record.last_step}: the step was dropped"
    )
    assert record.status != "running", record


async def _collect(stream: Any) -> list[Any]:
    return [item async for item in stream]


def check_stream(
    app: CompiledGraph[Any], run_id: str, before: dict[str, Any] | None, pairs: list[Any]
) -> None:
    """The stream agrees with the stored run: the last ``values`` item is its state, the
    ``updates`` merged into the state it started from give that state too, and every event
    and chunk names the run."""
    final = _dump(app.get_state(run_id))
    start = before if before is not None else _dump(app.get_state(run_id, 0))
    values = [i for m, i in pairs if m == "values" and INTERRUPT_KEY not in _keys(i)]
    updates = [i for m, i in pairs if m == "updates"]
    modes = {m for m, _ in pairs}
    if "values" in modes:
        assert values, "a values stream yielded no state"
        assert _dump(values[-1]) == final, "the values stream's last item is not the final state"
    if "updates" in modes:
        merged = merge_updates(app.state_model, start, updates)
        assert merged == final, "the updates stream merged does not give the final state"
    for mode, item in pairs:
        if mode in ("custom", "messages", "events"):
            assert getattr(item, "run_id", run_id).partition("::")[0] == run_id, item
    events = [i for m, i in pairs if m == "events" and i.run_id == run_id]
    if "events" in modes:
        check_events(app, run_id, final, events)
    if {"events", "updates"} <= modes:
        # A cache hit is flagged on its node_finished event and on its updates item alike.
        hits = [(e.step, e.node) for e in events if e.kind == "node_finished" and e.cached]
        flagged = [i for i in updates if (i.get(METADATA_KEY) or {}).get("cached")]
        assert len(flagged) == len(hits), (hits, flagged)
        assert [n for i in flagged for n in i if n != METADATA_KEY] == [n for _, n in hits]


def check_events(
    app: CompiledGraph[Any], run_id: str, final: dict[str, Any], events: list[Any]
) -> None:
    """The run's events agree with its record: the steps they completed hold the writes
    their ``node_finished`` events carried, and the last event is the run's outcome."""
    store = app.store
    assert store is not None
    record = store.get_run(run_id)
    steps = {s.step: s for s in store.get_steps(run_id)}
    done = [e.step for e in events if e.kind == "step_completed"]
    for step in done:
        finished = sorted(
            (e.node, e.index, _json(e.writes))
            for e in events
            if e.kind == "node_finished" and e.step == step
        )
        stored = sorted((w.node, w.index, _json(w.writes)) for w in steps[step].writes)
        assert finished == stored, f"step {step}: events {finished} but record {stored}"
    last = events[-1]
    if last.kind == "run_finished":
        assert done, "the events stream finished the run without completing a step"
        assert (last.state, last.stopped_by) == (final, record.stopped_by)
        assert record.status != "interrupted"
    else:
        assert (last.kind, record.status) == ("run_interrupted", "interrupted"), last


def _keys(item: Any) -> set[str]:
    return set(item) if isinstance(item, Mapping) else set()


# ----------------------------------------------------------------------------- a story


@dataclass
class Story:
    """One feature's whole story on one store, with the services open."""

    feature: Feature
    backend: Backend
    services: Mapping[str, Any]
    kill_at: int = 1
    """The commit after which the ``sigkill`` driver's child kills itself."""
    forker: Forker | None = None
    """Where killed children are forked from (None: each one is a new interpreter)."""

    @property
    def thread(self) -> str | None:
        """The thread id, for a feature run as two turns."""
        return None if self.feature.second is None else "thread-1"

    @property
    def run_ids(self) -> list[str]:
        """The story's top-level runs, in order."""
        return ["run-1"] if self.feature.second is None else ["run-1", "run-2"]

    def inputs(self) -> list[dict[str, Any]]:
        """Each run's input."""
        second = self.feature.second
        return [self.feature.input] if second is None else [self.feature.input, second]

    def app(self, *, without: tuple[str, ...] = ()) -> CompiledGraph[Any]:
        """The feature's graph compiled on a fresh handle of the store, with its services
        but those named in ``without``."""
        services = {k: v for k, v in self.services.items() if k not in without}
        return self.feature.build().compile(  # type: ignore[no-any-return]
            store=self.backend.open(), services=services
        )

    def play(self, driver: Driver, app: CompiledGraph[Any] | None = None) -> Result:
        """Run every part through ``driver``, continuing what already ran (a killed child's
        runs): a run that exists is resumed, an interrupted one answered."""
        app = app or self.app()
        for run_id, input in zip(self.run_ids, self.inputs(), strict=True):
            status = _status(app, run_id)
            if status is None:
                driver.start(app, input, run_id, self.thread)
                status = _status(app, run_id)
            if status in ("running", "orphaned", "cancelled"):
                app.resume(run_id)
            if _status(app, run_id) == "interrupted" and self.feature.answer is not NO_ANSWER:
                driver.answer(app, run_id, self.feature.response(app, run_id))
        return self.result(app, self.run_ids)

    def result(self, app: CompiledGraph[Any], run_ids: list[str], after: int = -1) -> Result:
        """The final state of the last run and the summary of each."""
        store = app.store
        assert store is not None
        runs = {r: run_summary(store, r, after=after) for r in run_ids}
        return Result(_dump(app.get_state(run_ids[-1])), runs, effects())


def effects() -> list[str]:
    """The tool bodies run so far by this cell (``features.LEDGER``), sorted."""
    path = os.environ.get(LEDGER)
    if not path or not Path(path).exists():
        return []
    return sorted(Path(path).read_text(encoding="utf-8").splitlines())


def _status(app: CompiledGraph[Any], run_id: str) -> str | None:
    try:
        return app.get_run(run_id).status
    except LookupError:
        return None


# ----------------------------------------------------------------------------- cells


def run_cell(story: Story, driver: str) -> Result:
    """Run the story through ``driver``."""
    if driver in ("closed_stream", "closed_astream"):
        return replays_offline(story, story.play(Driver(driver)))
    if driver in ("invoke", "ainvoke", "astream"):
        return story.play(Driver(driver))
    if driver.startswith("stream_"):
        return story.play(Driver(driver))
    if driver == "worker":
        return _worker(story)
    if driver == "sigkill":
        return _sigkill(story, f"commit:{story.kill_at}")
    if driver == "sigkill_journaled":
        return _sigkill(story, f"journal:{story.feature.journaled}")
    if driver == "replay":
        return _replay(story)
    if driver == "replay_stream":
        return _replay(story, stream=True)
    if driver == "replay_versions":
        return _replay_versions(story)
    if driver == "fork_as_node":
        return _fork(story)
    if driver == "serve":
        return _serve(story)
    if driver == "console":
        return _console(story)
    raise AssertionError(f"unknown driver {driver!r}")


def _worker(story: Story) -> Result:
    from stargraph.workers import Worker, submit

    backend = story.backend
    (run_id,) = story.run_ids
    submit(backend.db, story.feature.graph, story.feature.input, run_id=run_id,
           schema=backend.schema)  # fmt: skip
    with Worker(backend.db, schema=backend.schema, services=story.services) as worker:
        outcome = worker.run_once()
    assert outcome is not None, "the worker found no run to claim"
    assert outcome not in ("failed", "dead", "lost"), story.app().get_run(run_id)
    return replays_offline(story, story.play(Driver("invoke")))


def _serve(story: Story) -> Result:
    """The story over HTTP: ``stargraph serve`` (uvicorn on a loopback port) serving the
    graph on the cell's database, driven by ``langgraph-sdk``'s client: each part a run
    streamed in every mode, an interrupt answered with ``Command(resume=...)``."""
    from langgraph_sdk import get_sync_client

    from stargraph.client import Client
    from tests.serve.support import InThread

    backend = story.backend
    app = story.app()
    server = InThread([app], backend.db, schema=backend.schema, workers=1)
    name = app.ir.name
    try:
        with get_sync_client(url=server.url) as client, Client(server.url) as ours:
            thread = story.thread
            for run_id, input in zip(story.run_ids, story.inputs(), strict=True):
                if thread is not None:
                    client.threads.create(thread_id=thread, if_exists="do_nothing")
                # stargraph's client names the run (LangGraph's cannot); the SDK does the rest.
                run = ours.start(thread, name, input, run_id=run_id)
                tid = run["thread_id"]
                parts = list(client.runs.join_stream(tid, run["run_id"]))
                ids = [int(p.id or -1) for p in parts]
                assert ids == list(range(len(ids))), f"events lost or repeated: {ids}"
                ended = client.runs.get(tid, run["run_id"])
                assert ended["status"] in ("success", "interrupted"), ended
                if ended["status"] == "interrupted" and story.feature.answer is not NO_ANSWER:
                    answer = story.feature.response(app, run_id)
                    client.runs.wait(tid, name, command={"resume": answer})
    finally:
        server.close()
    return replays_offline(story, story.result(story.app(), story.run_ids))


def _console(story: Story) -> Result:
    """The story by ``invoke``, then every run it made (child skill runs too) read through
    the run console: its page, its timeline (a line per step) and the inspector of every
    step, which works the state out and says what the step changed."""
    import re
    from urllib.parse import quote

    from starlette.testclient import TestClient

    from stargraph.ui import create_app

    result = story.play(Driver("invoke"))
    app = story.app()
    store = app.store
    assert store is not None
    console = create_app(store, graphs=[app])
    with TestClient(console, base_url="http://127.0.0.1") as http:
        runs = store.list_runs(limit=1000)
        assert {r.run_id for r in runs} >= set(story.run_ids)
        for run in runs:
            rid = quote(run.run_id, safe="")
            page = http.get(f"/runs/{rid}")
            assert page.status_code == 200, (run.run_id, page.text[:500])
            steps = re.findall(r'<li class="tl-step" data-step="(\d+)"', page.text)
            shown = min(run.last_step + 1, 50)  # a page shows the newest 50 steps
            assert steps == [str(n) for n in range(run.last_step + 1 - shown, run.last_step + 1)]
            for step in range(run.last_step + 1):
                seen = http.get(f"/runs/{rid}/inspect?step={step}")
                assert seen.status_code == 200, (run.run_id, step, seen.text[:500])
                assert "What this step changed" in seen.text, (run.run_id, step, seen.text)
        console.state.console.close()
    return result


FORKER: Final = "from tests.grid import forker; forker.main()"
ROOT: Final = Path(__file__).resolve().parents[2]
HANG_S: Final = 120.0
"""Only to catch a hang: no cell's child comes near it."""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The child imports the stargraph this process runs, and the tests package from ROOT.
    src = Path(stargraph.__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT), env.get("PYTHONPATH", "")])
    return env


class Forker:
    """The :mod:`tests.grid.forker` process, started on first use: each killed child is a
    fork of it, so none pays for the imports again."""

    def __init__(self, tmp: Path) -> None:
        self.errors = tmp / "forker.err"
        self.proc: subprocess.Popen[str] | None = None

    def run(self, argv: list[str]) -> tuple[int, str]:
        """Run :func:`child` with ``argv`` in a fresh fork; its exit code and stderr."""
        if self.proc is None:
            with self.errors.open("w") as err:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", FORKER], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=err, env=_child_env(), cwd=ROOT, text=True,
                )  # fmt: skip
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        seen = self.errors.stat().st_size
        env = {LEDGER: os.environ[LEDGER]} if LEDGER in os.environ else {}
        self.proc.stdin.write(json.dumps({"argv": argv, "env": env}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], HANG_S)
        assert ready, f"a forked child did not end within {HANG_S} s"
        line = self.proc.stdout.readline()
        assert line, f"the forker died: {self.errors.read_text()[-2000:]}"
        with self.errors.open() as err:
            err.seek(seen)
            return int(json.loads(line)["returncode"]), err.read()

    def close(self) -> None:
        """Stop the forker (it ends when its stdin closes)."""
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=HANG_S)
            assert self.proc.stdout is not None
            self.proc.stdout.close()


def _sigkill(story: Story, kill_at: str) -> Result:
    backend = story.backend
    argv = [story.feature.name, backend.kind, backend.db, backend.schema,
            str(backend.tmp / "ws"), kill_at]  # fmt: skip
    if story.forker is not None:
        code, stderr = story.forker.run(argv)
    else:
        done = subprocess.run(
            [sys.executable, "-c", "from tests.grid.cells import child; child()", *argv],
            check=False, env=_child_env(), cwd=ROOT, capture_output=True, text=True,
            timeout=HANG_S,
        )  # fmt: skip
        code, stderr = done.returncode, done.stderr
    assert code == -signal.SIGKILL, (
        f"the child was to die at {kill_at}; it exited {code}: {stderr[-2000:]}"
    )
    return replays_offline(story, story.play(Driver("invoke")))


def child() -> None:
    """A process that plays a story on a store and SIGKILLs itself at a known point, no
    timing involved: ``commit:N`` right after the store committed its N-th step (of any
    run); ``journal:KIND`` right after the first journaled call of that kind (a tool call,
    an interrupt's response) is recorded, inside the step, before the step commits."""
    name, kind, db, schema, workspace, kill_at = sys.argv[1:7]
    feature = FEATURES[name]
    store = open_store(kind, db, schema)
    point, _, arg = kill_at.partition(":")
    commits = 0
    commit = store.commit_step
    journal = store.append_journal

    def commit_then_die(run_id: str, step: Any, **kwargs: Any) -> None:
        nonlocal commits
        commit(run_id, step, **kwargs)
        commits += 1
        if point == "commit" and commits == int(arg):
            os.kill(os.getpid(), signal.SIGKILL)

    def journal_then_die(run_id: str, entry: Any, **kwargs: Any) -> None:
        journal(run_id, entry, **kwargs)
        if point == "journal" and entry.kind == arg:
            os.kill(os.getpid(), signal.SIGKILL)

    store.commit_step = commit_then_die  # type: ignore[method-assign]
    store.append_journal = journal_then_die  # type: ignore[method-assign]
    backend = Backend(kind, Path(workspace).parent, dsn=db if kind == "postgres" else None,
                      schema=schema)  # fmt: skip
    with feature.serve(Path(workspace)) as services:
        story = Story(feature, backend, services)
        app = feature.build().compile(store=store, services=dict(services))
        story.play(Driver("invoke"), app)


OFFLINE: Final = ("model", "arbiter")
"""The services an offline replay goes without: the record answers their calls."""


def replays_offline(story: Story, result: Result) -> Result:
    """``result``, once each of the story's runs replayed offline (no services) to the
    state it ended with: a record written by several processes replays as one written by
    one."""
    offline = story.app(without=OFFLINE)
    for run_id in story.run_ids:
        assert _dump(offline.replay(run_id)) == _dump(offline.get_state(run_id)), run_id
    assert effects() == result.effects, "the replay ran a tool body"
    return result


OUTCOME_EVENTS: Final = frozenset(
    {"node_finished", "step_completed", "rule_decided", "run_finished"}
)
"""The events that say what a run did (a replay skips the wait at an interrupt, so the
events around it are not among them)."""


def _outcomes(events: list[Any]) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in events if e.kind in OUTCOME_EVENTS]


def _replay(story: Story, *, stream: bool = False) -> Result:
    live = Driver("stream_events" if stream else "invoke")
    recorded = story.play(live)
    offline = story.app(without=OFFLINE)
    replayed = {}
    for run_id in story.run_ids:
        if stream:
            events = list(offline.replay_stream(run_id))
            assert _outcomes(events) == _outcomes(live.events[run_id]), (
                f"the replay of {run_id} streamed other events than the live run"
            )
        replayed[run_id] = _dump(offline.replay(run_id))
        assert replayed[run_id] == _dump(offline.get_state(run_id)), f"replay of {run_id} differs"
    after = story.result(offline, story.run_ids)
    assert after.effects == recorded.effects, "the replay ran a tool body"
    # The record after the replay: a replay writes nothing.
    return Result(replayed[story.run_ids[-1]], after.runs, after.effects)


EXTRA: Final = "grid_extra"
"""The node the next version of every feature's graph adds (``replay_versions``)."""


def _replay_versions(story: Story) -> Result:
    """Run live, then replay each run offline against the next version of the graph (an
    unrelated node added beside the entry): every region but the new one is served from the
    record - no model, no tool body - and the final state is the recorded one."""
    recorded = story.play(Driver("invoke"))
    offline = story.app(without=OFFLINE)
    version = (
        story.feature.build()
        .with_node(EXTRA, grid_extra)
        .with_edge(START, EXTRA)
        .with_edge(EXTRA, END)
        .compile()
    )
    final: dict[str, Any] = {}
    for run_id in story.run_ids:
        report = offline.replay(run_id, graph=version)
        stored = _dump(offline.get_state(run_id))
        final = {k: v for k, v in report.final.items() if k in stored}
        assert final == stored, f"replay of {run_id} against the next version differs"
        statuses = {r.region: r.status for r in report.regions}
        assert statuses.pop(EXTRA) == "re-executed", report
        assert set(statuses.values()) == {"served"}, report
    after = story.result(offline, story.run_ids)
    assert after.effects == recorded.effects, "the replay ran a tool body"
    return Result(final, after.runs, after.effects)


def fork_point(summary: dict[str, Any]) -> tuple[int, str, int, dict[str, Any]]:
    """Where a fork re-routes: the latest step before the last with one node's writes (the
    last step when no earlier one has), as ``(step, node, index, writes)``."""
    single = [
        (step, writes[0])
        for step, writes in enumerate(summary["writes"], start=1)
        if len(writes) == 1 and not writes[0][0].startswith("__")
    ]
    assert single, "no step was written by one node"
    earlier = [s for s in single if s[0] < len(summary["writes"])]
    step, (node, index, writes) = (earlier or single)[-1]
    return step, node, index, writes


def _fork(story: Story) -> Result:
    recorded = story.play(Driver("invoke"))
    app = story.app()
    parent = story.run_ids[-1]
    step, node, _, writes = fork_point(recorded.runs[parent])
    fork_id = app.fork(parent, step - 1, update=writes, as_node=node, new_run_id="fork-1")
    state = app.resume(fork_id)
    assert interrupt_of(state) is None, f"the fork at step {step} stopped at an interrupt"
    summary = run_summary(app.store, fork_id, after=step)  # type: ignore[arg-type]
    # The fork runs the steps after ``step`` again, live: their tool bodies run again too.
    # Its state as stored, like every other cell's (resume returns a graph's output model).
    final = _dump(app.get_state(fork_id))
    return Result(final, {**recorded.runs, "fork-1": summary}, recorded.effects)


@contextmanager
def story_for(feature: Feature, backend: Backend) -> Iterator[Story]:
    """A story with the feature's services open over the cell's workspace."""
    workspace = backend.tmp / "ws"
    workspace.mkdir(exist_ok=True)
    feature.prepare(workspace)
    with feature.serve(workspace) as services:
        yield Story(feature, backend, services)
