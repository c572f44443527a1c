"""``stargraph ui``: serve the run console (:mod:`stargraph.ui`) over a run database."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import click

from stargraph.cli._load import (
    DEFAULT_DB,
    CliError,
    CliUsageError,
    Target,
    archived_ir,
    archived_target,
    compile_target,
    load_target,
    open_store,
    resolve_db,
)
from stargraph.errors import StargraphError

__all__ = ["ui_command"]


def _is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


@contextlib.contextmanager
def _store(db: str) -> Iterator[Any]:
    if _is_postgres(db):
        try:
            from stargraph.checkpoint import PostgresStore
        except ImportError as exc:
            raise CliError(
                f"--db {db.rsplit('@', maxsplit=1)[-1]} is PostgreSQL, which needs psycopg: "
                "pip install 'stargraph[postgres]'"
            ) from exc
        store: Any = PostgresStore(db)
    else:
        store = open_store(db, must_exist=True)
    try:
        yield store
    finally:
        store.close()


def _secrets_from(names: str) -> dict[str, str]:
    """Name -> value of the environment variables ``names`` (comma-separated) lists."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unset = [n for n in wanted if not os.environ.get(n)]
    if unset:
        raise CliUsageError(
            f"--secrets-from names {', '.join(unset)}, which the environment does not set; "
            "export each variable (its value is what the console masks) or leave it out"
        )
    return {n: os.environ[n] for n in wanted}


@click.command("ui")
@click.option(
    "--db",
    default=DEFAULT_DB,
    callback=resolve_db,
    show_default=True,
    help="SQLite file or postgresql:// URL.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token",
    envvar="STARGRAPH_UI_TOKEN",
    help="Secret every request must carry (required for any non-loopback --host).",
)
@click.option("--read-only", is_flag=True, help="Hide and refuse every action.")
@click.option(
    "--graph",
    "graph_specs",
    multiple=True,
    help="A graph whose runs the console may show and resume (FILE.py[:attr], module:attr, "
    "IR JSON); graphs archived by `stargraph run` are found without it. Repeatable.",
)
@click.option(
    "--secrets-from",
    "secrets_from",
    default="",
    metavar="ENV_NAMES",
    help="Comma-separated environment variables whose values are masked on every page "
    "([redacted:NAME]), besides STARGRAPH_SECRET_* and the graphs' registered secrets.",
)
@click.option(
    "--api",
    default=None,
    metavar="URL",
    help="A `stargraph serve` on the same --db: interrupts of the runs it started are "
    "answered through its API (its workers resume them), with no --graph needed.",
)
@click.option(
    "--api-token",
    envvar="STARGRAPH_API_TOKEN",
    default=None,
    help="The bearer token of the --api server, if it needs one.",
)
def ui_command(
    *,
    db: str,
    host: str,
    port: int,
    token: str | None,
    read_only: bool,
    graph_specs: tuple[str, ...],
    secrets_from: str,
    api: str | None,
    api_token: str | None,
) -> None:
    """Serve the run console in the browser: runs, their graphs and steps, live, with
    approvals.

    \b
    Examples:
      stargraph ui
      stargraph ui --db runs.db --graph triage.py --port 9000
      stargraph ui --host 0.0.0.0 --token "$(openssl rand -hex 16)" --read-only
      stargraph ui --secrets-from OPENAI_API_KEY,GITHUB_TOKEN
      stargraph ui --db runs.db --api http://127.0.0.1:8123
    """
    try:
        import uvicorn

        from stargraph.ui import RunGraph, UiSettings, create_app, is_loopback
    except ImportError as exc:
        raise CliError(
            f"stargraph ui needs the ui extra ({exc.name} is missing): pip install 'stargraph[ui]'"
        ) from exc
    if token is None and not is_loopback(host):
        raise CliUsageError(
            f"--host {host} lets other machines reach the console; pass --token SECRET (or set "
            "STARGRAPH_UI_TOKEN) so every request must carry it, or bind 127.0.0.1"
        )
    masked = _secrets_from(secrets_from)
    with _store(db) as store:
        given: dict[str, Target] = {}
        for spec in graph_specs:
            target = load_target(spec)
            given[target.ir.graph_hash] = target

        def resolve(graph_hash: str) -> RunGraph | None:
            target = given.get(graph_hash)
            if target is None and not _is_postgres(db):
                target = archived_target(db, graph_hash)
            if target is None:
                return None
            try:
                return RunGraph(target.ir, compile_target(target, store=store))
            except (StargraphError, CliError):
                # It draws but does not compile here (say a callable no longer imports):
                # show the run, do not offer to resume it.
                ir = target.ir if _is_postgres(db) else archived_ir(db, graph_hash)
                return None if ir is None else RunGraph(ir)

        settings = UiSettings(
            host=host, token=token, read_only=read_only, api=api, api_token=api_token
        )
        app = create_app(store, graphs=resolve, settings=settings, secrets_to_mask=masked)
        shown = f"[{host}]" if ":" in host else host
        suffix = "/?token=..." if token else "/"
        click.echo(f"stargraph ui: http://{shown}:{port}{suffix} (Ctrl+C stops it)", err=True)
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=os.environ.get("STARGRAPH_UI_LOG", "warning"),
            timeout_graceful_shutdown=3,
        )
        server = uvicorn.Server(config)
        try:
            server.run()
        finally:
            app.state.console.close()
