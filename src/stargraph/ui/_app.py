"""The console's ASGI app (Starlette): routes, the security gate, live events, answers."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from http.cookies import SimpleCookie
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlencode

from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stargraph.checkpoint import CheckpointStore, RunRecord
from stargraph.checkpoint._compact import expand_stored
from stargraph.errors import RunNotFoundError, StargraphError
from stargraph.ir import GraphIR
from stargraph.runtime import CompiledGraph
from stargraph.ui import _pages as pages
from stargraph.ui._digest import DigestCache
from stargraph.ui._graph import graph_svg
from stargraph.ui._mask import Masker
from stargraph.ui._static import CSS, ICON, JS

__all__ = ["RunGraph", "UiSettings", "create_app", "is_loopback"]

_CSRF_COOKIE: Final = "sg_csrf"
_TOKEN_COOKIE: Final = "sg_token"
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_SECURITY_HEADERS: Final = (
    (b"content-security-policy", _CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or name) only accepts connections from this machine."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class UiSettings(BaseModel):
    """How the console is bound and what it allows.

    ``host`` is the address the server binds (it decides whether a token is required:
    any non-loopback address needs one). ``poll_s`` is how often live views look for new
    steps in the store.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    token: str | None = None
    read_only: bool = False
    poll_s: float = 0.25
    stream_s: float = 300.0
    """How long one event stream lasts before the browser reconnects (it does so itself)."""


@dataclass(frozen=True, slots=True)
class RunGraph:
    """The graph of a run: its IR for pictures and state, and a compiled graph bound to the
    console's store when the console may resume the run (``None``: view only)."""

    ir: GraphIR
    app: CompiledGraph[Any] | None = None


GraphResolver = Callable[[str], RunGraph | None]
"""Graph hash -> the graph that made runs with that hash, or ``None`` when unknown."""


def _resolver(graphs: GraphResolver | Iterable[CompiledGraph[Any]]) -> GraphResolver:
    if callable(graphs):
        return graphs
    known: dict[str, RunGraph] = {str(g.ir.graph_hash): RunGraph(g.ir, g) for g in graphs}

    def lookup(graph_hash: str) -> RunGraph | None:
        return known.get(graph_hash)

    return lookup


class _Gate:
    """Checks every HTTP request before any route sees it (see :func:`create_app`)."""

    def __init__(self, app: ASGIApp, settings: UiSettings) -> None:
        self.app = app
        self.settings = settings
        self.loopback = is_loopback(settings.host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, text = refusal
            await PlainTextResponse(text, status_code=status)(scope, receive, send)
            return
        token = self.settings.token
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if token is not None and "token" in query and scope["method"] == "GET":
            # A link with ?token=...: keep it in a cookie and drop it from the address bar.
            rest = {k: v for k, v in query.items() if k != "token"}
            url = scope["path"] + (f"?{urlencode(rest, doseq=True)}" if rest else "")
            response = RedirectResponse(url, status_code=303)
            response.set_cookie(_TOKEN_COOKIE, token, httponly=True, samesite="strict")
            await response(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope, headers: Mapping[str, str]) -> tuple[int, str] | None:
        token = self.settings.token
        if token is None and not self.loopback:
            return 403, (
                f"refused: this console is bound to {self.settings.host}, which other machines "
                "can reach, without a token; restart it with --token SECRET (or bind "
                "127.0.0.1)"
            )
        host_header = headers.get("host", "")
        if token is None:
            # Loopback without a token: only names of this machine, so a web page cannot
            # reach the console through a DNS name rebound to 127.0.0.1.
            name = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
            if not is_loopback(name):
                return 403, f"refused: Host {host_header!r} is not this machine"
        else:
            given = _given_token(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), token.encode()):
                return 401, (
                    "refused: this console needs its token; open it as "
                    "http://HOST:PORT/?token=TOKEN or send 'Authorization: Bearer TOKEN'"
                )
        if scope["method"] not in ("GET", "HEAD"):
            if self.settings.read_only:
                return 403, "refused: this console was started with --read-only"
            origin = headers.get("origin") or _origin_of(headers.get("referer", ""))
            scheme = scope.get("scheme", "http")
            if origin is None or origin != f"{scheme}://{host_header}":
                return 403, (
                    f"refused: cross-site request (Origin {origin!r}); actions must come from "
                    "the console's own pages"
                )
        return None


def _given_token(scope: Scope, headers: Mapping[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    if "token" in query:
        return str(query["token"][-1])
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(headers.get("cookie", ""))
    except Exception:  # a malformed Cookie header is the same as none
        return None
    morsel = cookie.get(_TOKEN_COOKIE)
    return None if morsel is None else str(morsel.value)


def _origin_of(referer: str) -> str | None:
    if not referer:
        return None
    scheme, sep, rest = referer.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}" if sep else None


class _Console:
    """The state behind the routes: the store, graphs, digests and answer threads."""

    def __init__(
        self,
        store: CheckpointStore,
        resolver: GraphResolver,
        settings: UiSettings,
        masker: Masker,
    ) -> None:
        self.store = store
        self.settings = settings
        self.masker = masker
        self.digests = DigestCache(store)
        self._resolver = resolver
        self._graphs: dict[str, RunGraph | None] = {}
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self.workers: list[threading.Thread] = []
        self.failures: dict[str, str] = {}

    def graph(self, graph_hash: str) -> RunGraph | None:
        with self._lock:
            if graph_hash not in self._graphs:
                try:
                    self._graphs[graph_hash] = self._resolver(graph_hash)
                except StargraphError:
                    self._graphs[graph_hash] = None
            return self._graphs[graph_hash]

    def resume(self, run_id: str, app: CompiledGraph[Any], response: Any) -> None:
        def work() -> None:
            try:
                app.resume(run_id, response=response)
            except Exception as exc:  # shown on the run page; the store has the status
                self.failures[run_id] = f"{type(exc).__name__}: {exc}"

        thread = threading.Thread(target=work, name=f"stargraph-ui-resume-{run_id}")
        self.workers = [t for t in self.workers if t.is_alive()]
        self.workers.append(thread)
        thread.start()

    def close(self, timeout_s: float = 30.0) -> None:
        self.closing.set()
        deadline = time.monotonic() + timeout_s
        for thread in self.workers:
            thread.join(max(deadline - time.monotonic(), 0.0))


def _csrf(request: Request) -> str:
    return request.cookies.get(_CSRF_COOKIE) or secrets.token_urlsafe(24)


def _html(request: Request, text: str, csrf: str | None = None) -> HTMLResponse:
    response = HTMLResponse(text)
    if csrf is not None and request.cookies.get(_CSRF_COOKIE) != csrf:
        response.set_cookie(_CSRF_COOKIE, csrf, httponly=True, samesite="strict")
    return response


_MAX_FORM_BYTES: Final = 1 << 20


async def _form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (the only kind the pages send), parsed
    without ``python-multipart``; other bodies and oversized ones read as empty."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            return {}
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def _since_ok(run: RunRecord, since: str) -> bool:
    if not since:
        return True
    try:
        floor = datetime.fromisoformat(since)
        created = datetime.fromisoformat(run.created_at)
    except ValueError:
        return True
    if floor.tzinfo is None and created.tzinfo is not None:
        floor = floor.replace(tzinfo=created.tzinfo)
    try:
        return created >= floor
    except TypeError:
        return True


def create_app(
    store: CheckpointStore,
    *,
    graphs: GraphResolver | Iterable[CompiledGraph[Any]] = (),
    settings: UiSettings | None = None,
    secrets_to_mask: Mapping[str, str] | None = None,
) -> Starlette:
    """The run console over ``store`` as an ASGI app.

    ``graphs`` are the graphs the runs were made by (compiled with ``store``, so answering
    an interrupt can resume the run), or a function from a graph hash to a
    :class:`RunGraph`. Every request passes a gate first: a console bound to a non-loopback
    ``settings.host`` without a token refuses everything; with ``settings.token`` each
    request must carry it (``Authorization: Bearer``, ``?token=`` once, then a cookie),
    compared in constant time; POSTs must come from the console's own origin and carry the
    page's CSRF token; ``settings.read_only`` refuses them all and hides the forms.
    """
    settings = settings or UiSettings()
    console = _Console(store, _resolver(graphs), settings, Masker(secrets_to_mask))

    def list_filtered(request: Request) -> tuple[list[Any], list[str], str, str, str]:
        status = request.query_params.get("status", "")
        graph = request.query_params.get("graph", "")
        since = request.query_params.get("since", "")
        runs = store.list_runs(limit=500)
        names = sorted({r.graph_name for r in runs})
        chosen = [
            r
            for r in runs
            if (not status or r.status == status)
            and (not graph or r.graph_name == graph)
            and _since_ok(r, since)
        ][:200]
        rows = [(r, console.digests.get(r.run_id, r.last_step)) for r in chosen]
        return rows, names, status, graph, since

    async def runs_page(request: Request) -> Response:
        rows, names, status, graph, since = await run_in_threadpool(list_filtered, request)
        text = pages.runs_page(rows, names, status=status, graph=graph, since=since)
        return _html(request, text)

    async def runs_fragment(request: Request) -> Response:
        rows, *_ = await run_in_threadpool(list_filtered, request)
        return HTMLResponse(pages.run_rows(rows))

    def render_run(run_id: str, page: int | None, csrf: str) -> str:
        run = store.get_run(run_id)
        digest = console.digests.get(run_id, run.last_step)
        graph = console.graph(run.graph_hash)
        pages_n = run.last_step // pages.PAGE_SIZE + 1
        if page is None:  # the newest steps, followed live
            start = max(run.last_step - pages.PAGE_SIZE + 1, 0)
            page = pages_n - 1
        else:
            page = min(max(page, 0), pages_n - 1)
            start = page * pages.PAGE_SIZE
        end = min(start + pages.PAGE_SIZE - 1, run.last_step)
        records = expand_stored(
            store, run_id, store.get_steps(run_id, start=max(start - 1, 0), end=end)
        )
        previous = records[0].created_ms if start > 0 and records else None
        shown = [r for r in records if r.step >= start]
        masker = console.masker
        if graph is None:
            picture = (
                '<p class="muted">The graph that made this run is not known to the console '
                "(start it with --graph FILE.py, or run the graph with `stargraph run`, which "
                "archives it beside the database).</p>"
            )
        else:
            tail = records[-1] if records and records[-1].step == run.last_step else None
            if tail is None:
                tail = store.get_steps(run_id, start=run.last_step, end=run.last_step)[0]
            pending = frozenset() if run.status == "done" else frozenset(t.node for t in tail.next)
            svg = graph_svg(graph.ir, digest, finished=run.status == "done", waiting=pending)
            picture = f'<div class="picture">{svg}</div>'
            if not digest.timed:
                picture += '<p class="muted">These steps carry no commit times: no durations.</p>'
            else:
                picture += (
                    '<p class="muted">Highlighted: the nodes and edges this run took. A node\'s '
                    "time is the wall time of the steps it ran in.</p>"
                )
        can_resume = not settings.read_only and graph is not None and graph.app is not None
        waiting = (
            pages.interrupt_form(masker, run, csrf, can_resume)
            if run.status == "interrupted"
            else ""
        )
        failure = console.failures.get(run_id)
        if failure:
            shown_failure = pages.escape(masker.text(failure))
            waiting += f'<p class="status-failed">resume failed: {shown_failure}</p>'
        follow = "1" if page == pages_n - 1 else "0"
        rows_html = pages.step_rows(masker, run_id, shown, previous)
        rid = quote(run_id, safe="")
        body = f"""
<h1>Run {pages.escape(run_id)}</h1>
{pages.summary_table(masker, run, digest)}
{waiting}
<h2>Graph</h2>
{picture}
<h2>Steps</h2>
{pages.pager(run_id, page, pages_n)}
<table class="timeline">
<thead><tr><th>step</th><th>committed (UTC)</th><th>nodes</th>
<th>writes, rule decisions, calls, state</th><th>next tasks</th></tr></thead>
<tbody id="step-rows" data-follow="{follow}">{rows_html}</tbody>
</table>
{pages.pager(run_id, page, pages_n)}
"""
        html = pages.layout(f"stargraph run {run_id}", body, live=f"/runs/{rid}/events")
        return html.replace(
            "<body",
            f'<body data-status="{pages.escape(run.status)}" data-last-step="{run.last_step}" '
            f'data-rows="/runs/{rid}/rows"',
            1,
        )

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        raw = request.query_params.get("page")
        page = int(raw) if raw and raw.isdigit() else None
        csrf = _csrf(request)
        try:
            text = await run_in_threadpool(render_run, run_id, page, csrf)
        except RunNotFoundError:
            return PlainTextResponse(f"no run {run_id!r} in this store", status_code=404)
        return _html(request, text, csrf)

    async def run_rows(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        after = int(request.query_params.get("after", "0"))
        upto = int(request.query_params.get("upto", str(after + pages.PAGE_SIZE)))
        upto = min(upto, after + pages.PAGE_SIZE)

        def rows() -> str:
            records = expand_stored(store, run_id, store.get_steps(run_id, start=after, end=upto))
            previous = records[0].created_ms if records else None
            shown = [r for r in records if r.step > after]
            return pages.step_rows(console.masker, run_id, shown, previous)

        return HTMLResponse(await run_in_threadpool(rows))

    async def run_state(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        step = int(request.query_params.get("step", "0"))

        def state() -> str:
            from stargraph.viz import state_at

            run = store.get_run(run_id)
            graph = console.graph(run.graph_hash)
            if graph is None:
                records = store.get_steps(run_id, start=step, end=step)
                snap = records[0].snapshot if records else None
                if snap is None:
                    return "state unavailable: the console does not know this run's graph"
                value: Any = snap
            else:
                try:
                    value = state_at(graph.ir, store, run_id, step)
                except StargraphError as exc:
                    return f"state unavailable: {exc}"
            return json.dumps(
                console.masker.data(value), indent=2, sort_keys=True, ensure_ascii=False
            )

        return PlainTextResponse(await run_in_threadpool(state))

    async def sse(request: Request, poll: Callable[[], Any], event: str) -> StreamingResponse:
        async def stream() -> AsyncIterator[str]:
            yield "retry: 1000\n\n"
            last: Any = None
            deadline = time.monotonic() + settings.stream_s
            while not console.closing.is_set() and time.monotonic() < deadline:
                current = await run_in_threadpool(poll)
                if current != last:
                    last = current
                    yield f"event: {event}\ndata: {json.dumps(current)}\n\n"
                if await request.is_disconnected():
                    return
                await asyncio.sleep(settings.poll_s)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def run_events(request: Request) -> Response:
        run_id = request.path_params["run_id"]

        def poll() -> dict[str, Any]:
            run = store.get_run(run_id)
            return {"last_step": run.last_step, "status": run.status}

        try:
            await run_in_threadpool(store.get_run, run_id)
        except RunNotFoundError:
            return PlainTextResponse(f"no run {run_id!r}", status_code=404)
        return await sse(request, poll, "run")

    async def runs_events(request: Request) -> Response:
        def poll() -> list[Any]:
            return [[r.run_id, r.status, r.last_step] for r in store.list_runs(limit=200)]

        return await sse(request, poll, "runs")

    async def answer(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        form = await _form(request)
        sent = str(form.get("csrf", ""))
        cookie = request.cookies.get(_CSRF_COOKIE, "")
        if not cookie or not hmac.compare_digest(sent.encode(), cookie.encode()):
            return PlainTextResponse(
                "refused: missing or wrong CSRF token; reload the run page and answer there",
                status_code=403,
            )
        action = str(form.get("action", ""))
        reason = str(form.get("reason", ""))
        if action == "approve":
            response: Any = {"approved": True}
        elif action == "reject":
            response = {"approved": False, "reason": reason}
        elif action == "edit":
            try:
                response = {"approved": True, "value": json.loads(str(form.get("value", "")))}
            except ValueError as exc:
                return PlainTextResponse(
                    f"the edited value is not JSON ({exc}); go back and fix it", status_code=400
                )
        else:
            return PlainTextResponse(
                f"unknown action {action!r}; use approve, reject or edit", status_code=400
            )
        if reason and action != "reject":
            response["reason"] = reason
        try:
            run = await run_in_threadpool(store.get_run, run_id)
        except RunNotFoundError:
            return PlainTextResponse(f"no run {run_id!r}", status_code=404)
        if run.status != "interrupted":
            return PlainTextResponse(
                f"run {run_id} is {run.status}, not waiting on an answer", status_code=409
            )
        graph = await run_in_threadpool(console.graph, run.graph_hash)
        if graph is None or graph.app is None:
            return PlainTextResponse(
                f"the console cannot resume run {run_id}: it does not have the graph "
                f"{run.graph_hash[:19]} (start it with --graph FILE.py)",
                status_code=409,
            )
        console.resume(run_id, graph.app, response)
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=303)

    async def script(request: Request) -> Response:
        return Response(JS, media_type="text/javascript")

    async def style(request: Request) -> Response:
        return Response(CSS, media_type="text/css")

    async def icon(request: Request) -> Response:
        return Response(ICON, media_type="image/svg+xml")

    routes = [
        Route("/", runs_page),
        Route("/fragments/runs", runs_fragment),
        Route("/events/runs", runs_events),
        Route("/runs/{run_id:path}/events", run_events),
        Route("/runs/{run_id:path}/rows", run_rows),
        Route("/runs/{run_id:path}/state", run_state),
        Route("/runs/{run_id:path}/answer", answer, methods=["POST"]),
        Route("/runs/{run_id:path}", run_page),
        Route("/static/ui.js", script),
        Route("/static/ui.css", style),
        Route("/favicon.ico", icon),
    ]
    app = Starlette(routes=routes)

    app.add_middleware(_Gate, settings=settings)
    app.state.console = console
    return app
