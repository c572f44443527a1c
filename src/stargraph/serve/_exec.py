"""The server's workers: threads that claim API runs and run them, storing what they stream.

A worker claims a row of ``serve_runs`` (see ``_tables``) under a lease, runs it with the
served graph's ``stream`` (or ``resume_stream``) in every stream mode at once, and stores
each item as a numbered event before it is sent to anyone: a client streams from the table,
so what it reads is what was stored, and reconnecting loses nothing. A heartbeat thread
renews the leases and passes cancel requests made through any server to the run here.

A server killed mid-run leaves its rows ``running``; another server (or this one,
restarted) claims them once their lease lapses, or at once when the owner was a process of
this machine that is gone, and resumes the stargraph run from its last committed step; the
events continue from the last stored number.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pydantic_core
from pydantic import BaseModel

from stargraph.checkpoint import RunRecord
from stargraph.errors import RunCancelledError, RunNotFoundError, StargraphError
from stargraph.runtime import CompiledGraph, Interrupt
from stargraph.runtime._stream import INTERRUPT_KEY, CustomEvent, MessageChunk
from stargraph.serve._tables import RunRow, Tables

__all__ = ["Executor", "Hub", "ServedGraph", "interrupts_json", "jsonable", "owner_name"]

log = logging.getLogger("stargraph.serve")

MODES: Final = ("updates", "values", "messages", "custom")
"""Every run streams in all of these; a request picks the ones it is sent."""

_RESUMABLE: Final = frozenset({"pending", "running", "orphaned", "cancelled"})


@dataclass(frozen=True, slots=True)
class ServedGraph:
    """A graph the server serves, as one assistant (its id is the graph's name)."""

    assistant_id: str
    app: CompiledGraph[Any]


def owner_name() -> str:
    """``host:pid:random``: the owner this server writes on the rows it claims."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def owner_gone(owner: str | None) -> bool:
    """Whether ``owner`` was a process of this machine that no longer runs."""
    if owner is None:
        return False
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def jsonable(value: Any) -> Any:
    """``value`` as JSON data; interrupts in LangGraph's shape (``{"value", "id"}``)."""
    if isinstance(value, Mapping) and INTERRUPT_KEY in value:
        found = value[INTERRUPT_KEY]
        rest = {k: v for k, v in value.items() if k != INTERRUPT_KEY}
        out = jsonable(rest)
        out[INTERRUPT_KEY] = [
            item for i in found if isinstance(i, Interrupt) for item in interrupts_json(i)
        ]
        return out
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return pydantic_core.to_jsonable_python(value, fallback=str)


def interrupts_json(interrupt: Interrupt | None) -> list[dict[str, Any]]:
    """What a run waits on, as LangGraph's client reads it: ``[{"value", "id"}, ...]``."""
    if interrupt is None:
        return []
    return [
        {"value": jsonable(i.payload), "id": i.id or f"{i.kind}:{i.step}", "when": "during"}
        for i in interrupt.pending
    ]


def _event(mode: str, item: Any) -> tuple[str, Any]:
    """One streamed item as an SSE event name and its JSON data."""
    if mode == "messages" and isinstance(item, MessageChunk):
        chunk = {
            "type": "AIMessageChunk",
            "content": item.text,
            "id": f"{item.run_id}:{item.step}:{item.node}:{item.index}",
        }
        meta = {"langgraph_node": item.node, "langgraph_step": item.step, "run_id": item.run_id}
        return "messages", [chunk, meta]
    if mode == "custom" and isinstance(item, CustomEvent):
        return "custom", jsonable(item.payload)
    return mode, jsonable(item)


class Hub:
    """Wakes the requests waiting on a run when its worker stores events or ends it.

    Workers are threads, requests are tasks on the server's event loop: :meth:`notify` is
    safe from any thread. Runs of another server are not announced here; readers also look
    at the table every ``poll_s``."""

    def __init__(self, poll_s: float = 0.25) -> None:
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._listening: dict[str, set[Listener]] = {}

    def notify(self, run_id: str) -> None:
        """Wake whoever listens to ``run_id``."""
        with self._lock:
            listening = list(self._listening.get(run_id, ()))
        for listener in listening:
            listener.loop.call_soon_threadsafe(listener.event.set)

    @contextlib.asynccontextmanager
    async def listen(self, run_id: str) -> AsyncIterator[Listener]:
        """Listen to ``run_id`` while inside: clear, read the tables, then wait; a notice
        that comes while reading makes the wait return at once."""
        listener = Listener(asyncio.get_running_loop(), asyncio.Event(), self.poll_s)
        with self._lock:
            self._listening.setdefault(run_id, set()).add(listener)
        try:
            yield listener
        finally:
            with self._lock:
                left = self._listening.get(run_id)
                if left is not None:
                    left.discard(listener)
                    if not left:
                        del self._listening[run_id]


@dataclass(eq=False)
class Listener:
    """One request listening to a run (see :meth:`Hub.listen`)."""

    loop: asyncio.AbstractEventLoop
    event: asyncio.Event
    poll_s: float

    def clear(self) -> None:
        """Forget the notices so far (call before reading)."""
        self.event.clear()

    async def wait(self) -> None:
        """Return at the next notice, or after ``poll_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), self.poll_s)


class Executor:
    """``workers`` threads that run the API runs of ``tables`` with ``graphs``."""

    def __init__(
        self,
        tables: Tables,
        graphs: Mapping[str, ServedGraph],
        hub: Hub,
        *,
        workers: int = 2,
        lease_s: float = 10.0,
    ) -> None:
        self.tables = tables
        self.graphs = graphs
        self.hub = hub
        self.workers = workers
        self.lease_s = lease_s
        self.owner = owner_name()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._running: dict[str, tuple[CompiledGraph[Any], str]] = {}

    def start(self) -> None:
        """Start the worker threads and the heartbeat (none with ``workers=0``)."""
        if self.workers <= 0:
            return
        for i in range(self.workers):
            t = threading.Thread(target=self._loop, name=f"stargraph-serve-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        beat = threading.Thread(target=self._beat, name="stargraph-serve-beat", daemon=True)
        beat.start()
        self._threads.append(beat)

    def wake(self) -> None:
        """A run was queued: wake an idle worker."""
        self._wake.set()

    def cancel_here(self, run_id: str) -> bool:
        """Cancel ``run_id`` if a worker of this server runs it; whether one does."""
        with self._lock:
            running = self._running.get(run_id)
        if running is None:
            return False
        app, target = running
        app.cancel(target, reason="cancelled through the API")
        return True

    def stop(self) -> None:
        """Stop the workers (a run in progress stops at its next step boundary; another
        server, or this one restarted, resumes it) and wait for them."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            running = list(self._running.values())
        for app, target in running:
            app.cancel(target, reason="the server is stopping")
        for t in self._threads:
            t.join(timeout=30)

    # ----------------------------------------------------------------- threads

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                row = self.tables.claim(self.owner, self.lease_s, gone=owner_gone)
            except StargraphError as exc:
                log.warning("claiming a run failed: %s", exc)
                self._stop.wait(self.hub.poll_s)
                continue
            if row is None:
                self._wake.wait(self.hub.poll_s * 4)
                self._wake.clear()
                continue
            try:
                self._execute(row)
            except Exception:  # a worker thread must outlive any one run
                log.exception("run %s failed in its worker", row.run_id)
                self._finish(row, "error", "the server failed running it; see its log")

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                for run_id in self.tables.renew(self.owner, self.lease_s):
                    self.cancel_here(run_id)
            except StargraphError as exc:
                log.warning("renewing leases failed: %s", exc)

    # ----------------------------------------------------------------- one run

    def _finish(self, row: RunRow, status: str, error: str | None = None) -> None:
        if not self.tables.finish(row.run_id, self.owner, status, error):
            log.warning("run %s: lease lost before it could be marked %s", row.run_id, status)
        self.hub.notify(row.run_id)

    def _stream(self, row: RunRow, app: CompiledGraph[Any]) -> Iterator[Any] | None:
        """What to drive for ``row``: a new run, its resume, or nothing (it already ended)."""
        record = _existing(app, row.target)
        request = row.request
        if row.kind == "start":
            if record is None:
                return app.stream(
                    request.get("input") or {},
                    mode=list(MODES),
                    run_id=row.target,
                    thread_id=None if request.get("stateless") else row.thread_id,
                )
        elif record is not None and record.status == "interrupted":
            asked = request.get("interrupt")
            if asked is None or asked == record.interrupt:  # not answered yet
                return app.resume_stream(
                    row.target,
                    response=request["command"].get("resume"),
                    update=request["command"].get("update"),
                    mode=list(MODES),
                )
            return None
        if record is not None and record.status in _RESUMABLE:
            # Its server died part-way: continue from the last committed step.
            return app.resume_stream(row.target, mode=list(MODES), wait=self.lease_s * 3)
        return None

    def _execute(self, row: RunRow) -> None:
        served = self.graphs.get(row.assistant_id)
        if served is None:
            self._finish(row, "error", f"this server does not serve {row.assistant_id!r}")
            return
        app = served.app
        seq = self.tables.next_seq(row.run_id)
        with self._lock:
            self._running[row.run_id] = (app, row.target)
        try:
            stream = self._stream(row, app)
            if stream is not None:
                for mode, item in stream:
                    event, data = _event(mode, item)
                    self.tables.append_events(row.run_id, seq, [(event, _dumps(data))])
                    seq += 1
                    self.hub.notify(row.run_id)
                    if event == "messages":
                        # Steps announce themselves as they commit; tokens are announced
                        # here, so a console on the run shows them as they come.
                        self.tables.announce(row.target)
        except RunCancelledError as exc:
            if exc.run_id == row.target and self._stop.is_set() and not row.cancel:
                return  # the server stops: the lease lapses and another server resumes it
            self._finish(row, "interrupted", f"cancelled: {exc.reason}")
            return
        except StargraphError as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.tables.append_events(
                row.run_id,
                seq,
                [("error", _dumps({"error": type(exc).__name__, "message": str(exc)}))],
            )
            self._finish(row, "error", error)
            return
        finally:
            with self._lock:
                self._running.pop(row.run_id, None)
        self._finish(row, *api_status(_existing(app, row.target)))


def api_status(record: RunRecord | None) -> tuple[str, str | None]:
    """The API status (and error) of an ended stargraph run."""
    if record is None:
        return "error", "the run was never started"
    if record.status in ("done", "halted"):
        return "success", None
    if record.status in ("interrupted", "cancelled"):
        return "interrupted", None
    if record.status == "failed":
        return "error", record.error
    return "running", None


def _existing(app: CompiledGraph[Any], run_id: str) -> RunRecord | None:
    try:
        return app.get_run(run_id)
    except RunNotFoundError:
        return None


def _dumps(data: Any) -> str:
    return pydantic_core.to_json(data, fallback=str).decode()
