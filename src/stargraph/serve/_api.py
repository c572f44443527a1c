"""The HTTP API of ``stargraph serve``, on Starlette: what ``langgraph-sdk``'s client needs.

Assistants (one per served graph, its id the graph's name), threads (a thread's state is
its last turn's), runs (created in the background, streamed as SSE, waited for, joined,
listed, cancelled), the Agent Protocol's store, and the OpenAPI document at
``/openapi.json``. Every body is parsed once into a frozen model (``_models``); a refusal is
an :class:`~stargraph.errors.ApiError` answered as ``{"detail": message}`` with its status.
Database calls run in Starlette's thread pool, the runs in the workers (``_exec``).
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, TypeVar
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stargraph._typed import TypedModel, validate_raw
from stargraph.checkpoint import RunRecord
from stargraph.checkpoint._records import ENDED_STATUSES
from stargraph.errors import ApiError, InvalidInputError, RunNotFoundError, StargraphError
from stargraph.ir import StaticEdgeIR
from stargraph.runtime import Interrupt
from stargraph.runtime._run import refuse_unknown_keys
from stargraph.serve import _models as m
from stargraph.serve._exec import Executor, Hub, ServedGraph, interrupts_json, jsonable
from stargraph.serve._tables import ACTIVE, RunRow, Tables, ThreadRow

__all__ = ["ServeSettings", "build_app"]

ModelT = TypeVar("ModelT", bound=BaseModel)

_OPEN_PATHS: Final = frozenset({"/ok"})
_EVERY: Final = ("values", "updates", "messages", "custom")


class ServeSettings(TypedModel):
    """How ``stargraph serve`` listens and whom it lets in.

    ``token``: every request must carry ``Authorization: Bearer <token>`` (or
    ``x-api-key: <token>``, which ``langgraph-sdk`` sends for ``api_key=``); required when
    ``host`` is not a loopback address. ``cors_origins``: origins a browser may call from
    (none by default). ``max_body``: the largest request body accepted, in bytes."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    typed_error: ClassVar[type[StargraphError]] = InvalidInputError

    host: str = "127.0.0.1"
    token: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body: int = 1 << 20


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


class _Guard:
    """ASGI middleware: the bearer token and the body size limit, before any route runs."""

    def __init__(self, app: ASGIApp, settings: ServeSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        token = self.settings.token
        if token is not None and scope["path"] not in _OPEN_PATHS:
            given = headers.get("x-api-key") or ""
            auth = headers.get("authorization", "")
            if auth.lower().startswith("bearer "):
                given = auth[7:].strip()
            if not hmac.compare_digest(given.encode(), token.encode()):
                await _error(401, "missing or wrong token: send Authorization: Bearer <token>")(
                    scope, receive, send
                )
                return
        limit = self.settings.max_body
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await _error(413, f"the request body is {length} bytes; the limit is {limit}")(
                scope, receive, send
            )
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise ApiError(
                        f"the request body exceeds the limit of {limit} bytes", status=413
                    )
            return message

        await self.app(scope, counted, send)


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


class Api:
    """The routes, over the served graphs, the serve tables and the workers."""

    def __init__(self, graphs: Mapping[str, ServedGraph], tables: Tables, executor: Executor):
        self.graphs = graphs
        self.tables = tables
        self.executor = executor
        self.hub: Hub = executor.hub
        self.started = time.time()

    # ----------------------------------------------------------------- helpers

    async def _body(self, request: Request, model: type[ModelT]) -> ModelT:
        raw = await request.body()
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise ApiError(f"the body is not JSON: {exc}", status=422) from exc
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<body>'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ApiError(
                f"the body does not fit {model.__name__}: {problems}", status=422
            ) from exc

    def _graph(self, assistant_id: str) -> ServedGraph:
        served = self.graphs.get(assistant_id)
        if served is None:
            known = ", ".join(sorted(self.graphs)) or "none"
            raise ApiError(
                f"no assistant {assistant_id!r}; this server serves: {known}", status=404
            )
        return served

    def _thread_row(self, thread_id: str) -> ThreadRow:
        row = self.tables.get_thread(thread_id)
        if row is None:
            raise ApiError(
                f"no thread {thread_id!r}; create it with POST /threads (or pass "
                "if_not_exists='create' when creating the run)",
                status=404,
            )
        return row

    def _run_row(self, thread_id: str, run_id: str) -> RunRow:
        row = self.tables.get_run(run_id)
        if row is None or row.thread_id != thread_id:
            raise ApiError(f"no run {run_id!r} on thread {thread_id!r}", status=404)
        return row

    def _assistant(self, served: ServedGraph) -> dict[str, Any]:
        ts = _iso(self.started)
        return {
            "assistant_id": served.assistant_id,
            "graph_id": served.assistant_id,
            "name": served.assistant_id,
            "description": None,
            "config": {},
            "context": {},
            "metadata": {"graph_hash": served.app.graph_hash},
            "version": 1,
            "created_at": ts,
            "updated_at": ts,
        }

    def _turns(self, thread_id: str) -> list[RunRecord]:
        """The stargraph runs the thread's API runs started, oldest first (a resume
        continues one of them; a run cancelled before it started has none)."""
        store = next(iter(self.graphs.values())).app.store
        assert store is not None
        found = []
        for target in self.tables.targets(thread_id):
            try:
                found.append(store.get_run(target))
            except RunNotFoundError:
                continue
        return found

    def _state_app(self, thread: ThreadRow) -> ServedGraph | None:
        graph_id = thread.metadata.get("graph_id")
        return self.graphs.get(graph_id) if isinstance(graph_id, str) else None

    def _state(
        self, thread: ThreadRow, record: RunRecord | None, step: int | None
    ) -> dict[str, Any]:
        """A thread's state (LangGraph's ``ThreadState``) after ``step`` of turn ``record``."""
        served = self._state_app(thread)
        if record is None or served is None:
            return {
                "values": {},
                "next": [],
                "tasks": [],
                "checkpoint": {
                    "thread_id": thread.thread_id,
                    "checkpoint_ns": "",
                    "checkpoint_id": None,
                },
                "metadata": {},
                "created_at": None,
                "parent_checkpoint": None,
                "interrupts": [],
            }
        at = record.last_step if step is None else step
        values = jsonable(served.app.get_state(record.run_id, at))
        store = served.app.store
        assert store is not None
        steps = store.get_steps(record.run_id, start=at, end=at)
        nxt = [t.node for t in steps[-1].next] if steps else []
        interrupt = (
            Interrupt.read(record.interrupt, run_id=record.run_id)
            if at == record.last_step
            else None
        )
        pending = interrupts_json(interrupt)
        return {
            "values": values,
            "next": nxt,
            "tasks": [
                {
                    "id": f"{record.run_id}:{at}:{i}",
                    "name": node,
                    "interrupts": pending,
                    "state": None,
                }
                for i, node in enumerate(nxt)
            ],
            "checkpoint": {
                "thread_id": thread.thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": f"{record.run_id}:{at}",
            },
            "metadata": {"run_id": record.run_id, "step": at, "turn": record.turn},
            "created_at": record.updated_at if step is None else None,
            "parent_checkpoint": None,
            "interrupts": pending,
        }

    def _thread(self, row: ThreadRow) -> dict[str, Any]:
        turns = self._turns(row.thread_id)
        last = turns[-1] if turns else None
        if self.tables.active_run(row.thread_id) is not None:
            status = "busy"
        elif last is None or last.status in ENDED_STATUSES:
            status = "idle"
        elif last.status == "interrupted":
            status = "interrupted"
        else:
            status = "error"
        state = self._state(row, last, None) if last is not None else None
        interrupts = state["interrupts"] if state else []
        return {
            "thread_id": row.thread_id,
            "created_at": _iso(row.created_at),
            "updated_at": _iso(row.updated_at),
            "metadata": row.metadata,
            "status": status,
            "values": state["values"] if state else None,
            "interrupts": {last.run_id: interrupts} if last is not None and interrupts else {},
        }

    def _run(self, row: RunRow) -> dict[str, Any]:
        return {
            "run_id": row.run_id,
            "thread_id": row.thread_id,
            "assistant_id": row.assistant_id,
            "created_at": _iso(row.created_at),
            "updated_at": _iso(row.updated_at),
            "status": row.status,
            "metadata": row.metadata,
            "multitask_strategy": "reject",
            "kwargs": row.request,
            "error": row.error,
            "stargraph": {"run_id": row.target, "kind": row.kind, "attempts": row.attempts},
        }

    # ----------------------------------------------------------------- creating runs

    def _create_run(self, thread_id: str | None, body: m.RunBody) -> RunRow:
        problems = m.refuse_unsupported(body)
        try:
            m.stream_events(body.stream_mode)
        except KeyError as exc:
            problems.append(
                f"stream_mode {exc.args[0]!r} is not streamed here; use "
                f"{', '.join(sorted(m.STREAM_MODES))}"
            )
        if problems:
            raise ApiError("the run is refused: " + "; ".join(problems), status=422)
        served = self._graph(body.assistant_id)
        stateless = thread_id is None
        if thread_id is None:  # a thread of its own, whose run is no turn of a thread
            thread_id = str(uuid.uuid4())
            self.tables.create_thread(thread_id, {"graph_id": served.assistant_id})
        thread = self.tables.get_thread(thread_id)
        if thread is None:
            if body.if_not_exists != "create":
                self._thread_row(thread_id)
            self.tables.create_thread(thread_id, {"graph_id": served.assistant_id})
            thread = self._thread_row(thread_id)
        if thread.metadata.get("graph_id") not in (None, served.assistant_id):
            raise ApiError(
                f"thread {thread_id!r} holds runs of {thread.metadata['graph_id']!r}, not "
                f"{served.assistant_id!r}; start a new thread for this assistant",
                status=409,
            )
        active = self.tables.active_run(thread_id)
        if active is not None:
            raise ApiError(
                f"thread {thread_id!r} is busy with run {active.run_id!r} ({active.status}); "
                "wait for it (join) or cancel it, then create the next run",
                status=409,
            )
        turns = self._turns(thread_id)
        last = turns[-1] if turns else None
        run_id = body.run_id or str(uuid.uuid4())
        if body.run_id is not None and self.tables.get_run(body.run_id) is not None:
            raise ApiError(f"run id {body.run_id!r} is taken; pass another or none", status=409)
        request = body.model_dump(
            mode="json", include={"input", "command", "stream_mode", "config"}
        )
        if body.command is not None:
            if last is None or last.status != "interrupted":
                has = "has no run yet" if last is None else f"last run is {last.status}"
                raise ApiError(
                    f"command={{'resume': ...}} answers an interrupt, but thread {thread_id!r} "
                    f"{has}; send input to start a new run",
                    status=409,
                )
            kind, target = "resume", last.run_id
            request["interrupt"] = last.interrupt
        else:
            if last is not None and last.status not in ENDED_STATUSES:
                hint = (
                    "answer it with command={'resume': ...}"
                    if last.status == "interrupted"
                    else "resume or fork it with the stargraph CLI, or start a new thread"
                )
                raise ApiError(
                    f"thread {thread_id!r} cannot take a new run: its last run "
                    f"{last.run_id!r} is {last.status}; {hint}",
                    status=409,
                )
            self._check_input(served, body.input or {})
            kind, target = "start", run_id
            request["stateless"] = stateless
        now = time.time()
        row = RunRow(
            run_id=run_id,
            thread_id=thread_id,
            assistant_id=served.assistant_id,
            kind=kind,
            target=target,
            request=request,
            status="pending",
            owner=None,
            attempts=0,
            cancel=False,
            error=None,
            metadata=body.metadata,
            created_at=now,
            updated_at=now,
        )
        if "graph_id" not in thread.metadata:  # bound to the assistant of its first run
            self.tables.update_thread(
                thread_id, {**thread.metadata, "graph_id": served.assistant_id}
            )
        meta = json.dumps({"run_id": run_id, "thread_id": thread_id, "attempt": 1})
        self.tables.add_run(row, ("metadata", meta))
        self.executor.wake()
        return row

    @staticmethod
    def _check_input(served: ServedGraph, data: dict[str, Any]) -> None:
        try:
            refuse_unknown_keys(served.app.state_model, data, None)
            validate_raw(served.app.state_model, data)
        except InvalidInputError as exc:
            raise ApiError(f"input is refused: {exc}", status=422) from exc
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ApiError(
                f"input does not fit {served.app.state_model.__name__}: {problems}", status=422
            ) from exc

    async def _new_run(self, request: Request, thread_id: str | None) -> RunRow:
        body = await self._body(request, m.RunBody)
        return await run_in_threadpool(self._create_run, thread_id, body)

    # ----------------------------------------------------------------- streaming

    async def _events(
        self, run_id: str, after: int, wanted: frozenset[str]
    ) -> AsyncIterator[bytes]:
        """The run's stored events after ``after``, then each one as it is stored, until the
        run ended and all were sent."""
        last = after
        keep = wanted | {"metadata", "error"}
        async with self.hub.listen(run_id) as listener:
            while True:
                listener.clear()
                rows = await run_in_threadpool(self.tables.events_after, run_id, last)
                for e in rows:
                    last = e.seq
                    if e.event in keep:
                        yield f"event: {e.event}\ndata: {e.data}\nid: {e.seq}\n\n".encode()
                if rows:
                    continue
                run = await run_in_threadpool(self.tables.get_run, run_id)
                if run is None or run.status not in ACTIVE:
                    rows = await run_in_threadpool(self.tables.events_after, run_id, last)
                    if not rows:
                        return
                    continue
                await listener.wait()

    def _sse(self, row: RunRow, after: int, modes: str | list[str]) -> StreamingResponse:
        try:
            wanted = m.stream_events(modes)
        except KeyError as exc:
            raise ApiError(f"stream_mode {exc.args[0]!r} is not streamed here", status=422) from exc
        base = f"/threads/{row.thread_id}/runs/{row.run_id}"
        # A client that reconnects to Location gets the modes it asked for, no others.
        asked = urlencode([("stream_mode", mode) for mode in sorted(wanted)])
        return StreamingResponse(
            self._events(row.run_id, after, wanted),
            media_type="text/event-stream",
            headers={
                "Location": f"{base}/stream?{asked}",
                "Content-Location": base,
                "Cache-Control": "no-store",
            },
        )

    async def _ended(self, run_id: str) -> RunRow:
        async with self.hub.listen(run_id) as listener:
            while True:
                listener.clear()
                row = await run_in_threadpool(self.tables.get_run, run_id)
                assert row is not None
                if row.status not in ACTIVE:
                    return row
                await listener.wait()

    def _values(self, row: RunRow) -> Any:
        """What ``wait``/``join`` answer: the run's values, with the interrupt if any."""
        thread = self._thread_row(row.thread_id)
        store = self.graphs[row.assistant_id].app.store
        assert store is not None
        try:
            record: RunRecord | None = store.get_run(row.target)
        except RunNotFoundError:
            record = None
        state = self._state(thread, record, None)
        values = dict(state["values"])
        if state["interrupts"]:
            values["__interrupt__"] = state["interrupts"]
        if row.status == "error":
            return {"__error__": {"error": "RunError", "message": row.error}}
        return values

    # ----------------------------------------------------------------- routes

    async def ok(self, request: Request) -> Response:
        """Liveness."""
        return JSONResponse({"ok": True})

    async def info(self, request: Request) -> Response:
        """The server and what it serves."""
        from stargraph import __version__

        return JSONResponse(
            {
                "version": __version__,
                "server": "stargraph",
                "flags": {"assistants": True, "crons": False},
            }
        )

    async def search_assistants(self, request: Request) -> Response:
        """The assistants: one per served graph."""
        body = await self._body(request, m.SearchBody)
        found = [
            self._assistant(s)
            for s in self.graphs.values()
            if body.graph_id in (None, s.assistant_id)
        ]
        return JSONResponse(found[body.offset : body.offset + body.limit])

    async def count_assistants(self, request: Request) -> Response:
        """How many assistants."""
        return JSONResponse(len(self.graphs))

    async def get_assistant(self, request: Request) -> Response:
        """One assistant."""
        return JSONResponse(self._assistant(self._graph(request.path_params["assistant_id"])))

    async def assistant_graph(self, request: Request) -> Response:
        """The assistant's graph: its nodes and edges."""
        ir = self._graph(request.path_params["assistant_id"]).app.ir
        nodes = [{"id": "__start__"}, *({"id": n.id} for n in ir.nodes), {"id": "__end__"}]
        edges: list[dict[str, Any]] = []
        for e in ir.edges:
            if isinstance(e, StaticEdgeIR):
                edges.extend({"source": src, "target": e.target} for src in e.sources)
            else:
                edges.extend(
                    {"source": e.source, "target": t, "conditional": True}
                    for t in sorted(set(e.mapping.values()))
                )
        return JSONResponse({"nodes": nodes, "edges": edges})

    async def assistant_schemas(self, request: Request) -> Response:
        """The JSON Schema of the assistant's state (its input, output and state)."""
        served = self._graph(request.path_params["assistant_id"])
        schema = served.app.state_model.model_json_schema()
        return JSONResponse(
            {
                "graph_id": served.assistant_id,
                "input_schema": schema,
                "output_schema": schema,
                "state_schema": schema,
                "config_schema": None,
                "context_schema": None,
            }
        )

    async def create_thread(self, request: Request) -> Response:
        """Create a thread."""
        body = await self._body(request, m.ThreadBody)
        thread_id = body.thread_id or str(uuid.uuid4())
        made = await run_in_threadpool(self.tables.create_thread, thread_id, body.metadata)
        if made is None and body.if_exists == "raise":
            raise ApiError(f"thread {thread_id!r} exists; pass if_exists='do_nothing'", status=409)
        row = await run_in_threadpool(self._thread_row, thread_id)
        return JSONResponse(await run_in_threadpool(self._thread, row))

    async def search_threads(self, request: Request) -> Response:
        """Threads, newest first, filtered by metadata and status."""
        body = await self._body(request, m.SearchBody)

        def found() -> list[dict[str, Any]]:
            rows = self.tables.threads(limit=10_000, offset=0)
            out = []
            for row in rows:
                if body.metadata and any(
                    row.metadata.get(k) != v for k, v in body.metadata.items()
                ):
                    continue
                thread = self._thread(row)
                if body.status is None or thread["status"] == body.status:
                    out.append(thread)
            return out[body.offset : body.offset + body.limit]

        return JSONResponse(await run_in_threadpool(found))

    async def get_thread(self, request: Request) -> Response:
        """One thread."""
        row = await run_in_threadpool(self._thread_row, request.path_params["thread_id"])
        return JSONResponse(await run_in_threadpool(self._thread, row))

    async def patch_thread(self, request: Request) -> Response:
        """Merge metadata into a thread's."""
        body = await self._body(request, m.ThreadPatchBody)
        tid = request.path_params["thread_id"]
        row = await run_in_threadpool(self._thread_row, tid)
        await run_in_threadpool(self.tables.update_thread, tid, {**row.metadata, **body.metadata})
        row = await run_in_threadpool(self._thread_row, tid)
        return JSONResponse(await run_in_threadpool(self._thread, row))

    async def delete_thread(self, request: Request) -> Response:
        """Forget a thread (its stargraph runs stay in the store, for replay)."""
        tid = request.path_params["thread_id"]
        await run_in_threadpool(self._thread_row, tid)
        await run_in_threadpool(self.tables.delete_thread, tid)
        return Response(status_code=204)

    async def thread_state(self, request: Request) -> Response:
        """The thread's current state: its last turn's values, next nodes and interrupts."""
        tid = request.path_params["thread_id"]

        def state() -> dict[str, Any]:
            thread = self._thread_row(tid)
            turns = self._turns(tid)
            return self._state(thread, turns[-1] if turns else None, None)

        return JSONResponse(await run_in_threadpool(state))

    async def thread_history(self, request: Request) -> Response:
        """The thread's past states, newest first: every step of every turn."""
        tid = request.path_params["thread_id"]
        body = await self._body(request, m.HistoryBody)

        def history() -> list[dict[str, Any]]:
            thread = self._thread_row(tid)
            out: list[dict[str, Any]] = []
            for record in reversed(self._turns(tid)):
                for step in range(record.last_step, -1, -1):
                    out.append(self._state(thread, record, step))
                    if len(out) >= body.limit:
                        return out
            return out

        return JSONResponse(await run_in_threadpool(history))

    async def create_run(self, request: Request) -> Response:
        """Create a run in the background; answers with the run."""
        row = await self._new_run(request, request.path_params.get("thread_id"))
        base = f"/threads/{row.thread_id}/runs/{row.run_id}"
        return JSONResponse(self._run(row), headers={"Content-Location": base})

    async def stream_run(self, request: Request) -> Response:
        """Create a run and stream it (SSE); a dropped client reconnects to the run's
        ``/stream`` with ``Last-Event-ID``."""
        body = await self._body(request, m.RunBody)
        row = await run_in_threadpool(self._create_run, request.path_params.get("thread_id"), body)
        return self._sse(row, -1, body.stream_mode)

    async def wait_run(self, request: Request) -> Response:
        """Create a run and answer when it ended, with the thread's values."""
        row = await self._new_run(request, request.path_params.get("thread_id"))
        ended = await self._ended(row.run_id)
        return JSONResponse(await run_in_threadpool(self._values, ended))

    async def list_runs(self, request: Request) -> Response:
        """The thread's runs, newest first (``limit``, ``offset``, ``status``)."""
        tid = request.path_params["thread_id"]
        q = request.query_params
        try:
            limit, offset = int(q.get("limit", "10")), int(q.get("offset", "0"))
        except ValueError as exc:
            raise ApiError("limit and offset are whole numbers", status=422) from exc
        await run_in_threadpool(self._thread_row, tid)
        rows = await run_in_threadpool(
            lambda: self.tables.runs(tid, limit=limit, offset=offset, status=q.get("status"))
        )
        return JSONResponse([self._run(r) for r in rows])

    async def get_run(self, request: Request) -> Response:
        """One run."""
        p = request.path_params
        row = await run_in_threadpool(self._run_row, p["thread_id"], p["run_id"])
        return JSONResponse(self._run(row))

    async def join_run(self, request: Request) -> Response:
        """Answer when the run ended, with the thread's values."""
        p = request.path_params
        row = await run_in_threadpool(self._run_row, p["thread_id"], p["run_id"])
        ended = await self._ended(row.run_id)
        return JSONResponse(await run_in_threadpool(self._values, ended))

    async def join_stream(self, request: Request) -> Response:
        """Stream a run from its start, or after the event ``Last-Event-ID`` names."""
        p = request.path_params
        row = await run_in_threadpool(self._run_row, p["thread_id"], p["run_id"])
        last = request.headers.get("last-event-id", "").strip()
        if last and not last.lstrip("-").isdigit():
            raise ApiError(f"Last-Event-ID {last!r} is not an event id of this server", status=422)
        # langgraph-sdk sends an empty stream_mode for "every mode the run streams".
        modes = [x for x in request.query_params.getlist("stream_mode") if x] or list(_EVERY)
        return self._sse(row, int(last) if last else -1, modes)

    async def cancel_run(self, request: Request) -> Response:
        """Cancel a run: it stops at its next step boundary (``interrupted``); ``wait=1``
        answers once it stopped."""
        p = request.path_params
        row = await run_in_threadpool(self._run_row, p["thread_id"], p["run_id"])
        action = request.query_params.get("action", "interrupt")
        if action != "interrupt":
            raise ApiError(
                f"action={action!r} is not supported: a cancelled run keeps its steps "
                "(action='interrupt'); delete the thread to forget it",
                status=422,
            )
        await run_in_threadpool(self.tables.cancel, row.run_id)
        await run_in_threadpool(self.executor.cancel_here, row.run_id)
        self.hub.notify(row.run_id)
        if request.query_params.get("wait") in ("1", "true"):
            row = await self._ended(row.run_id)
            return JSONResponse(self._run(row))
        return Response(status_code=202)

    async def put_item(self, request: Request) -> Response:
        """Put an item in the store."""
        body = await self._body(request, m.ItemBody)
        await run_in_threadpool(self.tables.put_item, _ns(body.namespace), body.key, body.value)
        return Response(status_code=204)

    async def get_item(self, request: Request) -> Response:
        """An item of the store (``namespace`` dotted, ``key``)."""
        q = request.query_params
        namespace, key = q.get("namespace", ""), q.get("key")
        if not key:
            raise ApiError("pass key= (and namespace=, its labels joined by '.')", status=422)
        found = await run_in_threadpool(self.tables.get_item, namespace, key)
        if found is None:
            raise ApiError(f"no item {key!r} in namespace {namespace!r}", status=404)
        return JSONResponse(_item(namespace, key, *found))

    async def delete_item(self, request: Request) -> Response:
        """Delete an item of the store."""
        body = await self._body(request, m.ItemKeyBody)
        await run_in_threadpool(self.tables.delete_item, _ns(body.namespace), body.key)
        return Response(status_code=204)

    async def search_items(self, request: Request) -> Response:
        """Items under a namespace prefix whose values hold ``filter``."""
        body = await self._body(request, m.ItemSearchBody)
        prefix = body.namespace_prefix
        rows = await run_in_threadpool(self.tables.items)
        found = [
            _item(ns, key, value, c, u)
            for ns, key, value, c, u in rows
            if ns.split(".")[: len(prefix)] == prefix
            and all(value.get(k) == v for k, v in (body.filter or {}).items())
        ]
        return JSONResponse({"items": found[body.offset : body.offset + body.limit]})

    async def list_namespaces(self, request: Request) -> Response:
        """The store's namespaces."""
        body = await self._body(request, m.NamespacesBody)
        rows = await run_in_threadpool(self.tables.items)
        seen: list[list[str]] = []
        for ns, *_ in rows:
            labels = ns.split(".") if ns else []
            if body.prefix and labels[: len(body.prefix)] != body.prefix:
                continue
            if body.suffix and labels[-len(body.suffix) :] != body.suffix:
                continue
            cut = labels[: body.max_depth] if body.max_depth else labels
            if cut not in seen:
                seen.append(cut)
        return JSONResponse({"namespaces": seen[body.offset : body.offset + body.limit]})

    async def openapi(self, request: Request) -> Response:
        """This API's OpenAPI document."""
        from stargraph.serve._openapi import document

        return JSONResponse(document(ROUTES, self))


def _ns(namespace: list[str]) -> str:
    bad = [label for label in namespace if not label or "." in label]
    if bad:
        raise ApiError(
            f"namespace labels {bad} are empty or hold a '.'; use plain labels", status=422
        )
    return ".".join(namespace)


def _item(namespace: str, key: str, value: Any, created: float, updated: float) -> dict[str, Any]:
    return {
        "namespace": namespace.split(".") if namespace else [],
        "key": key,
        "value": value,
        "created_at": _iso(created),
        "updated_at": _iso(updated),
    }


ROUTES: Final[tuple[tuple[str, str, str, type[BaseModel] | None], ...]] = (
    ("GET", "/ok", "ok", None),
    ("GET", "/info", "info", None),
    ("GET", "/openapi.json", "openapi", None),
    ("POST", "/assistants/search", "search_assistants", m.SearchBody),
    ("POST", "/assistants/count", "count_assistants", None),
    ("GET", "/assistants/{assistant_id}", "get_assistant", None),
    ("GET", "/assistants/{assistant_id}/graph", "assistant_graph", None),
    ("GET", "/assistants/{assistant_id}/schemas", "assistant_schemas", None),
    ("POST", "/threads", "create_thread", m.ThreadBody),
    ("POST", "/threads/search", "search_threads", m.SearchBody),
    ("GET", "/threads/{thread_id}", "get_thread", None),
    ("PATCH", "/threads/{thread_id}", "patch_thread", m.ThreadPatchBody),
    ("DELETE", "/threads/{thread_id}", "delete_thread", None),
    ("GET", "/threads/{thread_id}/state", "thread_state", None),
    ("POST", "/threads/{thread_id}/history", "thread_history", m.HistoryBody),
    ("POST", "/threads/{thread_id}/runs", "create_run", m.RunBody),
    ("GET", "/threads/{thread_id}/runs", "list_runs", None),
    ("POST", "/threads/{thread_id}/runs/stream", "stream_run", m.RunBody),
    ("POST", "/threads/{thread_id}/runs/wait", "wait_run", m.RunBody),
    ("GET", "/threads/{thread_id}/runs/{run_id}", "get_run", None),
    ("GET", "/threads/{thread_id}/runs/{run_id}/join", "join_run", None),
    ("GET", "/threads/{thread_id}/runs/{run_id}/stream", "join_stream", None),
    ("POST", "/threads/{thread_id}/runs/{run_id}/cancel", "cancel_run", None),
    ("POST", "/runs", "create_run", m.RunBody),
    ("POST", "/runs/stream", "stream_run", m.RunBody),
    ("POST", "/runs/wait", "wait_run", m.RunBody),
    ("PUT", "/store/items", "put_item", m.ItemBody),
    ("GET", "/store/items", "get_item", None),
    ("DELETE", "/store/items", "delete_item", m.ItemKeyBody),
    ("POST", "/store/items/search", "search_items", m.ItemSearchBody),
    ("POST", "/store/namespaces", "list_namespaces", m.NamespacesBody),
)
"""Method, path, handler name, request body model: the routes and the OpenAPI document."""


def _handler(api: Api, name: str) -> Callable[[Request], Awaitable[Response]]:
    method: Callable[[Request], Awaitable[Response]] = getattr(api, name)

    async def handle(request: Request) -> Response:
        try:
            return await method(request)
        except ApiError as exc:
            return _error(exc.status, str(exc))
        except RunNotFoundError as exc:
            return _error(404, str(exc))
        except StargraphError as exc:
            return _error(500, f"{type(exc).__name__}: {exc}")

    handle.__doc__ = method.__doc__
    return handle


def build_app(
    graphs: Mapping[str, ServedGraph],
    tables: Tables,
    executor: Executor,
    settings: ServeSettings,
    *,
    on_close: Callable[[], None] | None = None,
) -> Starlette:
    """The Starlette app; starts the workers on startup, stops them on shutdown, then calls
    ``on_close``."""
    api = Api(graphs, tables, executor)
    routes = [
        Route(path, _handler(api, name), methods=[method]) for method, path, name, _ in ROUTES
    ]
    middleware = [Middleware(_Guard, settings=settings)]
    if settings.cors_origins:
        middleware.insert(
            0,
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["*"],
                allow_headers=["*"],
                expose_headers=["Location", "Content-Location"],
            ),
        )

    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        executor.start()
        try:
            yield
        finally:
            await run_in_threadpool(executor.stop)
            if on_close is not None:
                on_close()

    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.api = api
    return app
