"""MCP servers as tool sources: :class:`McpServer`, its tools and its pinned listing.

A Model Context Protocol server (a local command over stdio, or a URL over streamable HTTP)
lists tools; each becomes an :class:`McpTool`, a ``ToolSpec`` whose id is
``mcp.<server>.<tool>@<server version>`` and whose runtime view is read from the tool's
annotations (MCP's defaults where a hint is missing):

* ``readOnlyHint`` -> side effect ``read`` and a shared lock ``mcp:<server>:S``; otherwise an
  exclusive ``mcp:<server>:X``;
* ``destructiveHint`` (on a tool that is not read-only) or ``openWorldHint`` -> side effect
  ``external``: every call gets an audit record in the commit log (``openWorldHint`` also
  sets ``network``);
* ``idempotentHint`` -> ``idempotent``.

Any of it can be overridden per tool (``McpServer(..., overrides={"write_file": {...}})``).
The calls run through the arbiter like any tool's: argument validation (the server's input
schema translated once, at listing), locks, the tool's timeout (on which the MCP request is
cancelled), the commit log and the task's journal, so a resumed run is served the calls it
finished and a replay never starts the server.

What a server lists is untrusted text that reaches the model: it is parsed and validated once
(:class:`McpListing`), and a listing can be pinned (``McpServer(..., listing=...)``): its tools
are then built without starting the server, and the server's live listing must match it
byte for byte, or the first call is refused with :class:`~stargraph.errors.McpServerError`.

The server is started lazily (at the first listing or call), restarted once after it exits,
and closed with the arbiter (or :meth:`McpServer.close`). A ``tools/list_changed``
notification marks it changed; a registry built from it is refreshed between steps.

The ``mcp`` package (``pip install 'stargraph[mcp]'``) is imported only when a server starts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import orjson
from pydantic import ConfigDict, Field, JsonValue

from stargraph._typed import TypedModel
from stargraph.errors import McpServerError, Problem, ToolError, ToolSpecError, ToolTimeoutError
from stargraph.tools._canonical import canonical_json, sha256_hex
from stargraph.tools._result import ToolFailure, ToolOutput
from stargraph.tools._schema import ValidatedArgs, model_from_json_schema
from stargraph.tools._spec import ID_RE, ToolSpec
from stargraph.tools._tool import SpecTool, ToolContext

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["McpListing", "McpServer", "McpTool", "McpToolInfo"]

logger = logging.getLogger("stargraph.tools")

_SEGMENT_BAD: Final = re.compile(r"[^a-z0-9_-]+")
_CAMEL: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEMVER_PREFIX: Final = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?")
# Description text is the server's, shown to the model: bounded so one server cannot flood
# every prompt, and checked once here rather than at each request.
_DESCRIPTION_LIMIT: Final = 8192
_STDERR_TAIL: Final = 2000
_OVERRIDABLE: Final = frozenset(
    {"side_effect", "locks", "timeout_s", "idempotent", "network", "exposure", "prompt_mask"}
)


def _segment(text: str, fallback: str) -> str:
    """``text`` as one segment of a canonical tool name: ``getTinyImage`` ->
    ``get_tiny_image``, ``get-sum`` stays."""
    snake = _CAMEL.sub("_", text).lower()
    cleaned = _SEGMENT_BAD.sub("_", snake)
    cleaned = re.sub(r"[_-]{2,}", "_", cleaned).strip("_-")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"{fallback}_{cleaned}".strip("_-")
    return cleaned


def _semver(version: str | None) -> str:
    """The server's version as SemVer (``1.2`` -> ``1.2.0``; no version -> ``0.0.0``)."""
    if version and ID_RE.match(f"a.b@{version}"):
        return version
    match = _SEMVER_PREFIX.match(version or "")
    if match is None:
        return "0.0.0"
    return ".".join(str(int(part or 0)) for part in match.groups())


class McpToolInfo(TypedModel):
    """One tool as an MCP server listed it, validated (its text is untrusted)."""

    typed_error = ToolSpecError
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="The server's tool name.")
    description: str = Field(max_length=_DESCRIPTION_LIMIT, description="For the model.")
    input_schema: dict[str, JsonValue] = Field(description="The arguments' JSON Schema.")
    output_schema: dict[str, JsonValue] | None = Field(None, description="Structured result.")
    read_only: bool | None = Field(None, description="readOnlyHint.")
    destructive: bool | None = Field(None, description="destructiveHint.")
    idempotent: bool | None = Field(None, description="idempotentHint.")
    open_world: bool | None = Field(None, description="openWorldHint.")


class McpListing(TypedModel):
    """What one MCP server lists, frozen: pin it (``McpServer(..., listing=...)``) to run
    without starting the server to list, and to refuse a server whose tools changed.

    Save it with ``model_dump_json()`` and load it with ``McpListing.model_validate_json``.
    """

    typed_error = ToolSpecError
    model_config = ConfigDict(frozen=True, extra="forbid")

    server: str = Field(description="The server's name in tool ids (``mcp.<server>.*``).")
    version: str = Field(description="The server's version, as SemVer.")
    tools: tuple[McpToolInfo, ...] = Field(description="Every tool, in the server's order.")

    @property
    def digest(self) -> str:
        """sha256 over the whole listing: any changed description or schema changes it."""
        return sha256_hex(canonical_json(self.model_dump(mode="json")))


class McpTool(SpecTool):
    """One tool of an MCP server, run by the arbiter through the server's session."""

    __slots__ = ("info", "server")

    bounds_own_deadline: Final = True
    """The arbiter runs it on the calling thread: :meth:`execute` only waits for the
    server's session thread, never past the call's deadline, and cancels the request at it."""

    def __init__(self, spec: ToolSpec, arguments: Any, server: McpServer, info: McpToolInfo):
        super().__init__(spec, arguments, source=f"mcp:{server.label}:{info.name}")
        self.server = server
        """The server the tool runs on."""
        self.info = info
        """The tool as the server listed it."""

    def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Call the tool on its server (started if need be) within the call's deadline."""
        result = self.server.call(self.info.name, args.json, timeout_s=ctx.remaining())
        return _output(self.spec.id, result, ctx)


class McpServer:
    """An MCP server whose tools an agent may call through the arbiter.

    Give ``command`` (a program speaking MCP on stdio, with ``env`` added to a minimal
    environment and ``cwd``) or ``url`` (a streamable HTTP endpoint, with ``headers``).
    ``name`` is the server's segment in tool ids (default: from the name it reports).
    ``timeout_s`` is each tool's timeout and ``overrides`` changes a tool's runtime view by
    its MCP name (``{"write_file": {"locks": ["file:{path}:X"]}}``). ``listing`` pins what
    the server lists (see :class:`McpListing`). A tool whose input schema uses a keyword the
    argument validator cannot check is left out and logged (:attr:`skipped`); with
    ``strict=True`` it raises :class:`~stargraph.errors.ToolSpecError`.

    Register it with ``ToolRegistry.build(mcp=[server])`` or pass :meth:`tools` as tools.
    """

    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        timeout_s: float = 30.0,
        startup_timeout_s: float = 30.0,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        listing: McpListing | None = None,
        strict: bool = False,
    ) -> None:
        problems: list[Problem] = []
        if (command is None) == (url is None):
            problems.append(
                Problem(
                    "McpServer",
                    "give exactly one of command= (stdio) and url= (streamable HTTP)",
                    "McpServer(command=['mcp-server-time']) or McpServer(url='http://host/mcp')",
                )
            )
        if command is not None and (isinstance(command, str) or not command):
            problems.append(
                Problem("McpServer#/command", "command must be a non-empty list of strings")
            )
        if url is None and headers:
            problems.append(Problem("McpServer#/headers", "headers= needs url="))
        if command is None and (env or cwd):
            problems.append(Problem("McpServer#/env", "env= and cwd= need command="))
        if name is not None and _segment(name, "server") != name:
            problems.append(
                Problem(
                    "McpServer#/name",
                    f"name {name!r} is not a tool-id segment",
                    f"use {_segment(name, 'server')!r}",
                )
            )
        for tool_name, fields in (overrides or {}).items():
            unknown = sorted(set(fields) - _OVERRIDABLE)
            if unknown:
                problems.append(
                    Problem(
                        f"McpServer#/overrides/{tool_name}",
                        f"cannot override {unknown}",
                        f"override only {sorted(_OVERRIDABLE)}",
                    )
                )
        if problems:
            raise ToolSpecError(problems, subject="MCP server")
        self.command = tuple(command) if command is not None else None
        self.env = dict(env or {})
        self.cwd = str(cwd) if cwd is not None else None
        self.url = url
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.overrides = {k: dict(v) for k, v in (overrides or {}).items()}
        self.pinned = listing
        self.strict = strict
        #: Tools left out by the last :meth:`tools` (MCP name -> why), e.g. a schema keyword
        #: the argument validator does not check; ``strict=True`` raises instead.
        self.skipped: dict[str, str] = {}
        self._name = name or (listing.server if listing is not None else None)
        self._listing: McpListing | None = None
        self._client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._holder: Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stderr: IO[bytes] | None = None
        self._lock = threading.RLock()
        self._starts = 0
        self._crashed = False
        self._changed = threading.Event()
        self._closed = False

    # ----------------------------------------------------------------------- naming

    @property
    def label(self) -> str:
        """The server's segment in tool ids (known once given, pinned or listed)."""
        return self._name or "?"

    @property
    def target(self) -> str:
        """The command line or URL, for messages."""
        return " ".join(self.command) if self.command is not None else str(self.url)

    def __repr__(self) -> str:
        return f"McpServer({self.label!r}, {self.target!r})"

    @property
    def started(self) -> bool:
        """Whether the server process or session is running now."""
        return self._client is not None

    @property
    def starts(self) -> int:
        """How many times the server was started (a restart after a crash counts)."""
        return self._starts

    @property
    def changed(self) -> bool:
        """Whether the server said its tool list changed since it was last listed."""
        return self._changed.is_set()

    # ----------------------------------------------------------------------- listing

    def listing(self) -> McpListing:
        """What the server lists now (starting it if need be), parsed and validated."""
        with self._lock:
            self._ensure_started()
            if self._listing is None or self._changed.is_set():
                self._changed.clear()
                self._listing = self._run(self._list(), self.startup_timeout_s)
            return self._listing

    def tools(self) -> tuple[McpTool, ...]:
        """The server's tools as stargraph tools: from the pinned listing when there is
        one (the server is not started), else from :meth:`listing`."""
        listing = self.pinned if self.pinned is not None and not self.changed else None
        if listing is None:
            listing = self.listing()
        made: list[McpTool] = []
        skipped: dict[str, str] = {}
        problems: list[Problem] = []
        for info in listing.tools:
            try:
                made.append(self._tool(listing, info))
            except ToolSpecError as exc:
                problems += exc.problems
                skipped[info.name] = str(exc)
        if problems and self.strict:
            raise ToolSpecError(problems, subject=f"MCP server {self!r}")
        for name, reason in skipped.items():
            logger.warning("MCP tool %r of %r left out: %s", name, self, reason)
        self.skipped = skipped
        return tuple(made)

    def _tool(self, listing: McpListing, info: McpToolInfo) -> McpTool:
        tool_id = f"mcp.{listing.server}.{_segment(info.name, 't')}@{listing.version}"
        where = f"MCP tool {info.name!r} of {self!r} ({tool_id})"
        arguments = model_from_json_schema(info.input_schema, name=tool_id, source=where)
        read_only = bool(info.read_only)
        # MCP's defaults: a tool that is not read-only may be destructive, and any tool may
        # reach an open world, unless its annotations say otherwise.
        destructive = not read_only and info.destructive is not False
        open_world = info.open_world is not False
        view: dict[str, Any] = {
            "side_effect": "external"
            if destructive or open_world
            else ("read" if read_only else "write"),
            "locks": (f"mcp:{listing.server}:{'S' if read_only else 'X'}",),
            "idempotent": bool(info.idempotent),
            "network": open_world,
            "timeout_s": self.timeout_s,
        }
        view.update(self.overrides.get(info.name, {}))
        if "locks" in view:
            view["locks"] = tuple(view["locks"])
        spec = ToolSpec(
            id=tool_id,
            description=info.description or f"MCP tool {info.name} of server {listing.server}.",
            input_schema=arguments.json_schema,
            **view,
        )
        return McpTool(spec, arguments, self, info)

    # ----------------------------------------------------------------------- calls

    def call(self, tool: str, args: Mapping[str, Any], *, timeout_s: float) -> Any:
        """Call ``tool`` (its MCP name) with ``args``; return the SDK's ``CallToolResult``.

        The request is cancelled (MCP ``notifications/cancelled``) when ``timeout_s``
        passes, and :class:`ToolTimeoutError` raised. A server that exited is started again
        once; exiting again raises :class:`McpServerError`.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        with self._lock:
            client = self._ensure_started()
        try:
            return self._run(
                client.call_tool(tool, dict(args), read_timeout_seconds=max(timeout_s, 0.001)),
                timeout_s + 5.0,
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolTimeoutError(
                    f"MCP tool {tool!r} of {self!r} ran longer than {timeout_s:.3g}s; the "
                    "request was cancelled (fix: raise its timeout_s with "
                    f"McpServer(timeout_s=...) or overrides={{{tool!r}: {{'timeout_s': ...}}}})"
                ) from None
            if exc.code == CONNECTION_CLOSED:
                self._lost()
                raise McpServerError(
                    f"MCP server {self!r} exited during a call of {tool!r}: "
                    f"{self._stderr_tail() or '<no stderr>'} (fix: the call may or may not "
                    "have run; the server is started again for the next call, once)"
                ) from None
            raise McpServerError(
                f"MCP server {self!r} refused the call of {tool!r}: {exc} "
                "(fix: check the tool's name and arguments against the server's listing)"
            ) from None

    # ----------------------------------------------------------------------- lifecycle

    def _ensure_started(self) -> Client:
        if self._closed:
            raise McpServerError(
                f"MCP server {self!r} was closed with its arbiter (fix: build a new one)"
            )
        if self._client is not None:
            return self._client
        if self._crashed:
            raise McpServerError(
                f"MCP server {self!r} exited again after its one restart; it is not started "
                f"again: {self._stderr_tail() or '<no stderr>'} (fix: repair the server)"
            )
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name=f"stargraph-mcp-{self.label}", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
        self._starts += 1
        ready: Future[Client] = Future()
        self._stop = stop = asyncio.Event()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready, stop), self._loop)
        try:
            client = ready.result(self.startup_timeout_s)
        except BaseException as exc:
            self._teardown()
            raise McpServerError(
                f"MCP server {self!r} did not start: {type(exc).__name__}: {exc}; "
                f"{self._stderr_tail() or '<no stderr>'} (fix: run the command or open the URL "
                "by hand to see why)"
            ) from None
        self._client = client
        if self.pinned is not None:
            self._check_pin()
        return client

    def _check_pin(self) -> None:
        assert self.pinned is not None
        live = self._run(self._list(), self.startup_timeout_s)
        self._listing = live
        if live.digest == self.pinned.digest:
            return
        pinned = {t.name: t for t in self.pinned.tools}
        now = {t.name: t for t in live.tools}
        differ = sorted(n for n in pinned.keys() | now.keys() if pinned.get(n) != now.get(n))
        self.close()
        what = (
            f"version {self.pinned.version} -> {live.version}; "
            if (live.version != self.pinned.version)
            else ""
        )
        raise McpServerError(
            f"MCP server {self!r} lists tools that differ from its pinned listing: {what}"
            f"changed {differ} (fix: review the new descriptions, then pin "
            "server.listing() again)"
        )

    def _lost(self) -> None:
        """The server exited: forget the session; the next call starts it once more."""
        with self._lock:
            self._teardown()
            if self._starts >= 2:
                self._crashed = True

    def _teardown(self) -> None:
        holder, stop, loop = self._holder, self._stop, self._loop
        self._client = None
        self._holder = None
        if stop is not None and loop is not None and holder is not None:
            loop.call_soon_threadsafe(stop.set)
            with contextlib.suppress(BaseException):
                holder.result(timeout=10)

    def close(self) -> None:
        """Stop the server (its process, or the HTTP session) and the thread behind it."""
        with self._lock:
            self._closed = True
            self._teardown()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                loop.close()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None

    def __enter__(self) -> McpServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- async side

    def _run(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise McpServerError(
                f"MCP server {self!r} did not answer within {timeout:.3g}s "
                "(fix: raise startup_timeout_s, or check the server)"
            ) from None

    async def _hold(self, ready: Future[Client], stop: asyncio.Event) -> None:
        """Open the session and keep it open until ``stop``: the SDK's contexts must be
        left by the task that entered them."""
        from mcp import Client

        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = await stack.enter_async_context(
                    Client(transport, message_handler=self._on_message, cache=None)
                )
                if not ready.done():
                    ready.set_result(client)
                listener = asyncio.create_task(self._listen(client))
                try:
                    await stop.wait()
                finally:
                    listener.cancel()
                    with contextlib.suppress(BaseException):
                        await listener
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not isinstance(exc, Exception):
                raise

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        if self.command is not None:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            if self._stderr is None:
                self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
            params = StdioServerParameters(
                command=self.command[0],
                args=list(self.command[1:]),
                env=self.env or None,
                cwd=self.cwd,
            )
            return stdio_client(params, errlog=self._stderr)  # type: ignore[arg-type]
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        assert self.url is not None
        # The transport does not close an HTTP client it was given: the session does.
        http = await stack.enter_async_context(create_mcp_http_client(headers=self.headers or None))
        return streamable_http_client(self.url, http_client=http)

    async def _listen(self, client: Client) -> None:
        """On the 2026 protocol a server announces a changed tool list on a
        ``subscriptions/listen`` stream (before it, as the notification
        :meth:`_on_message` sees)."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        tools = client.server_capabilities.tools
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (
            tools is not None and tools.list_changed
        ):
            return
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._changed.set()
        except Exception:  # a server that drops the stream only loses the refresh
            logger.debug("MCP server %r: no tools/list_changed stream", self, exc_info=True)

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            self._changed.set()

    async def _list(self) -> McpListing:
        client = self._client
        assert client is not None
        infos: list[McpToolInfo] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                hints = tool.annotations
                infos.append(
                    McpToolInfo(
                        name=tool.name,
                        description=(tool.description or "").strip(),
                        input_schema=tool.input_schema,
                        output_schema=tool.output_schema,
                        read_only=hints.read_only_hint if hints else None,
                        destructive=hints.destructive_hint if hints else None,
                        idempotent=hints.idempotent_hint if hints else None,
                        open_world=hints.open_world_hint if hints else None,
                    )
                )
            cursor = page.next_cursor
            if cursor is None:
                break
        info = client.server_info
        if self._name is None:
            reported = (info.name if info is not None else "") or "server"
            self._name = _segment(reported.rpartition("/")[2], "server")
        return McpListing(
            server=self._name,
            version=_semver(info.version if info is not None else None),
            tools=tuple(infos),
        )

    def _stderr_tail(self) -> str:
        handle = self._stderr
        if handle is None:
            return ""
        with contextlib.suppress(ValueError, OSError):
            handle.flush()
            size = handle.seek(0, 2)
            handle.seek(max(0, size - _STDERR_TAIL))
            text = handle.read().decode(errors="replace").strip()
            handle.seek(0, 2)
            return f"it printed: {text}" if text else ""
        return ""


# --------------------------------------------------------------------------- output


def _output(tool_id: str, result: Any, ctx: ToolContext) -> ToolOutput:
    """An MCP ``CallToolResult`` as a tool result: text, structured content and resource
    links in the payload, images, audio and blobs in the artifact store; ``isError`` a
    :class:`ToolError` the model sees as the call's observation."""
    texts: list[str] = []
    resources: list[dict[str, JsonValue]] = []
    artifacts: list[dict[str, JsonValue]] = []
    for block in result.content:
        kind = block.type
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            artifacts.append(_binary(ctx, kind, block.mime_type, block.data))
        elif kind == "resource_link":
            link: dict[str, JsonValue] = {"uri": str(block.uri), "name": block.name}
            if block.mime_type:
                link["mime_type"] = block.mime_type
            if block.description:
                link["description"] = block.description
            resources.append(link)
        elif kind == "resource":
            inner = block.resource
            text = getattr(inner, "text", None)
            if isinstance(text, str):
                texts.append(text)
                resources.append({"uri": str(inner.uri), "embedded": True})
            else:
                entry = _binary(ctx, "blob", inner.mime_type, inner.blob)
                entry["uri"] = str(inner.uri)
                artifacts.append(entry)
    text = "\n".join(texts)
    if result.is_error:
        message = f"MCP tool {tool_id!r} reported an error: {text or '<no text>'}"
        hint = "read the error, fix the arguments or call another tool"
        failure = ToolFailure(
            code="tool_failed",
            tool=tool_id,
            message=message,
            hint=hint,
            details={"mcp_is_error": True},
        )
        raise ToolError(f"{message} (fix: {hint})", failure=failure)
    payload: dict[str, JsonValue] = {}
    if text:
        payload["text"] = text
    if result.structured_content is not None:
        payload["structured"] = result.structured_content
    if resources:
        payload["resources"] = resources  # type: ignore[assignment]
    if artifacts:
        payload["artifacts"] = artifacts  # type: ignore[assignment]
    if text:
        summary = text
    elif result.structured_content is not None:
        summary = orjson.dumps(result.structured_content).decode()
    elif artifacts or resources:
        summary = f"{len(artifacts)} artifact(s), {len(resources)} resource(s)"
    else:
        summary = "ok"
    return ToolOutput(summary=summary, payload=payload or None)


def _binary(ctx: ToolContext, kind: str, mime: str | None, data: str) -> dict[str, JsonValue]:
    raw = base64.b64decode(data)
    entry: dict[str, JsonValue] = {"type": kind, "bytes": len(raw)}
    if mime:
        entry["mime_type"] = mime
    if ctx.artifacts is not None:
        entry["artifact_ref"] = ctx.artifacts.put(raw)
    return entry
