"""Shared plumbing of the example services: a local HTTP server on 127.0.0.1 and the JSON
HTTP client the networked tools use.

The fakes are real servers on loopback, not in-process stubs, so each tool's request really
crosses a socket with the wire format of the service it stands for (Brave Search, Notion,
a web page) and its credentials in the headers the real service expects.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Self, TypeVar
from urllib.parse import parse_qs, urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from stargraph._lifecycle import ServerThread, Started
from stargraph._typed import validate_raw
from stargraph.errors import (
    ServiceNotStartedError,
    ToolArgumentError,
    ToolError,
    ToolTimeoutError,
)
from stargraph.tools._host import HostRequest
from stargraph.tools._spec import SideEffect
from stargraph.tools._tool import PythonTool, ToolContext, tool

__all__ = [
    "FROZEN",
    "HttpAnswer",
    "HttpRequest",
    "LocalHTTPServer",
    "http_json",
    "keyed_network_tool",
    "parse_host_args",
    "required_secret",
]

FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
"""The ``model_config`` the built-ins' argument and record models share: frozen, unknown
fields refused."""

_BODY_LIMIT: Final = 4_000_000
_M = TypeVar("_M", bound=BaseModel)


def parse_host_args(model: type[_M], request: HostRequest) -> _M:
    """``request.args`` as ``model``. A host validates again: something other than our
    arbiter may reach it. Bad arguments raise :class:`ToolArgumentError`."""
    try:
        return validate_raw(model, request.args)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<arguments>'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
        raise ToolArgumentError(
            f"tool {request.tool!r}: the host refused the arguments: {problems}",
            node=request.node,
        ) from None


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request a local server received."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: bytes = b""

    def json(self) -> Any:
        """The body as JSON (``None`` when empty or not JSON)."""
        if not self.body:
            return None
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """What a local server sends back."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, status: int, value: Any) -> HttpAnswer:
        """A JSON answer."""
        return cls(status, orjson.dumps(value))


class _Server(ThreadingHTTPServer):
    # Handler threads are joined on close, so no thread outlives the server.
    daemon_threads = False
    block_on_close = True
    owner: LocalHTTPServer


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10  # a client that connects and never sends a request

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the servers keep what they saw in ``requests``."""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, _BODY_LIMIT)) if length else b""
        url = urlsplit(self.path)
        request = HttpRequest(
            method=self.command,
            path=url.path,
            query=parse_qs(url.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        owner = self.server.owner
        with owner._lock:
            owner.requests.append(request)
        try:
            answer = owner.answer(request)
        except Exception as exc:  # a bug in a fake must show up as a 500, not a hang
            answer = HttpAnswer.of_json(500, {"error": f"{type(exc).__name__}: {exc}"})
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(answer.body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its tool timed out)

    def do_GET(self) -> None:
        """Answer a GET."""
        self._serve()

    def do_POST(self) -> None:
        """Answer a POST."""
        self._serve()


class LocalHTTPServer(Started):
    """An HTTP server on an ephemeral port of 127.0.0.1, answering from :meth:`answer`.

    Use it as a context manager. Every request is kept in :attr:`requests`.
    """

    def __init__(self) -> None:
        self.requests: list[HttpRequest] = []
        """Every request received, in arrival order."""
        self._lock = threading.Lock()
        self._serving: ServerThread | None = None

    def answer(self, request: HttpRequest) -> HttpAnswer:
        """The answer to ``request`` (subclasses override it)."""
        return HttpAnswer.of_json(404, {"error": f"no route for {request.method} {request.path}"})

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (the server must be started)."""
        if self._serving is None:
            raise ServiceNotStartedError(
                f"{type(self).__name__} is not started; use it in a with block (or start())"
            )
        return f"http://127.0.0.1:{self._serving.port}"

    def start(self) -> Self:
        """Bind the port and serve in a background thread."""
        if self._serving is None:
            httpd = _Server(("127.0.0.1", 0), _Handler)
            httpd.owner = self
            self._serving = ServerThread(httpd, name=type(self).__name__)
        return self

    def close(self) -> None:
        """Stop serving and join every thread."""
        if self._serving is not None:
            self._serving.stop()  # handlers still running may read self.url until joined
            self._serving = None


def required_secret(ctx: ToolContext, name: str) -> str:
    """The call's secret ``name`` (one of the tool's ``secret_resources``); a ToolError
    saying how to give it to the arbiter when it is missing or empty."""
    value = ctx.secrets.get(name)
    if not value:
        raise ToolError(
            f"tool {ctx.tool!r} needs the secret {name!r} (fix: Arbiter(secrets={{{name!r}: ...}}))"
        )
    return value


def keyed_network_tool(
    id: str,
    args_model: type[BaseModel],
    secret: str,
    *,
    side_effect: SideEffect = "read",
    idempotent: bool = True,
    timeout_s: float = 20,
) -> Callable[[Callable[..., Any]], PythonTool]:
    """The ``@tool`` of a built-in that calls a remote service with one credential,
    ``secret`` (read it with :func:`required_secret`); by default an idempotent read
    within 20 s."""
    return tool(
        id=id,
        side_effect=side_effect,
        network=True,
        idempotent=idempotent,
        timeout_s=timeout_s,
        secret_resources=(secret,),
        args_model=args_model,
    )


def http_json(
    ctx: ToolContext,
    url: str,
    *,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    body: Any = None,
    service: str,
) -> Any:
    """Send one JSON request within the call's remaining time; the decoded JSON answer.

    Non-2xx answers, unreachable services, timeouts and non-JSON answers raise typed tool
    errors naming the tool, the service and the status (never the request headers, which
    carry credentials).
    """
    data = orjson.dumps(body) if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    remaining = ctx.remaining()
    if remaining <= 0:
        raise ToolTimeoutError(f"tool {ctx.tool!r}: no time left to call {service}")
    try:
        with urllib.request.urlopen(request, timeout=remaining) as response:
            raw = response.read(_BODY_LIMIT)
    except urllib.error.HTTPError as exc:
        with exc:
            detail = exc.read(500).decode(errors="replace")
        raise ToolError(
            f"tool {ctx.tool!r}: {service} answered HTTP {exc.code}: {detail or exc.reason}"
        ) from None
    except TimeoutError:
        raise ToolTimeoutError(
            f"tool {ctx.tool!r}: {service} did not answer within {remaining:.1f}s"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):  # the connect timed out
            raise ToolTimeoutError(
                f"tool {ctx.tool!r}: {service} did not answer within {remaining:.1f}s"
            ) from None
        raise ToolError(f"tool {ctx.tool!r}: cannot reach {service}: {reason}") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ToolError(f"tool {ctx.tool!r}: {service} answered with invalid JSON: {exc}") from None
