"""The console's ASGI app (Starlette): routes, the security gate, live events, answers."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import secrets
import threading
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import datetime
from http.cookies import SimpleCookie
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlencode

import anyio
import httpx
from pydantic import ConfigDict
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
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

from stargraph._typed import TypedModel
from stargraph.checkpoint import CheckpointStore, PollingWatch, RunRecord, StepRecord, watch_runs
from stargraph.checkpoint._compact import expand_stored
from stargraph.checkpoint._records import ENDED_STATUSES
from stargraph.compile._subgraphs import site_of  # how the runner names a child run
from stargraph.errors import RunNotFoundError, StargraphError, UsageError
from stargraph.ir import GraphIR, SubgraphNodeIR
from stargraph.runtime import CompiledGraph
from stargraph.runtime._plan import ChildRunId
from stargraph.runtime._secrets import registered_secrets
from stargraph.ui import _pages as pages
from stargraph.ui._diff import RunPairDiff, diff_pair
from stargraph.ui._digest import DigestCache, RunDigest, Totals
from stargraph.ui._errors import error_handlers, error_page, int_param, run_address
from stargraph.ui._graph import graph_svg
from stargraph.ui._live import Closing, LiveText, Partial, Wakeup, Wakeups
from stargraph.ui._mask import Masker
from stargraph.ui._replay import render_replay
from stargraph.ui._served import ServedText
from stargraph.ui._static import CSS, ICON, JS
from stargraph.ui._timeline import inspector, nested_timeline, timeline_items

__all__ = ["RunGraph", "UiSettings", "create_app", "is_loopback"]

_CSRF_COOKIE: Final = "sg_csrf"
_TOKEN_COOKIE: Final = "sg_token"
_NO_ANSWER: Final = object()
_COALESCE_S: Final = 0.1
"""After a store's notice, a live view waits this long before it listens again."""
_MASK_MARK: Final = "[redacted:"
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


class UiSettings(TypedModel):
    """How the console is bound and what it allows.

    ``host`` is the address the server binds (it decides whether a token is required:
    any non-loopback address needs one). ``poll_s`` is how often live views look for new
    steps in a store that cannot tell when runs change (SQLite); one that can (PostgreSQL,
    through ``LISTEN``/``NOTIFY``) wakes them as each write commits, and ``recheck_s`` is
    how often they look anyway (a run whose process died writes nothing: its lease lapses).
    ``stream_tokens``: runs the console itself continues (an answer, a continued fork, a live
    replay) stream their model tokens to the page.
    """

    typed_error = UsageError

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    token: str | None = None
    read_only: bool = False
    poll_s: float = 0.25
    recheck_s: float = 5.0
    stream_tokens: bool = True
    stream_s: float = 300.0
    """How long one event stream lasts before the browser reconnects (it does so itself)."""
    api: str | None = None
    """The URL of a ``stargraph serve`` on the console's database: an answer to a run that
    server started is sent to its API (``Command(resume=...)``, run by the server's
    workers) rather than resumed by the console, which then needs no graph to answer it."""
    api_token: str | None = None
    """The bearer token of :attr:`api`, if it needs one."""


@dataclass(frozen=True, slots=True)
class RunGraph:
    """The graph of a run: its IR for pictures and state, and a compiled graph bound to the
    console's store when the console may resume the run (``None``: view only)."""

    ir: GraphIR
    app: CompiledGraph[Any] | None = None


GraphResolver = Callable[[str], RunGraph | None]
"""Graph hash -> the graph that made runs with that hash, or ``None`` when unknown."""


ChildRuns = dict[tuple[Any, ...], str]
"""Keys as :func:`child_runs` makes them -> child run ids."""


def _subgraphs(ir: GraphIR) -> Iterator[tuple[str, GraphIR]]:
    """Every child graph embedded in ``ir``, nested ones included, by graph hash."""
    for child_hash, child in ir.subgraphs.items():
        yield child_hash, child
        yield from _subgraphs(child)


def _sites(ir: GraphIR) -> dict[str, str]:
    """The site (the child run id's part) of each subgraph node of ``ir``, by node id."""
    return {str(node.id): site_of(node) for node in ir.nodes if isinstance(node, SubgraphNodeIR)}


def child_runs(
    ir: GraphIR,
    run: RunRecord,
    records: Sequence[StepRecord],
    owner: Callable[[int], str],
    store: CheckpointStore,
) -> ChildRuns:
    """Child run ids of the subgraph tasks in ``records``: ``(step, node, index)`` keys for
    the tasks that ran in a step, ``("next", step, node, index)`` for the tasks the run's
    last step scheduled (running or waiting now, in the step after). ``owner(step)`` is the
    run that ran ``step`` (a fork's copied steps ran in its parent). A child run id counts
    its node's steps, so the steps before ``records`` are read from ``store`` to count
    from."""
    sites = _sites(ir)
    if not sites or not records:
        return {}
    counts: dict[str, int] = {}
    first = min(r.step for r in records)
    if first > 1:
        ChildRunId.activations(store.get_steps(run.run_id, start=1, end=first - 1), sites, counts)
    ordered = sorted(records, key=lambda r: r.step)
    activations = ChildRunId.activations(ordered, sites, counts)
    out: ChildRuns = {}
    for record in ordered:
        for write in record.writes:
            if write.node in sites:
                key = (record.step, write.node, write.index)
                out[key] = ChildRunId.id_of(
                    owner(record.step),
                    sites[write.node],
                    activations[(record.step, write.node)],
                    write.index,
                )
        if record.step == run.last_step:
            for task in record.next:
                if task.node in sites:
                    out[("next", record.step, task.node, task.index)] = ChildRunId.id_of(
                        run.run_id, sites[task.node], counts.get(task.node, 0) + 1, task.index
                    )
    return out


def _resolver(graphs: GraphResolver | Iterable[CompiledGraph[Any]]) -> GraphResolver:
    if callable(graphs):
        return graphs
    known: dict[str, RunGraph] = {}
    for g in graphs:
        known[str(g.ir.graph_hash)] = RunGraph(g.ir, g)
        for child_hash, child in _subgraphs(g.ir):
            known.setdefault(child_hash, RunGraph(child))  # drawn and read, not resumed

    def lookup(graph_hash: str) -> RunGraph | None:
        return known.get(graph_hash)

    return lookup


class _Gate:
    """Checks every HTTP request before any route sees it (see :func:`create_app`)."""

    def __init__(self, app: ASGIApp, settings: UiSettings) -> None:
        self.app = app
        self.settings = settings
        self.loopback = is_loopback(settings.host)
        self.headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in _SECURITY_HEADERS}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, text = refusal
            page = HTMLResponse(
                error_page(status, text), status, headers=self.headers, media_type="text/html"
            )
            await page(scope, receive, send)
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
        self.wakeups = Wakeups()
        self.closing = Closing(self.wakeups)
        self.live = LiveText(self.wakeups)
        self.served = ServedText(store)
        self.diffs = _Recent(4)
        self.workers: list[threading.Thread] = []
        self.failures: dict[str, str] = {}

    def graph(self, graph_hash: str) -> RunGraph | None:
        with self._lock:
            if graph_hash not in self._graphs:
                try:
                    found = self._resolver(graph_hash)
                except StargraphError:
                    found = None
                if found is not None and found.app is not None:
                    self.masker.extend(registered_secrets(found.app.plan.services))
                self._graphs[graph_hash] = found
            return self._graphs[graph_hash]

    def graph_of(self, run: RunRecord) -> RunGraph | None:
        """The graph of ``run``; a child (skill) run's graph is found in its parent's."""
        graph = self.graph(run.graph_hash)
        if graph is not None or "::" not in run.run_id:
            return graph
        try:
            parent = self.store.get_run(run.run_id.rpartition("::")[0])
        except RunNotFoundError:
            return None
        found = self.graph_of(parent)
        if found is None:
            return None
        for child_hash, child in _subgraphs(found.ir):
            if child_hash == run.graph_hash:
                with self._lock:
                    self._graphs[run.graph_hash] = RunGraph(child)
                return RunGraph(child)
        return None

    def family(self, run: RunRecord, graph: RunGraph | None, digest: RunDigest) -> Totals:
        """Call totals of ``run`` with every child skill run below it (nested ones too):
        a skill's model calls are made in its child run, not in the step of its parent."""
        totals = Totals()
        totals.add(digest)
        todo = [(run, graph, digest)]
        seen = {run.run_id}
        while todo:
            current, current_graph, current_digest = todo.pop()
            if current_graph is None:
                continue
            sites = _sites(current_graph.ir)
            owner = self.owner_of(current)
            ids = []
            ran: dict[str, int] = {}  # the steps each subgraph node ran in, so far
            for node, site in sites.items():
                steps: dict[int, int] = {}  # step -> the node's activation there
                for step, index in current_digest.written.get(node, ()):
                    activation = steps.setdefault(step, len(steps) + 1)
                    ids.append(ChildRunId.id_of(owner(step), site, activation, index))
                ran[node] = len(steps)
            tail = self.store.get_steps(current.run_id, start=current.last_step)
            ids += [
                ChildRunId.id_of(current.run_id, sites[t.node], ran.get(t.node, 0) + 1, t.index)
                for record in tail[-1:]
                for t in record.next
                if t.node in sites
            ]
            for child_id in dict.fromkeys(ids):
                if child_id in seen:
                    continue
                seen.add(child_id)
                try:
                    child = self.store.get_run(child_id)
                except RunNotFoundError:
                    continue  # a skill node that failed before its child run started
                child_digest = self.digests.get(child_id, child.last_step)
                totals.add(child_digest)
                todo.append((child, self.graph_of(child), child_digest))
        return totals

    def owner_of(self, run: RunRecord) -> Callable[[int], str]:
        """``step -> id of the run that ran it``: a fork's copied steps ran in its parent
        (whose child runs keep the parent's id)."""
        chain: list[tuple[int, str]] = []  # (last copied step, run that ran it), nearest first
        current = run
        while current.parent_run_id is not None and current.parent_step is not None:
            chain.append((current.parent_step, current.parent_run_id))
            try:
                current = self.store.get_run(current.parent_run_id)
            except RunNotFoundError:
                break

        def owner(step: int) -> str:
            found = run.run_id
            for last, parent in chain:
                if step > last:
                    break
                found = parent
            return found

        return owner

    def resume(self, run_id: str, app: CompiledGraph[Any], response: Any = _NO_ANSWER) -> None:
        """Resume ``run_id`` in a thread of the console (with ``response`` as the answer to
        its interrupt, if given); a failure is kept for the run page. With
        ``stream_tokens`` the run streams its model tokens to :attr:`live`."""
        answer: dict[str, Any] = {} if response is _NO_ANSWER else {"response": response}

        def work() -> None:
            try:
                if not self.settings.stream_tokens:
                    app.resume(run_id, **answer)
                    return
                for mode, item in app.resume_stream(run_id, mode=("messages", "events"), **answer):
                    if mode == "messages":
                        self.live.add(run_id, item)
                    elif item.kind == "step_completed":
                        self.live.committed(item.run_id, item.step)
            except Exception as exc:  # shown on the run page; the store has the status
                self.failures[run_id] = f"{type(exc).__name__}: {exc}"
            finally:
                self.live.ended(run_id)

        thread = threading.Thread(target=work, name=f"stargraph-ui-resume-{run_id}")
        self.workers = [t for t in self.workers if t.is_alive()]
        self.workers.append(thread)
        thread.start()

    def api_thread(self, run_id: str) -> tuple[str, str] | None:
        """``(thread id, assistant id)`` when the server of ``settings.api`` started run
        ``run_id`` (so it, not the console, answers it); ``None`` otherwise."""
        if self.settings.api is None or self.settings.read_only:
            return None
        return self.served.started(run_id)

    def answer_through_api(self, thread_id: str, assistant_id: str, response: Any) -> None:
        """Send ``response`` as the answer of thread ``thread_id``'s interrupt to the server
        (a run in the background: its workers resume the stargraph run)."""
        from stargraph.client import Client

        assert self.settings.api is not None
        try:
            with Client(self.settings.api, token=self.settings.api_token) as client:
                client.start(thread_id, assistant_id, answer=response)
        except StargraphError as exc:
            status = getattr(exc, "status", 502)  # a refusal keeps the server's 4xx
            raise HTTPException(
                status if isinstance(status, int) and 400 <= status < 500 else 502,
                self.masker.text(f"the server refused the answer: {exc}"),
            ) from None
        except httpx.HTTPError as exc:
            raise HTTPException(
                502,
                f"the server at {self.settings.api} cannot be reached ({exc}); start it, or "
                "restart the console without --api to answer here",
            ) from None

    def close(self, timeout_s: float = 30.0) -> None:
        self.closing.set()
        deadline = time.monotonic() + timeout_s
        for thread in self.workers:
            thread.join(max(deadline - time.monotonic(), 0.0))
        self.served.close()


def _model(graph: RunGraph) -> Any:
    """The state model of ``graph``'s runs: its compiled graph's when the console has it
    (a ``stargraph.langgraph`` graph's IR names its ``TypedDict``), else the IR's import."""
    return None if graph.app is None else graph.app.state_model


def _csrf(request: Request) -> str:
    return request.cookies.get(_CSRF_COOKIE) or secrets.token_urlsafe(24)


def _check_csrf(request: Request, form: Mapping[str, str]) -> None:
    """403 unless the form carries the CSRF token of the console's cookie."""
    sent = str(form.get("csrf", ""))
    cookie = request.cookies.get(_CSRF_COOKIE, "")
    if not cookie or not hmac.compare_digest(sent.encode(), cookie.encode()):
        raise HTTPException(
            403, "refused: missing or wrong CSRF token; reload the console's page and act there"
        )


def _run_form_post(
    handler: Callable[[str, Mapping[str, str]], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A form POST on run ``run_id`` of the path: ``handler(run_id, form)`` once the form
    carries the console's CSRF token (else 403); a run not in the store answers 404."""

    async def endpoint(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        form = await _form(request)
        _check_csrf(request, form)
        return await handler(run_id, form)

    return endpoint


def _to_run_page(run_id: str) -> Response:
    """See run ``run_id``'s page (after a POST: 303, so reloading does not post again)."""
    return RedirectResponse(f"/runs/{quote(run_id, safe='')}", status_code=303)


def _holds_mask(value: Any) -> bool:
    """Whether JSON data still holds a ``[redacted:...]`` placeholder of the masker."""
    if isinstance(value, str):
        return _MASK_MARK in value
    if isinstance(value, dict):
        return any(_holds_mask(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_mask(v) for v in value)
    return False


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


def _unstarted_fork(run: RunRecord) -> bool:
    """A fork nobody has continued: ``pending`` (or, written before that status, still
    ``running``, unleased, no step past its copy and its update)."""
    return run.status == "pending" or (
        run.parent_run_id is not None
        and run.parent_step is not None
        and run.status == "running"
        and run.owner is None
        and run.last_step <= run.parent_step + 1
    )


def _version(run: RunRecord) -> tuple[str, int, str, str, str]:
    """What changes whenever a run's steps or outcome do."""
    return (run.run_id, run.last_step, run.status, run.updated_at, run.graph_hash)


class _Recent:
    """The last few diffs made, by the versions of their two runs (thread-safe)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: dict[Any, RunPairDiff] = {}

    def get(self, key: Any) -> RunPairDiff | None:
        with self._lock:
            found = self._items.pop(key, None)
            if found is not None:
                self._items[key] = found  # now the most recent
            return found

    def put(self, key: Any, value: RunPairDiff) -> None:
        with self._lock:
            self._items.pop(key, None)
            self._items[key] = value
            while len(self._items) > self._size:
                del self._items[next(iter(self._items))]


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

    def actor(graph: RunGraph | None) -> CompiledGraph[Any] | None:
        """The compiled graph that may act on a run, unless read-only or unknown."""
        if settings.read_only or graph is None:
            return None
        return graph.app

    def list_filtered(request: Request) -> tuple[list[Any], list[str], str, str, str, str]:
        status = request.query_params.get("status", "")
        graph = request.query_params.get("graph", "")
        since = request.query_params.get("since", "")
        q = request.query_params.get("q", "").strip()
        runs = store.list_runs(limit=500)
        names = sorted({r.graph_name for r in runs})
        needle = q.lower()
        chosen = [
            r
            for r in runs
            if (not status or r.status == status)
            and (not graph or r.graph_name == graph)
            and (not needle or needle in r.run_id.lower() or needle in (r.thread_id or "").lower())
            and _since_ok(r, since)
        ][:200]
        rows = [(r, console.digests.get(r.run_id, r.last_step)) for r in chosen]
        return rows, names, status, graph, since, q

    async def runs_page(request: Request) -> Response:
        rows, names, status, graph, since, q = await run_in_threadpool(list_filtered, request)
        text = pages.runs_page(rows, names, status=status, graph=graph, since=since, q=q)
        return _html(request, text)

    async def runs_fragment(request: Request) -> Response:
        rows, *_ = await run_in_threadpool(list_filtered, request)
        return HTMLResponse(pages.run_rows(rows))

    def render_run(run_id: str, page: int | None, csrf: str) -> str:
        run = store.get_run(run_id)
        digest = console.digests.get(run_id, run.last_step)
        graph = console.graph_of(run)
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
            ended = run.status in ENDED_STATUSES
            pending = frozenset() if ended else frozenset(t.node for t in tail.next)
            svg = graph_svg(graph.ir, digest, finished=ended, waiting=pending)
            picture = f'<div class="picture">{svg}</div>'
            if not digest.timed:
                picture += '<p class="muted">These steps carry no commit times: no durations.</p>'
            else:
                picture += (
                    '<p class="muted">Highlighted: the nodes and edges this run took. A node\'s '
                    "time is the wall time of the steps it ran in.</p>"
                )
        can_resume = actor(graph) is not None
        waiting = ""
        if run.status == "interrupted":
            via_api = console.api_thread(run_id) is not None
            waiting = pages.interrupt_form(masker, run, csrf, can_resume or via_api)
            if via_api:
                waiting += (
                    f'<p class="muted" id="answer-via">The answer goes to the stargraph serve at '
                    f"{pages.escape(str(settings.api))}, which started this run; its workers "
                    "resume it.</p>"
                )
        if can_resume and _unstarted_fork(run):
            waiting += pages.continue_form(run, csrf)
        if can_resume and "::" not in run_id:  # a child run replays with its parent
            waiting += (
                f'<p><a href="/runs/{quote(run_id, safe="")}/replay" id="replay-link">replay '
                "offline</a>: see which node bodies run again first</p>"
            )
        failure = console.failures.get(run_id)
        if failure:
            shown_failure = pages.escape(masker.text(failure))
            waiting += f'<p class="status-failed">resume failed: {shown_failure}</p>'
        follow = "1" if page == pages_n - 1 else "0"
        children = (
            {} if graph is None else child_runs(graph.ir, run, shown, console.owner_of(run), store)
        )
        sources = {} if graph is None else pages.tool_sources(graph.ir)
        rows_html = pages.step_rows(
            masker,
            run_id,
            shown,
            previous,
            can_fork=can_resume,
            children=children,
            sources=sources,
        )
        rid = quote(run_id, safe="")
        timeline = timeline_items(masker, run, shown, children)
        body = f"""
<h1>Run {pages.escape(run_id)}</h1>
{pages.summary_table(masker, run, digest, console.family(run, graph, digest))}
{waiting}
{pages.LIVE_OUTPUT}
<div class="studio">
<section class="pane graph-pane"><h2>Graph</h2>
{picture}
<h2>Timeline</h2>
<ol class="tl" id="timeline" data-url="/runs/{rid}/timeline">{timeline}</ol>
</section>
<section class="pane inspector" id="inspector" data-url="/runs/{rid}/inspect">
<h2>Step</h2><p class="muted">Choose a step in the timeline to see its state and what it
changed.</p></section>
</div>
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
            f'<body data-run="{pages.escape(run_id)}" data-status="{pages.escape(run.status)}" '
            f'data-last-step="{run.last_step}" '
            f'data-rows="/runs/{rid}/rows"',
            1,
        )

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        page = int_param(request, "page", None)
        csrf = _csrf(request)
        try:
            text = await run_in_threadpool(render_run, run_id, page, csrf)
        except RunNotFoundError as exc:
            # Opened before its run is stored (a link handed out as the run starts): the
            # page follows the runs list and opens the run once it is there.
            message = console.masker.text(f"{exc}; this page opens it as soon as it is stored")
            waiting = error_page(404, message).replace(
                "<body",
                f'<body data-live="/events/runs" data-await-run="{pages.escape(run_id)}"',
                1,
            )
            return HTMLResponse(waiting, 404)
        return _html(request, text, csrf)

    async def run_rows(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        after = int_param(request, "after", 0) or 0
        upto = int_param(request, "upto", after + pages.PAGE_SIZE) or 0
        if upto < after:
            raise HTTPException(400, f"?upto={upto} is before ?after={after}; use upto >= after")
        upto = min(upto, after + pages.PAGE_SIZE)

        def rows() -> str:
            run = store.get_run(run_id)
            records = expand_stored(store, run_id, store.get_steps(run_id, start=after, end=upto))
            previous = records[0].created_ms if records else None
            shown = [r for r in records if r.step > after]
            graph = console.graph_of(run)
            children = (
                {}
                if graph is None
                else child_runs(graph.ir, run, shown, console.owner_of(run), store)
            )
            return pages.step_rows(
                console.masker,
                run_id,
                shown,
                previous,
                can_fork=actor(graph) is not None,
                children=children,
                sources={} if graph is None else pages.tool_sources(graph.ir),
            )

        return HTMLResponse(await run_in_threadpool(rows))

    async def run_timeline(request: Request) -> Response:
        """Timeline lines: steps ``after < step <= upto`` (a live page's new steps), or with
        ``?nested=1`` a child run's first page of them, inside its parent's timeline."""
        run_id = request.path_params["run_id"]
        nested = request.query_params.get("nested") == "1"
        after = int_param(request, "after", -1)
        after = -1 if after is None else after
        upto = int_param(request, "upto", after + pages.PAGE_SIZE)
        upto = after + pages.PAGE_SIZE if upto is None else min(upto, after + pages.PAGE_SIZE)

        def items() -> str:
            run = store.get_run(run_id)
            start, end = (0, pages.PAGE_SIZE - 1) if nested else (max(after, 0), upto)
            records = expand_stored(store, run_id, store.get_steps(run_id, start=start, end=end))
            shown = records if nested else [r for r in records if r.step > after]
            graph = console.graph_of(run)
            children = (
                {}
                if graph is None
                else child_runs(graph.ir, run, shown, console.owner_of(run), store)
            )
            text = timeline_items(console.masker, run, shown, children, selectable=not nested)
            return nested_timeline(run, text, len(shown)) if nested else text

        try:
            return HTMLResponse(await run_in_threadpool(items))
        except RunNotFoundError as exc:
            raise HTTPException(
                404, f"{exc} (a skill run is stored once its node starts)"
            ) from None

    async def run_inspect(request: Request) -> Response:
        """The inspector for ``?step=K``: the state after it and what it changed."""
        run_id = request.path_params["run_id"]
        step = int_param(request, "step", None)

        def render() -> str:
            from stargraph.viz import state_at

            run = store.get_run(run_id)
            at = run.last_step if step is None else step
            if not 0 <= at <= run.last_step:
                raise HTTPException(
                    404, f"run {run_id} has steps 0..{run.last_step}; there is no step {at}"
                )
            record = expand_stored(store, run_id, store.get_steps(run_id, start=at, end=at))[0]
            graph = console.graph_of(run)
            if graph is None:
                return inspector(
                    console.masker,
                    run,
                    record,
                    None,
                    None,
                    unavailable="The console does not know this run's graph, so it cannot "
                    "work out its state (start it with --graph FILE.py).",
                )
            try:
                model = _model(graph)
                after_state = state_at(graph.ir, store, run_id, at, model=model)
                before = state_at(graph.ir, store, run_id, at - 1, model=model) if at else None
            except StargraphError as exc:
                return inspector(
                    console.masker, run, record, None, None, unavailable=f"state unavailable: {exc}"
                )
            return inspector(console.masker, run, record, before, after_state)

        return HTMLResponse(await run_in_threadpool(render))

    async def run_nested(request: Request) -> Response:
        run_id = request.path_params["run_id"]

        def nested() -> str:
            run = store.get_run(run_id)
            records = expand_stored(
                store, run_id, store.get_steps(run_id, start=0, end=pages.PAGE_SIZE - 1)
            )
            graph = console.graph_of(run)
            children = (
                {}
                if graph is None
                else child_runs(graph.ir, run, records, console.owner_of(run), store)
            )
            # A child run is part of its parent's step: it is not forked on its own.
            rows = pages.step_rows(
                console.masker,
                run_id,
                records,
                None,
                children=children,
                sources={} if graph is None else pages.tool_sources(graph.ir),
            )
            return pages.nested_run(run, rows, len(records))

        try:
            return HTMLResponse(await run_in_threadpool(nested))
        except RunNotFoundError as exc:
            raise HTTPException(
                404, f"{exc} (a skill run is stored once its node starts)"
            ) from None

    async def run_state(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        step = int_param(request, "step", 0) or 0

        def state() -> str:
            from stargraph.viz import state_at

            run = store.get_run(run_id)
            if step > run.last_step:
                raise HTTPException(
                    404, f"run {run_id} has steps 0..{run.last_step}; there is no step {step}"
                )
            graph = console.graph_of(run)
            if graph is None:
                records = store.get_steps(run_id, start=step, end=step)
                snap = records[0].snapshot if records else None
                if snap is None:
                    return "state unavailable: the console does not know this run's graph"
                value: Any = snap
            else:
                try:
                    value = state_at(graph.ir, store, run_id, step, model=_model(graph))
                except StargraphError as exc:
                    return f"state unavailable: {exc}"
            return json.dumps(
                console.masker.data(value), indent=2, sort_keys=True, ensure_ascii=False
            )

        return PlainTextResponse(await run_in_threadpool(state))

    async def follow(
        run_id: str | None, wakeup: Wakeup, news: asyncio.Event, ready: asyncio.Event
    ) -> None:
        """Set ``news`` (and wake the stream) whenever the store may hold news of ``run_id``
        (of any run: ``None``): on the store's notice, at most every ``_COALESCE_S``, else
        every ``poll_s``; until cancelled. ``ready`` is set once it watches."""
        try:
            async with watch_runs(store, run_id, poll_s=settings.poll_s) as watch:
                ready.set()
                while True:
                    await watch.wait(settings.recheck_s)
                    news.set()
                    wakeup.set()
                    # Busy writers send notices by the hundred a second: one read covers
                    # those of the next moment too.
                    await asyncio.sleep(_COALESCE_S)
        except StargraphError:
            pass  # no LISTEN connection (or it broke): poll instead
        finally:
            ready.set()  # the stream must not wait on a watch that failed to start
        async with PollingWatch(settings.poll_s) as polling:
            while True:
                await polling.wait(settings.recheck_s)
                news.set()
                wakeup.set()

    async def sse(
        request: Request,
        run_id: str | None,
        poll: Callable[[], Any],
        event: str,
        partial: Callable[[], Any] | None = None,
    ) -> StreamingResponse:
        """An event stream sending ``poll()`` as ``event`` (and ``partial()``, the model
        output in flight, as ``tokens``) whenever it changes. The store is read when its
        watch says it may have changed; the model output (in memory) whenever woken."""

        async def stream() -> AsyncIterator[str]:
            wakeup = Wakeup()
            console.wakeups.add(run_id, wakeup)
            news, ready = asyncio.Event(), asyncio.Event()
            news.set()  # the first read
            watcher = asyncio.create_task(follow(run_id, wakeup, news, ready))
            try:
                await ready.wait()  # watching before the first read: no change falls between
                yield "retry: 1000\n\n"
                last: Any = None
                last_partial: Any = []
                deadline = time.monotonic() + settings.stream_s
                while not console.closing.is_set() and time.monotonic() < deadline:
                    wakeup.clear()
                    if news.is_set():
                        news.clear()
                        current = await run_in_threadpool(poll)
                        if current != last:
                            last = current
                            yield f"event: {event}\ndata: {json.dumps(current)}\n\n"
                    shown = [] if partial is None else partial()
                    if shown != last_partial:
                        last_partial = shown
                        yield f"event: tokens\ndata: {json.dumps(shown)}\n\n"
                    if await request.is_disconnected():
                        return
                    await wakeup.wait(deadline - time.monotonic())
            finally:
                console.wakeups.discard(run_id, wakeup)
                watcher.cancel()
                # Closing the LISTEN connection must not be cut short by the cancellation
                # of a stream whose client went away.
                with anyio.CancelScope(shield=True):
                    await asyncio.wait({watcher})

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def run_events(request: Request) -> Response:
        run_id = request.path_params["run_id"]

        served: list[Partial] = []  # read from the serve tables with each read of the store

        def poll() -> dict[str, Any]:
            run = store.get_run(run_id)
            served[:] = console.served.of(run_id)
            return {"last_step": run.last_step, "status": run.status}

        def partial() -> list[dict[str, Any]]:
            # The console's own runs first; a run a server runs is not also run here.
            found = {(p.run_id, p.step, p.node, p.index): p for p in served}
            found.update({(p.run_id, p.step, p.node, p.index): p for p in console.live.of(run_id)})
            return [
                {
                    "run": p.run_id,
                    "step": p.step,
                    "task": p.node if p.index == 0 else f"{p.node}[{p.index}]",
                    "text": console.masker.text(p.text),
                }
                for p in sorted(
                    found.values(),
                    key=lambda p: (p.run_id != run_id, p.run_id, p.step, p.node, p.index),
                )
            ]

        await run_in_threadpool(store.get_run, run_id)
        return await sse(request, run_id, poll, "run", partial)

    async def runs_events(request: Request) -> Response:
        def poll() -> list[Any]:
            return [[r.run_id, r.status, r.last_step] for r in store.list_runs(limit=200)]

        return await sse(request, None, poll, "runs")

    @_run_form_post
    async def answer(run_id: str, form: Mapping[str, str]) -> Response:
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
                raise HTTPException(
                    400, f"the edited value is not JSON ({exc}); go back and fix it"
                ) from None
        else:
            raise HTTPException(400, f"unknown action {action!r}; use approve, reject or edit")
        if reason and action != "reject":
            response["reason"] = reason
        run = await run_in_threadpool(store.get_run, run_id)
        if run.status != "interrupted":
            raise HTTPException(409, f"run {run_id} is {run.status}, not waiting on an answer")
        served_by = await run_in_threadpool(console.api_thread, run_id)
        if served_by is not None:  # the server that started it answers it: one write path
            await run_in_threadpool(console.answer_through_api, *served_by, response)
            return _to_run_page(run_id)
        graph = await run_in_threadpool(console.graph, run.graph_hash)
        if graph is None or graph.app is None:
            raise HTTPException(
                409,
                f"the console cannot resume run {run_id}: it does not have the graph "
                f"{run.graph_hash[:19]} (start it with --graph FILE.py)",
            )
        console.resume(run_id, graph.app, response)
        return _to_run_page(run_id)

    def acting_graph(run: RunRecord) -> CompiledGraph[Any]:
        if settings.read_only:
            raise HTTPException(403, "refused: this console was started with --read-only")
        app = actor(console.graph(run.graph_hash))
        if app is None:
            raise HTTPException(
                409,
                f"the console cannot act on run {run.run_id}: it does not have the graph "
                f"{run.graph_hash[:19]} (start it with --graph FILE.py)",
            )
        return app

    def shown_state(app: CompiledGraph[Any], run: RunRecord, step: int) -> dict[str, Any]:
        """The state after ``step`` as the fork form shows it: masked JSON data."""
        from stargraph.viz import state_at

        if not 0 <= step <= run.last_step:
            raise HTTPException(
                400, f"run {run.run_id} has steps 0..{run.last_step}; there is no step {step}"
            )
        value = state_at(app.ir, store, run.run_id, step, model=app.state_model)
        shown: dict[str, Any] = json.loads(
            json.dumps(console.masker.data(value), ensure_ascii=False, default=str)
        )
        return shown

    def render_fork(
        run_id: str, step: int, csrf: str, form: Mapping[str, str] | None = None
    ) -> str:
        """The fork form; after its preview button (``form``), with the edits kept and the
        tasks the fork would run next worked out from them."""
        run = store.get_run(run_id)
        app = acting_graph(run)
        reducers = {f.name: f.reducer for f in app.ir.state.fields if f.reducer is not None}
        if form is None:
            shown = shown_state(app, run, step)
            text = json.dumps(shown, indent=2, sort_keys=True, ensure_ascii=False)
            writes, as_node = "", ""
            update: dict[str, Any] = {}
        else:
            update = fork_update(app, run, step, form)
            text, writes = form.get("state", ""), form.get("writes", "")
            as_node = form.get("as_node", "")
        try:
            nxt = app.fork_next(run_id, step, update=update or None, as_node=as_node or None)
        except StargraphError as exc:
            raise HTTPException(400, console.masker.text(f"{exc}; go back and fix it")) from exc
        nodes = sorted(node.id for node in app.ir.nodes)
        return pages.fork_page(
            run, step, text, reducers, csrf, nodes=nodes, as_node=as_node, writes=writes, nxt=nxt
        )

    async def fork_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        step = int_param(request, "step", None)
        if step is None:
            raise HTTPException(400, "fork needs ?step=K, a step of the run")
        csrf = _csrf(request)
        text = await run_in_threadpool(render_fork, run_id, step, csrf)
        return _html(request, text, csrf)

    def fork_update(
        app: CompiledGraph[Any], run: RunRecord, step: int, form: Mapping[str, str]
    ) -> dict[str, Any]:
        """The fork's update: the state fields the form changed, plus its raw writes."""
        shown = shown_state(app, run, step)
        try:
            edited = json.loads(form.get("state") or "{}")
            writes = json.loads(form.get("writes") or "{}")
        except ValueError as exc:
            raise HTTPException(
                400, f"the state or writes box is not JSON ({exc}); go back and fix it"
            ) from exc
        if not isinstance(edited, dict) or not isinstance(writes, dict):
            raise HTTPException(400, "the state and writes boxes must each hold one JSON object")
        unknown = sorted(set(edited) - set(shown))
        if unknown:
            raise HTTPException(
                400,
                f"the edited state names {unknown}, which are not fields of the state "
                f"(fields: {sorted(shown)}); put new values under existing fields",
            )
        update: dict[str, Any] = {}
        for key, value in edited.items():
            if value == shown[key]:
                continue  # unchanged, masked placeholders included: not written
            channel = app.channels[key]
            if channel.reducer is not None:
                raise HTTPException(
                    400,
                    f"field {key!r} merges writes through a reducer, so its whole value cannot "
                    "be set; leave it as shown and put what to add to it in the writes box",
                )
            if _holds_mask(value):
                raise HTTPException(
                    400,
                    f"field {key!r} still holds a masked value ([redacted:...]), which the "
                    "console cannot write back; replace it whole or leave the field unchanged",
                )
            update[key] = value
        both = sorted(set(update) & set(writes))
        if both:
            raise HTTPException(
                400, f"{both} changed in the state box and written in the writes box; pick one"
            )
        if _holds_mask(writes):
            raise HTTPException(
                400, "the writes box holds a masked value ([redacted:...]); remove it"
            )
        return {**update, **writes}

    def make_fork(run_id: str, form: Mapping[str, str]) -> str:
        """Fork (and for a counterfactual, continue) the run; the new run's id."""
        from stargraph.errors import InvalidInputError

        action = form.get("action", "")
        if action not in ("fork", "counterfactual"):
            raise HTTPException(
                400, f"unknown action {action!r}; use fork, counterfactual or preview"
            )
        raw = form.get("step", "")
        if not raw.isdigit():
            raise HTTPException(400, "the fork form lost its step; reload it from the run page")
        step = int(raw)
        run = store.get_run(run_id)
        app = acting_graph(run)
        update = fork_update(app, run, step, form)
        tag = f"fork{step}" if action == "fork" else f"from{step + 1}"
        new_id = f"{run_id}~{tag}-{secrets.token_hex(3)}"
        try:
            # A counterfactual from step k+1 is CompiledGraph.replay(from_step=k+1, mutate=)
            # done in two halves: the fork here (so the new run exists before the browser
            # is sent to it), the live resume in a console thread.
            app.fork(
                run_id,
                step,
                update=update or None,
                new_run_id=new_id,
                as_node=form.get("as_node") or None,
            )
        except InvalidInputError as exc:
            message = console.masker.text(f"{exc}; go back and fix the value")
            raise HTTPException(400, message) from exc
        except StargraphError as exc:  # say a graph whose code changed since the run
            message = console.masker.text(f"cannot fork run {run_id}: {exc}")
            raise HTTPException(409, message) from exc
        if action == "counterfactual":
            console.resume(new_id, app)
        return new_id

    @_run_form_post
    async def fork_post(run_id: str, form: Mapping[str, str]) -> Response:
        if form.get("action") == "preview":
            raw = form.get("step", "")
            if not raw.isdigit():
                raise HTTPException(400, "the fork form lost its step; reload it from the run page")
            csrf = form.get("csrf", "")
            text = await run_in_threadpool(render_fork, run_id, int(raw), csrf, form)
            return HTMLResponse(text)
        new_id = await run_in_threadpool(make_fork, run_id, form)
        return _to_run_page(new_id)

    async def replay_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        csrf = _csrf(request)

        def render() -> str:
            run = store.get_run(run_id)
            return render_replay(console.masker, acting_graph(run), run, csrf, {}, run_it=False)

        return _html(request, await run_in_threadpool(render), csrf)

    @_run_form_post
    async def replay_post(run_id: str, form: Mapping[str, str]) -> Response:
        action = form.get("action", "")
        if action not in ("preview", "replay"):
            raise HTTPException(400, f"unknown action {action!r}; use preview or replay")

        def render() -> str:
            run = store.get_run(run_id)
            app = acting_graph(run)
            csrf = form.get("csrf", "")
            return render_replay(console.masker, app, run, csrf, form, run_it=action == "replay")

        return HTMLResponse(await run_in_threadpool(render))

    @_run_form_post
    async def continue_post(run_id: str, form: Mapping[str, str]) -> Response:
        run = await run_in_threadpool(store.get_run, run_id)
        if not _unstarted_fork(run):
            raise HTTPException(409, f"run {run_id} is not a fork waiting to be continued")
        app = await run_in_threadpool(acting_graph, run)
        console.resume(run_id, app)
        return _to_run_page(run_id)

    def final_state(run: RunRecord) -> dict[str, Any] | None:
        from stargraph.viz import state_at

        graph = console.graph(run.graph_hash)
        if graph is None:
            return None
        try:
            return state_at(graph.ir, store, run.run_id, model=_model(graph))
        except StargraphError:
            return None

    def render_diff(a: str, b: str, page: int | None) -> str:
        if not a or not b:
            return pages.diff_page(console.masker, None, a, b)
        run_a, run_b = store.get_run(a), store.get_run(b)
        # Paging through a diff compares the runs once: kept while neither run changes.
        key = (_version(run_a), _version(run_b))
        found = console.diffs.get(key)
        if found is None:
            found = diff_pair(
                console.masker,
                run_a,
                store.get_steps(a),
                run_b,
                store.get_steps(b),
                final_a=final_state(run_a),
                final_b=final_state(run_b),
            )
            console.diffs.put(key, found)
        return pages.diff_page(console.masker, found, a, b, page)

    async def diff_view(request: Request) -> Response:
        a = request.query_params.get("a", "").strip()
        b = request.query_params.get("b", "").strip()
        page = int_param(request, "page", None)
        try:
            text = await run_in_threadpool(render_diff, a, b, page)
        except RunNotFoundError as exc:
            raise HTTPException(404, f"{exc}; pick two runs of this store") from None
        return _html(request, text)

    async def script(request: Request) -> Response:
        return Response(JS, media_type="text/javascript")

    async def style(request: Request) -> Response:
        return Response(CSS, media_type="text/css")

    async def icon(request: Request) -> Response:
        return Response(ICON, media_type="image/svg+xml")

    by_action: dict[tuple[str, str], Callable[[Request], Awaitable[Response]]] = {
        ("", "GET"): run_page,
        ("events", "GET"): run_events,
        ("rows", "GET"): run_rows,
        ("state", "GET"): run_state,
        ("nested", "GET"): run_nested,
        ("timeline", "GET"): run_timeline,
        ("inspect", "GET"): run_inspect,
        ("answer", "POST"): answer,
        ("fork", "GET"): fork_page,
        ("fork", "POST"): fork_post,
        ("continue", "POST"): continue_post,
        ("replay", "GET"): replay_page,
        ("replay", "POST"): replay_post,
    }

    async def run_route(request: Request) -> Response:
        """Every ``/runs/ID[/ACTION]`` address, the id read whole (see :func:`run_address`)."""
        run_id, action = run_address(request.scope)
        method = "GET" if request.method == "HEAD" else request.method
        endpoint = by_action.get((action, method))
        if endpoint is None:
            allowed = sorted(m for a, m in by_action if a == action)
            raise HTTPException(
                405,
                f"{request.method} is not what /runs/RUN{'/' + action if action else ''} takes; "
                f"use {' or '.join(allowed)}",
                headers={"Allow": ", ".join(allowed)},
            )
        request.scope["path_params"] = {"run_id": run_id}
        return await endpoint(request)

    routes = [
        Route("/", runs_page),
        Route("/fragments/runs", runs_fragment),
        Route("/events/runs", runs_events),
        Route("/diff", diff_view),
        Route("/runs/{rest:path}", run_route, methods=["GET", "POST"]),
        Route("/static/ui.js", script),
        Route("/static/ui.css", style),
        Route("/favicon.ico", icon),
    ]
    app = Starlette(
        routes=routes, exception_handlers=error_handlers(console.masker, _SECURITY_HEADERS)
    )

    app.add_middleware(_Gate, settings=settings)
    app.state.console = console
    return app
