"""``stargraph mcp serve``: graphs as the tools of an MCP server.

Each GRAPH argument becomes one MCP tool, named after the graph: its input schema is the
graph's input model (else its state), its output schema the output model (else the state).
A call is a durable run in the ``--db`` store: a progress notification per finished step,
the client's cancellation cancels the run (at a step boundary), and a run that stops at an
interrupt asks the client through MCP elicitation when the client supports it; otherwise
(or when elicitation fails) the call returns an error result (it has no output yet) saying
the run waits and how to answer it: with the tool ``stargraph_resume`` (``run_id``,
``response``). Over stdio by default,
or streamable HTTP with ``--http HOST:PORT``.

The ``mcp`` package (``pip install 'stargraph[mcp]'``) is imported only by this command.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import click
import orjson

from stargraph.cli._load import (
    DEFAULT_DB,
    CliError,
    CliUsageError,
    compile_target,
    load_target,
    open_store,
    resolve_db,
)
from stargraph.errors import RunCancelledError, StargraphError

if TYPE_CHECKING:
    from stargraph.runtime import CompiledGraph

__all__ = ["mcp_group"]

RESUME_TOOL: Final = "stargraph_resume"
_NAME_BAD: Final = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class _Served:
    """One graph as an MCP tool."""

    name: str
    app: CompiledGraph[Any]
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]

    def output(self, run_id: str) -> dict[str, Any]:
        """What a finished run hands back, as JSON."""
        from stargraph.runtime._schemas import graph_output

        state = self.app.get_state(run_id)
        plan = self.app.plan
        if plan.output_model is not None or plan.private:
            state = graph_output(state, plan.output_model, plan.private)
        dumped: dict[str, Any] = state.model_dump(mode="json")
        return dumped


def _served(app: CompiledGraph[Any]) -> _Served:
    name = _NAME_BAD.sub("_", app.ir.name).strip("_") or "graph"
    plan = app.plan
    model = plan.input_model or app.state_model
    output = plan.output_model or app.state_model
    description = f"Run the stargraph graph {app.ir.name!r} ({app.graph_hash[:12]}) to its end."
    return _Served(name, app, description, _object(model), _object(output))


def _object(model: Any) -> dict[str, Any]:
    schema: dict[str, Any] = model.model_json_schema()
    schema.setdefault("type", "object")
    return schema


def build_server(served: dict[str, _Served]) -> Any:
    """The low-level MCP ``Server`` exposing ``served`` (name -> graph) and the resume tool."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    from stargraph import __version__

    resume_tool = types.Tool(
        name=RESUME_TOOL,
        description="Answer the interrupt a stargraph run waits at, and continue the run.",
        input_schema={
            "type": "object",
            "properties": {
                "run_id": {"type": "string", "description": "The waiting run."},
                "response": {"description": "The answer (any JSON value)."},
            },
            "required": ["run_id", "response"],
        },
    )

    async def list_tools(_ctx: Any, _params: Any) -> Any:
        tools = [
            types.Tool(
                name=one.name,
                description=one.description,
                input_schema=one.input_schema,
                output_schema=one.output_schema,
            )
            for one in served.values()
        ]
        return types.ListToolsResult(tools=[*tools, resume_tool])

    async def call_tool(ctx: Any, params: Any) -> Any:
        args = dict(params.arguments or {})
        if params.name == RESUME_TOOL:
            run_id = str(args.get("run_id", ""))
            one = next((s for s in served.values() if _holds(s.app, run_id)), None)
            if one is None:
                return _error(f"no waiting run {run_id!r} in this server's store")
            return await _drive(ctx, one, run_id, ("resume", args.get("response")))
        chosen = served.get(params.name)
        if chosen is None:
            return _error(f"no graph {params.name!r}; this server serves {sorted(served)}")
        run_id = f"mcp-{secrets.token_hex(6)}"
        return await _drive(ctx, chosen, run_id, ("start", args))

    return Server(
        "stargraph",
        version=__version__,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _holds(app: CompiledGraph[Any], run_id: str) -> bool:
    try:
        return app.get_run(run_id).graph_hash == app.graph_hash
    except StargraphError:
        return False


def _error(text: str) -> Any:
    import mcp_types as types

    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


async def _drive(ctx: Any, served: _Served, run_id: str, how: tuple[str, Any]) -> Any:
    """Run (or resume) on a thread; report each step; cancel the run with the request."""
    loop = asyncio.get_running_loop()
    progress: list[int] = [0]

    def report(step: int) -> None:
        progress[0] += 1
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody listens
            asyncio.run_coroutine_threadsafe(
                ctx.session.report_progress(progress[0], None, f"step {step} committed"), loop
            )

    while True:
        outcome = loop.run_in_executor(None, _run, served.app, run_id, how, report)
        try:
            kind, payload = await asyncio.shield(outcome)
        except asyncio.CancelledError:
            # The client cancelled the call: the run stops after its current step.
            served.app.cancel(run_id, reason="the MCP client cancelled the call")
            with contextlib.suppress(BaseException):
                await outcome
            raise
        if kind == "done":
            return _result(served.output(run_id), run_id)
        if kind == "error":
            return _error(str(payload))
        answer = await _elicit(ctx, served, run_id, payload)
        if answer is _NO_ANSWER:
            return _waiting(served, run_id, payload)
        how = ("resume", answer)


_NO_ANSWER: Final[Any] = object()


def _run(
    app: CompiledGraph[Any], run_id: str, how: tuple[str, Any], report: Callable[[int], None]
) -> tuple[str, Any]:
    """Drive the run to its end or an interrupt: ``("done"|"interrupted"|"error", ...)``."""
    verb, value = how
    try:
        events = (
            app.stream(value, run_id=run_id)
            if verb == "start"
            else app.resume_stream(run_id, response=value)
        )
        for event in events:
            if event.kind == "step_completed":
                report(event.step)
            elif event.kind == "run_interrupted":
                from stargraph.runtime import Interrupt

                waiting = Interrupt.read(event.payload, run_id=run_id)
                return "interrupted", waiting.payload if waiting is not None else event.payload
    except RunCancelledError as exc:
        return "error", f"run {run_id} was cancelled: {exc}"
    except StargraphError as exc:
        return "error", f"run {run_id} failed: {exc}"
    return "done", None


def _result(output: dict[str, Any], run_id: str) -> Any:
    import mcp_types as types

    text = orjson.dumps(output).decode()
    return types.CallToolResult(
        content=[types.TextContent(text=text)],
        structured_content=output,
        meta={"stargraph/run_id": run_id},
    )


def _waiting(served: _Served, run_id: str, payload: Any) -> Any:
    import mcp_types as types

    waiting = {
        "status": "interrupted",
        "run_id": run_id,
        "graph": served.name,
        "payload": payload,
        "how_to_answer": f"call {RESUME_TOOL} with run_id={run_id!r} and your response",
    }
    # Not the graph's output (which its output schema describes): the call did not finish,
    # and says so, with how to go on.
    return types.CallToolResult(
        content=[types.TextContent(text=orjson.dumps(waiting).decode())],
        is_error=True,
        meta={"stargraph/run_id": run_id, "stargraph/interrupted": True},
    )


async def _elicit(ctx: Any, served: _Served, run_id: str, payload: Any) -> Any:
    """The client's answer to the interrupt, by elicitation; ``_NO_ANSWER`` when the client
    cannot elicit or declines."""
    import mcp_types as types

    capabilities = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    if not ctx.session.check_client_capability(capabilities):
        return _NO_ANSWER
    message = (
        f"stargraph run {run_id} ({served.name}) waits for an answer: "
        f"{orjson.dumps(payload).decode()}"
    )
    schema = {
        "type": "object",
        "properties": {
            "response": {"type": "string", "description": "Your answer (JSON or text)."}
        },
        "required": ["response"],
    }
    try:
        answer = await ctx.session.elicit_form(message, schema, ctx.request_id)
    except Exception:  # no back channel, or the client refused the request
        return _NO_ANSWER
    if answer.action != "accept" or not answer.content:
        return _NO_ANSWER
    if "response" not in answer.content:
        # A client that filled in a form of its own: its fields are the answer (the run
        # would otherwise go on with None, as if it had been answered with nothing).
        return dict(answer.content)
    text = answer.content.get("response")
    if not isinstance(text, str):
        return text
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


@click.group("mcp")
def mcp_group() -> None:
    """Model Context Protocol: serve graphs as MCP tools."""


@mcp_group.command("serve")
@click.argument("graphs", nargs=-1, required=True)
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option("--http", "http", default=None, help="Serve streamable HTTP on HOST:PORT.")
def serve_command(graphs: tuple[str, ...], db: str, http: str | None) -> None:
    """Serve each GRAPH as an MCP tool (stdio, or streamable HTTP with --http)."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise CliError(
            "stargraph mcp serve needs the MCP SDK: pip install 'stargraph[mcp]'"
        ) from exc
    with _apps(graphs, db) as served:
        server = build_server(served)
        if http is None:
            asyncio.run(_stdio(server))
            return
        host, _, port = http.rpartition(":")
        if not host or not port.isdigit():
            raise CliUsageError(f"--http {http!r}: give HOST:PORT, e.g. 127.0.0.1:8765")
        _serve_http(server, host, int(port))


@contextlib.contextmanager
def _apps(graphs: tuple[str, ...], db: str) -> Iterator[dict[str, _Served]]:
    with open_store(db, must_exist=False) as store:
        served: dict[str, _Served] = {}
        for spec in graphs:
            one = _served(compile_target(load_target(spec), store=store))
            if one.name in served or one.name == RESUME_TOOL:
                raise CliUsageError(f"two graphs would be served as the tool {one.name!r}")
            served[one.name] = one
        yield served


async def _stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def _serve_http(server: Any, host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    # Listening before the line is printed: whoever reads it can connect at once (the
    # backlog holds connections until uvicorn accepts them), and a taken port is an error
    # here rather than after a line that said all was well.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host, port), family=family)
    except OSError as exc:
        raise CliUsageError(
            f"--http {host}:{port}: cannot listen there: {exc.strerror or exc} "
            "(fix: choose a free port, or a host this machine has)"
        ) from exc
    with listener:
        click.echo(f"stargraph mcp: serving on http://{host}:{port}/mcp", err=True)
        uvicorn.Server(config).run(sockets=[listener])
