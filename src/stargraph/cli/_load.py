"""Turning command-line arguments into graphs, stores and JSON values.

A graph argument is either an IR JSON file or ``module:attr``, where ``attr`` (a dotted
path inside the module) is a ``Graph``, a ``CompiledGraph``, or a zero-argument callable
returning one. The current directory is put on ``sys.path`` first, as ``python -m`` does.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click

from stargraph.checkpoint import CheckpointStore, SqliteStore
from stargraph.graph import Graph
from stargraph.ir import GraphIR
from stargraph.runtime import CompiledGraph

__all__ = [
    "DEFAULT_DB",
    "CliError",
    "CliUsageError",
    "Target",
    "archive_ir",
    "archived_ir",
    "compile_target",
    "load_target",
    "open_store",
    "parse_json",
]

DEFAULT_DB: Final = ".stargraph/stargraph.db"
"""Where runs are kept unless ``--db`` says otherwise (the library's default too)."""


class CliError(click.ClickException):
    """A failure to report as one paragraph on stderr, with exit status 1."""

    def show(self, file: Any = None) -> None:
        """Print ``error: <message>`` on stderr."""
        click.echo(f"error: {self.format_message()}", err=True, file=file)


class CliUsageError(CliError):
    """A bad argument (exit status 2, as for usage errors); also ``diff``'s "trouble"."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class Target:
    """A loaded graph argument: its IR and, when it came from Python, the live object."""

    spec: str
    ir: GraphIR
    graph: Graph[Any] | None = None
    compiled: CompiledGraph[Any] | None = None


def load_target(spec: str) -> Target:
    """Load ``spec`` (an IR JSON file or ``module:attr``) without compiling it."""
    path = Path(spec)
    if path.is_file():
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise CliError(f"cannot read {spec}: {exc.strerror or exc}") from exc
        return Target(spec, GraphIR.from_json(text, source=str(path)))
    if path.suffix.lower() == ".json" or os.sep in spec:
        raise CliError(f"no such file: {spec}")
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr or os.sep in module_name:
        raise CliUsageError(
            f"{spec!r} is neither an existing file nor a 'module:attr' reference; pass an IR "
            "JSON file (e.g. graph.json) or a Python reference (e.g. myapp.graphs:graph)"
        )
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CliError(
            f"cannot import module {module_name!r} (from {spec!r}): {exc}; run the command from "
            "your project directory or add it to PYTHONPATH"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise CliError(f"module {module_name!r} has no attribute {attr!r}") from exc
    if not isinstance(obj, Graph | CompiledGraph) and callable(obj):
        obj = obj()
    if isinstance(obj, Graph):
        return Target(spec, obj.to_ir(), graph=obj)
    if isinstance(obj, CompiledGraph):
        return Target(spec, obj.ir, compiled=obj)
    raise CliError(
        f"{spec!r} is a {type(obj).__name__}, not a Graph, a CompiledGraph or a zero-argument "
        "function returning one"
    )


def compile_target(
    target: Target, *, store: CheckpointStore | None = None, max_steps: int | None = None
) -> CompiledGraph[Any]:
    """Compile ``target`` (with ``store`` for durable runs); every problem at once."""
    options: dict[str, Any] = {"store": store}
    if max_steps is not None:
        options["max_steps"] = max_steps
    if target.compiled is not None:
        app = target.compiled
        if store is None:
            return app
        # Recompile the same IR with the command's store; the callables come from the
        # compiled graph's own node and router specs.
        from stargraph.compile import compile_ir

        impls: dict[str, Any] = {}
        for spec in app.specs.values():
            impls[spec.ref] = spec.fn
            for router in spec.routers:
                impls[router.ref] = router.fn
        for router in app.start_routers:
            impls[router.ref] = router.fn
        options.setdefault("max_steps", app.max_steps)
        return compile_ir(
            app.ir, state=app.state_model, impls=impls, services=app.services, **options
        )
    graph = target.graph if target.graph is not None else Graph(target.ir)
    return graph.compile(**options)


def open_store(db: str, *, must_exist: bool) -> SqliteStore:
    """Open the SQLite store at ``db``; reading commands refuse to create an empty one."""
    if must_exist and not Path(db).is_file():
        raise CliError(
            f"no run database at {db}; start a run with `stargraph run` first, or pass "
            "--db PATH to the database that holds your runs"
        )
    return SqliteStore(db)


def parse_json(value: str | None, option: str) -> Any:
    """Parse a JSON option value; ``@file.json`` reads the file."""
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot read {option} file {value[1:]}: {exc.strerror}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliUsageError(
            f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): "
            f"{value!r}; quote it for your shell, e.g. {option} '{{\"counter\": 1}}'"
        ) from exc


# The store keeps runs, not graphs. The CLI files the IR of every graph it runs beside the
# database, by hash, so `show`, `diff` and `resume` can find a run's graph without --graph.
def _archive_dir(db: str) -> Path:
    return Path(db).parent / "graphs"


def archive_ir(db: str, ir: GraphIR) -> None:
    """Save ``ir`` beside the database under its hash (once; best effort)."""
    folder = _archive_dir(db)
    path = folder / f"{ir.graph_hash.removeprefix('sha256:')}.json"
    if path.exists():
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(ir.to_json(indent=True), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only directory must not fail a run; --graph still works


def archived_ir(db: str, graph_hash: str) -> GraphIR | None:
    """The IR saved by :func:`archive_ir` for ``graph_hash``, if any."""
    path = _archive_dir(db) / f"{graph_hash.removeprefix('sha256:')}.json"
    if not path.is_file():
        return None
    ir = GraphIR.from_json(path.read_bytes(), source=str(path))
    return ir if ir.graph_hash == graph_hash else None
