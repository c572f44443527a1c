"""``stargraph serve``: graphs behind an HTTP API that LangGraph's own client can drive.

>>> from stargraph.serve import ServeSettings
>>> ServeSettings().host
'127.0.0.1'

:func:`create_app` makes the Starlette app that ``stargraph serve graph.py`` runs under
uvicorn: one assistant per graph (its id is the graph's name), threads whose turns are
stargraph runs, runs executed by the server's worker threads (durably: a server killed
mid-run leaves the run to the next server, which resumes it from its last committed step),
streams as server-sent events stored per run, so a client reconnecting with
``Last-Event-ID`` loses nothing. ``langgraph_sdk.get_client(url=...)`` and
:mod:`stargraph.client` speak it. See ``docs/how-to/serve.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stargraph.errors import UsageError
from stargraph.serve._api import ServeSettings, build_app
from stargraph.serve._exec import Executor, Hub, ServedGraph
from stargraph.serve._tables import open_tables

__all__ = ["ServeSettings", "create_app"]


def _is_loopback(host: str) -> bool:
    import ipaddress

    name = host.strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _open_store(db: str | Path, schema: str) -> Any:
    if str(db).startswith(("postgresql://", "postgres://")):
        from stargraph.checkpoint import PostgresStore

        return PostgresStore(str(db), schema=schema)
    from stargraph.checkpoint import SqliteStore

    return SqliteStore(db)


def create_app(
    graphs: Sequence[Any],
    db: str | Path,
    *,
    settings: ServeSettings | None = None,
    workers: int = 2,
    lease_s: float = 10.0,
    schema: str = "stargraph",
) -> Any:
    """The API app serving ``graphs`` (each a ``Graph`` or a ``CompiledGraph``, compiled
    here with the store on ``db``: a SQLite file or a ``postgresql://`` DSN).

    ``workers`` threads run the runs (``0``: only other servers on the same PostgreSQL
    database run them); a run whose server died is taken over after ``lease_s`` seconds
    without its heartbeat, at once when that server was a process of this machine. Starting
    the app (its lifespan) starts the workers; stopping it stops them and closes the store.
    Raises :class:`~stargraph.errors.UsageError` for a non-loopback ``settings.host`` without
    a token, and for two graphs of one name."""
    from stargraph.graph import Graph
    from stargraph.runtime import CompiledGraph

    settings = settings or ServeSettings()
    if settings.token is None and not _is_loopback(settings.host):
        raise UsageError(
            f"host {settings.host} lets other machines reach the API; set a token "
            "(ServeSettings(token=...), `stargraph serve --token`) so every request must carry "
            "it, or bind 127.0.0.1"
        )
    store = _open_store(db, schema)
    served: dict[str, ServedGraph] = {}
    try:
        for graph in graphs:
            if isinstance(graph, CompiledGraph):
                app: CompiledGraph[Any] = graph.with_store(store)
            elif isinstance(graph, Graph):
                app = graph.compile(store=store)
            else:
                raise UsageError(
                    f"create_app serves Graph and CompiledGraph objects, not a "
                    f"{type(graph).__name__}"
                )
            name = app.ir.name
            if name in served:
                raise UsageError(
                    f"two graphs are named {name!r}; an assistant id is a graph's name, so "
                    "give each served graph its own name"
                )
            served[name] = ServedGraph(name, app)
        tables = open_tables(db, schema=schema)
    except BaseException:
        store.close()
        raise
    executor = Executor(tables, served, Hub(), workers=workers, lease_s=lease_s)

    def close() -> None:
        tables.close()
        for s in served.values():
            s.app.close()
        store.close()

    return build_app(served, tables, executor, settings, on_close=close)
