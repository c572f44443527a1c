"""The console's errors as pages, its query values checked, and its run addresses parsed.

Every refusal a route makes (:class:`~starlette.exceptions.HTTPException`, a run or step
the store does not have) and every unexpected exception becomes one small HTML page with
the status and a masked, escaped message: never Starlette's bare text, never a traceback.
The security headers are added by the gate around the app; a 500 is answered by
Starlette's outermost middleware, past the gate, so its page carries them itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from html import escape
from typing import Final
from urllib.parse import unquote

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.types import Scope

from stargraph.errors import RunNotFoundError
from stargraph.ui._mask import Masker
from stargraph.ui._pages import layout

__all__ = ["RUN_ACTIONS", "error_handlers", "error_page", "int_param", "run_address"]

_log = logging.getLogger("stargraph.ui")

_TITLES: Final = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    500: "Internal error",
}


def error_page(status: int, message: str) -> str:
    """A whole page saying ``status`` and ``message`` (already masked)."""
    title = _TITLES.get(status, "Error")
    body = (
        f'<h1 class="error">{status} {escape(title)}</h1>'
        f'<p id="error">{escape(message, quote=False)}</p>'
        '<p><a href="/">back to the runs</a></p>'
    )
    return layout(f"stargraph: {status} {title}", body)


def error_handlers(
    masker: Masker, security_headers: Iterable[tuple[bytes, bytes]]
) -> dict[type[Exception] | int, Callable[[Request, Exception], Awaitable[Response]]]:
    """Starlette ``exception_handlers`` answering every error with :func:`error_page`."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in security_headers}

    async def http_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            status, detail = exc.status_code, str(exc.detail)
            extra = dict(exc.headers or {})
        else:  # a run the store does not have
            status, detail, extra = 404, f"{exc}", {}
        return HTMLResponse(error_page(status, masker.text(detail)), status, headers=extra)

    async def server_error(request: Request, exc: Exception) -> Response:
        # Logged here, shown nowhere: a traceback may quote state, secrets included.
        _log.error("console: %s %s failed", request.method, request.url.path, exc_info=exc)
        message = (
            f"the console failed on {request.url.path} ({type(exc).__name__}); the details "
            "are in the console's log (set STARGRAPH_UI_LOG=info to see more)"
        )
        return HTMLResponse(error_page(500, masker.text(message)), 500, headers=headers)

    return {
        HTTPException: http_error,
        RunNotFoundError: http_error,
        Exception: server_error,
    }


def int_param(
    request: Request, name: str, default: int | None, *, high: int | None = None
) -> int | None:
    """The query value ``name`` as a whole number from 0 (up to ``high``), ``default`` when
    absent; a 400 page names the value and the range otherwise."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    top = "" if high is None else f" up to {high}"
    if not raw.isascii() or not raw.isdigit():
        raise HTTPException(400, f"?{name}={raw!r} is not a whole number; use 0{top}")
    value = int(raw)
    if high is not None and value > high:
        raise HTTPException(400, f"?{name}={value} is out of range; use 0{top}")
    return value


RUN_ACTIONS: Final = frozenset(
    {
        "events",
        "rows",
        "state",
        "nested",
        "timeline",
        "inspect",
        "answer",
        "fork",
        "continue",
        "replay",
    }
)
"""What may follow a run's id in ``/runs/ID/ACTION``."""


def run_address(scope: Scope) -> tuple[str, str]:
    """``(run id, action)`` of a ``/runs/...`` request (action ``""``: the run's page).

    Read from the raw path: the pages link to ``/runs/`` + the id with every ``/`` encoded,
    and the decoded path would no longer tell ``/runs/a%2Frows`` (the page of run
    ``a/rows``) from ``/runs/a/rows`` (the rows of run ``a``). An address typed with the
    id's slashes as they are opens the run whose id is all of it, unless its last part is
    an action.
    """
    raw: bytes | None = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else scope["path"]
    rest = path.split("/runs/", 1)[1] if "/runs/" in path else ""
    head, sep, tail = rest.rpartition("/")
    if sep and head and tail in RUN_ACTIONS:
        rest = head
    else:
        tail = ""
    # Without a raw path (a server that gives none) the path is decoded already.
    return (unquote(rest, errors="replace") if raw else rest), tail
