"""``stargraph serve``: graphs behind the HTTP API of :mod:`stargraph.serve`, on uvicorn."""

from __future__ import annotations

import os
from typing import Any

import click

from stargraph.cli._load import DEFAULT_DB, CliError, CliUsageError, load_target, resolve_db
from stargraph.errors import UsageError

__all__ = ["serve_command"]


@click.command(
    "serve",
    epilog="""\b
Examples:
  stargraph serve triage.py                          # http://127.0.0.1:2024, SQLite runs
  stargraph serve triage.py chat.py --workers 4 --port 8123
  stargraph serve myapp.flows:graph --postgres postgresql://app@db/app --workers 2
  stargraph serve triage.py --host 0.0.0.0 --token "$(openssl rand -hex 16)"
""",
)
@click.argument("graphs", nargs=-1, required=True)
@click.option(
    "--db",
    default=DEFAULT_DB,
    callback=resolve_db,
    show_default=True,
    help="SQLite file of the runs (or a postgresql:// DSN).",
)
@click.option("--postgres", metavar="DSN", help="Keep the runs in PostgreSQL instead (a DSN).")
@click.option("--schema", default="stargraph", show_default=True, help="PostgreSQL schema.")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Threads running the runs (0: other servers on the same PostgreSQL run them).",
)
@click.option(
    "--lease",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    help="Seconds without a heartbeat after which another server takes a run over.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=2024, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token",
    envvar="STARGRAPH_SERVE_TOKEN",
    help="Bearer token every request must carry (required for a non-loopback --host).",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    help="An origin browsers may call the API from (none by default). Repeatable.",
)
@click.option(
    "--max-body",
    type=click.IntRange(min=1024),
    default=1 << 20,
    show_default=True,
    help="Largest request body accepted, in bytes.",
)
def serve_command(
    *,
    graphs: tuple[str, ...],
    db: str,
    postgres: str | None,
    schema: str,
    workers: int,
    lease: float,
    host: str,
    port: int,
    token: str | None,
    cors_origins: tuple[str, ...],
    max_body: int,
) -> None:
    """Serve GRAPHS over HTTP: LangGraph Platform's API (assistants, threads, runs,
    streaming, interrupts) and the Agent Protocol's store, which `langgraph-sdk`'s client
    and `stargraph.client` speak. Each graph is an assistant named after the graph.

    Runs are durable: a server killed mid-run leaves its runs to the next server started on
    the same database, which resumes them from their last committed step, and a stream
    reconnecting with Last-Event-ID continues where it left off. The OpenAPI document is at
    /openapi.json.
    """
    try:
        import uvicorn

        from stargraph.serve import ServeSettings, create_app
    except ImportError as exc:
        raise CliError(
            f"stargraph serve needs the ui extra ({exc.name} is missing): "
            "pip install 'stargraph[ui]'"
        ) from exc
    loaded: list[Any] = []
    for spec in graphs:
        target = load_target(spec)
        loaded.append(target.compiled or target.graph or _from_ir(target))
    settings = ServeSettings(host=host, token=token, cors_origins=cors_origins, max_body=max_body)
    try:
        app = create_app(
            loaded,
            postgres or db,
            settings=settings,
            workers=workers,
            lease_s=lease,
            schema=schema,
        )
    except UsageError as exc:
        raise CliUsageError(str(exc)) from exc
    shown = f"[{host}]" if ":" in host else host
    names = ", ".join(app.state.api.graphs)
    click.echo(f"stargraph serve: http://{shown}:{port} ({names}; Ctrl+C stops it)", err=True)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=os.environ.get("STARGRAPH_SERVE_LOG", "warning"),
        timeout_graceful_shutdown=3,
        lifespan="on",
    )
    uvicorn.Server(config).run()


def _from_ir(target: Any) -> Any:
    from stargraph.graph import Graph

    return Graph(target.ir)
