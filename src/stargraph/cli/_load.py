"""Turning command-line arguments into graphs, stores and JSON values.

A graph argument is an IR JSON file, a Python file ``triage.py[:attr]`` or ``module:attr``,
where ``attr`` (a dotted path inside the module) is a ``Graph``, a ``CompiledGraph``, or a
zero-argument callable returning one; a Python file without ``:attr`` stands for the graph it
defines (see :func:`_only_graph`). The current directory is put on ``sys.path`` first, as
``python -m`` does, and a Python file is imported by its module name (``triage``), so its
graph hashes the same as when the script runs it.
"""

from __future__ import annotations

import importlib
import json
import keyword
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import click

from stargraph.checkpoint import CheckpointStore, MemoryStore, SqliteStore
from stargraph.errors import StargraphError
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
    "archived_regions",
    "archived_target",
    "compile_target",
    "find_db",
    "graph_for",
    "importable_cwd",
    "load_target",
    "open_store",
    "parse_json",
    "parse_object",
    "python_reference",
    "refuse_another_store",
    "resolve_db",
    "stored_ir",
]

DEFAULT_DB: Final = ".stargraph/stargraph.db"
"""Where runs are kept unless ``--db`` says otherwise (the library's default too)."""


def find_db(start: Path | None = None) -> str:
    """The nearest ``.stargraph/stargraph.db``: in ``start`` (the current folder) or the
    first parent holding a ``.stargraph/`` folder, as git finds ``.git``.

    The search stops at the top of a git repository (a folder holding ``.git``), so a
    project never picks up the runs of an enclosing one, and otherwise at the filesystem
    root. With none found, the default in the current folder (which ``run`` creates).
    """
    here = Path.cwd() if start is None else start
    for folder in (here, *here.parents):
        if (folder / ".stargraph").is_dir():
            if folder == here:
                return DEFAULT_DB
            found = folder / DEFAULT_DB
            try:
                return os.path.relpath(found, here)
            except ValueError:  # another drive (Windows): no relative path exists
                return str(found)
        if (folder / ".git").exists():
            break
    return DEFAULT_DB


def resolve_db(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A ``--db`` option callback: the default becomes :func:`find_db`'s database; a
    ``--db`` given on the command line is used as given."""
    source = ctx.get_parameter_source(param.name or "db")
    if value == DEFAULT_DB and source is click.core.ParameterSource.DEFAULT:
        return find_db()
    return value


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
    file: Path | None = None
    """The file of the module that defined the graph, when it came from Python."""


def importable_cwd() -> None:
    """Put the current folder first on ``sys.path`` (as ``python -m`` does), once.

    Every command calls it before it imports user code, so ``module:attr`` arguments and the
    refs of an archived graph resolve the same way whichever command reads them.
    """
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


_GRAPH_FILE_SUFFIXES: Final = (".json",)


def load_target(spec: str) -> Target:
    """Load ``spec`` without compiling it: an IR JSON file, a Python file ``file.py[:attr]``
    or a reference ``module:attr``."""
    importable_cwd()
    path = Path(spec)
    if path.is_file():
        if path.suffix == ".py":
            return _from_module(spec, _import_file(spec, path), None)
        return _from_ir_file(spec, path)
    file_part, colon, attr = spec.rpartition(":")
    if colon and file_part.endswith(".py"):
        if not Path(file_part).is_file():
            raise CliError(f"no such file: {file_part} (from {spec!r})")
        if not attr:
            raise CliUsageError(
                f"{spec!r} names no attribute; pass {file_part}:NAME or {file_part}"
            )
        return _from_module(spec, _import_file(spec, Path(file_part)), attr)
    if path.suffix.lower() in (*_GRAPH_FILE_SUFFIXES, ".py") or os.sep in spec:
        raise CliError(f"no such file: {spec}")
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr or os.sep in module_name:
        raise CliUsageError(
            f"{spec!r} is neither an existing file nor a 'module:attr' reference; pass a Python "
            "file (triage.py or triage.py:graph), a reference (e.g. myapp.graphs:graph) or an "
            "IR JSON file (e.g. graph.json)"
        )
    return _from_module(spec, _import_module(spec, module_name), attr)


def python_reference(spec: str) -> str | None:
    """``module:attr`` naming the graph of a loaded GRAPH argument (a Python file becomes
    its module name), for another process to import; None for an IR file."""
    path = Path(spec)
    file_part, colon, attr = spec.rpartition(":")
    if path.is_file():
        if path.suffix != ".py":
            return None
        file, name = path, None
    elif colon and file_part.endswith(".py"):
        file, name = Path(file_part), attr
    else:
        return spec
    from stargraph.refs import module_name_for_file

    found = module_name_for_file(file)
    if found is None:
        return None
    if name is None:
        _, name = _only_graph(spec, importlib.import_module(found[0]))
    return f"{found[0]}:{name}"


def _from_ir_file(spec: str, path: Path) -> Target:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise CliError(f"cannot read {spec}: {exc.strerror or exc}") from exc
    if path.suffix.lower() not in _GRAPH_FILE_SUFFIXES and not text.lstrip().startswith(b"{"):
        raise CliUsageError(
            f"{spec} is neither an IR JSON file nor a Python file (.py); pass triage.py, "
            "triage.py:graph, myapp.graphs:graph or graph.json"
        )
    return Target(spec, GraphIR.from_json(text, source=str(path)))


def _import_module(spec: str, module_name: str) -> ModuleType:
    """Import the user's module, telling a missing module from a failure inside it."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if (
            isinstance(exc, ModuleNotFoundError)
            and missing is not None
            and (module_name == missing or module_name.startswith(missing + "."))
        ):
            raise CliError(
                f"cannot import module {module_name!r} (from {spec!r}): {exc}; run the command "
                "from your project directory or add it to PYTHONPATH"
            ) from exc
        raise CliError(_in_user_code(f"importing {module_name!r}", exc)) from exc
    except Exception as exc:
        raise CliError(_in_user_code(f"importing {module_name!r}", exc)) from exc


def _in_user_code(what: str, exc: BaseException) -> str:
    """A failure raised by the user's own code: say so, and where to look."""
    return (
        f"{what} raised {type(exc).__name__}: {exc}; this is an error in your code, not in "
        "stargraph - rerun with --debug for the traceback"
    )


def _import_file(spec: str, path: Path) -> ModuleType:
    """Import ``path`` by the module name its location gives it (so refs of its functions
    are the same as when the module is imported by name), with its root on ``sys.path``."""
    from stargraph.refs import module_name_for_file

    found = module_name_for_file(path)
    if found is None:
        raise CliUsageError(_rename_hint(path))
    name, root = found
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    loaded = sys.modules.get(name)
    loaded_file = getattr(loaded, "__file__", None)
    if loaded is not None and (not loaded_file or Path(loaded_file).resolve() != path.resolve()):
        raise CliError(
            f"{spec}: module {name!r} is already imported from {loaded_file or 'elsewhere'}; "
            "rename your file so its module name is its own"
        )
    return _import_module(spec, name)


def _rename_hint(path: Path) -> str:
    """Why ``path`` (or a package folder above it) has no module name, and a new name that
    has one (a free file name, not a standard module's), with the command that renames it."""
    resolved = path.resolve()
    folders: list[Path] = []
    folder = resolved.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folders.append(folder)
        folder = folder.parent
    bad_folder = next((f for f in reversed(folders) if not _is_module_name(f.name)), None)
    if bad_folder is not None:
        new = _free_name(_module_name_like(bad_folder.name), bad_folder.parent, "")
        old = Path(os.path.relpath(bad_folder))
        what, renamed = "its package folder", old.with_name(new)
        name = bad_folder.name
    else:
        name = path.stem
        new = _free_name(_module_name_like(name), path.parent, ".py")
        what, old, renamed = "it", path, path.with_name(f"{new}.py")
    return (
        f"{path} cannot be imported by a module name ({_why_not_module_name(name)}), and a "
        f"graph's nodes are referenced by module name; rename {what}, e.g. to "
        f"{renamed.name}: mv {shlex.quote(str(old))} {shlex.quote(str(renamed))}"
    )


def _is_module_name(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _why_not_module_name(name: str) -> str:
    """Every reason ``name`` is not a module name."""
    why = []
    if keyword.iskeyword(name):
        why.append(f"{name!r} is a Python keyword")
    if "." in name:
        why.append(f"a dot in {name!r} would name a package")
    if name[:1].isdigit():
        why.append(f"{name!r} starts with a digit")
    odd = sorted({c for c in name if not (c.isalnum() or c in "_.")})
    if odd:
        why.append(f"{', '.join(repr(c) for c in odd)} in {name!r} cannot be part of a module name")
    return "; ".join(why) or f"{name!r} is not an identifier"


def _module_name_like(name: str) -> str:
    """``name`` made a module name: odd characters become ``_``; a leading digit or a
    keyword gets a word added."""
    new = re.sub(r"\W", "_", name).strip("_") or "graph"
    if new[0].isdigit():
        new = f"graph_{new}"
    if keyword.iskeyword(new):
        new = f"{new}_graph"
    return new


def _free_name(name: str, folder: Path, suffix: str) -> str:
    """``name``, or ``name_graph``... when a file of that name exists in ``folder`` or a
    standard module has it (the renamed file would be shadowed or shadow it)."""
    while (folder / f"{name}{suffix}").exists() or name in sys.stdlib_module_names:
        name = f"{name}_graph"
    return name


def _from_module(spec: str, module: ModuleType, attr: str | None) -> Target:
    if attr is None:
        obj, attr = _only_graph(spec, module)
    else:
        obj = module
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError as exc:
                raise CliError(
                    f"module {module.__name__!r} has no attribute {attr!r} (from {spec!r})"
                ) from exc
    if not isinstance(obj, Graph | CompiledGraph) and callable(obj):
        try:
            obj = obj()
        except StargraphError:
            raise
        except Exception as exc:
            raise CliError(_in_user_code(f"calling {module.__name__}.{attr}()", exc)) from exc
    file = Path(module.__file__) if module.__file__ else None
    if isinstance(obj, Graph):
        return Target(spec, obj.to_ir(), graph=obj, file=file)
    if isinstance(obj, CompiledGraph):
        return Target(spec, obj.ir, compiled=obj, file=file)
    raise CliError(
        f"{spec!r} is a {type(obj).__name__}, not a Graph, a CompiledGraph or a zero-argument "
        "function returning one"
    )


def _only_graph(spec: str, module: ModuleType) -> tuple[Any, str]:
    """The graph a Python file defines when no attribute is named: its one ``Graph`` or
    ``CompiledGraph`` at module level; with several, its one ``CompiledGraph`` (which carries
    its services, such as a chat model), else the one called ``graph``."""
    found = {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_") and isinstance(value, Graph | CompiledGraph)
    }
    compiled = {name: value for name, value in found.items() if isinstance(value, CompiledGraph)}
    for candidates in (found, compiled):
        if len(candidates) == 1:
            [(name, value)] = candidates.items()
            return value, name
    if "graph" in found:
        return found["graph"], "graph"
    file = spec.rpartition(":")[0] if spec.endswith(":") else spec
    if not found:
        raise CliUsageError(
            f"{file} defines no Graph at module level; pass {file}:NAME with a Graph, a "
            "CompiledGraph or a function returning one"
        )
    names = ", ".join(f"{file}:{name}" for name in sorted(found))
    raise CliUsageError(f"{file} defines several graphs; pick one: {names}")


def compile_target(
    target: Target,
    *,
    store: CheckpointStore | None = None,
    max_steps: int | None = None,
    run_id: str | None = None,
) -> CompiledGraph[Any]:
    """Compile ``target`` (with ``store`` for durable runs); every problem at once.

    ``run_id``: the stored run the command goes on with, for :func:`refuse_another_store`.
    """
    if target.compiled is not None:
        app = target.compiled
        if store is None:
            return app
        if isinstance(store, SqliteStore):
            refuse_another_store(target, store.path, run_id=run_id)
        # What the user compiled with stays (a seeded entropy, durability, plugins, an
        # executor); only the store (and a --max-steps) is the command's.
        return app.with_store(store, max_steps=max_steps)
    graph = target.graph if target.graph is not None else Graph(target.ir)
    if max_steps is None:
        return graph.compile(store=store)
    return graph.compile(store=store, max_steps=max_steps)


def refuse_another_store(target: Target, db: str | Path, *, run_id: str | None = None) -> None:
    """A compiled graph that brings its own persistent store is not silently moved to
    ``--db``: the command would keep (or look for) its runs somewhere the user did not
    choose. A ``MemoryStore`` dies with the process, so the command's store replaces it.
    Called before the command opens (and so creates) ``db``.

    A relative ``SqliteStore`` path names a file beside the graph's module as well as one
    in the current folder (the command may run from a subfolder, or from the folder above
    the module); either is the graph's own. The ``--db`` suggested is one that holds
    ``run_id`` when a stored run is continued, so following the hint finds the run.
    """
    own = None if target.compiled is None else target.compiled.store
    if own is None or isinstance(own, MemoryStore):
        return
    if isinstance(own, SqliteStore):
        places = _own_store_places(target, own.path)
        if any(place.resolve() == Path(db).resolve() for place in places):
            return
        where = f"SqliteStore at {str(own.path)!r}"
        holding = [p for p in places if run_id is None or _holds_run(p, run_id)]
        if holding:
            fix = f"pass --db {shlex.quote(_shown(holding[0]))}, or"
        else:
            looked = " nor ".join(repr(_shown(p)) for p in places)
            if len(places) == 1:
                fix = f"{looked} does not hold run {run_id}, so"
            else:
                fix = f"neither {looked} holds run {run_id}, so"
    else:
        where = type(own).__name__
        fix = "use the Python API for that store, or"
    raise CliUsageError(
        f"{target.spec} is a graph compiled with its own store ({where}), but this command "
        f"keeps its runs in {str(db)!r}; {fix} make {target.spec} return the Graph (or "
        "compile it without store=) so that --db decides where runs are kept"
    )


def _own_store_places(target: Target, path: Path) -> list[Path]:
    """Where a graph's own SQLite file is meant to be: beside its module first, then as the
    process opened it (the current folder), once each."""
    if path.is_absolute() or target.file is None:
        return [path]
    beside = target.file.parent / path
    return [beside] if beside.resolve() == path.resolve() else [beside, path]


def _shown(path: Path) -> str:
    """``path`` as the user would type it here: relative to the current folder."""
    try:
        return os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return str(path)


def _holds_run(path: Path, run_id: str) -> bool:
    """Whether ``path`` is a stargraph database holding run ``run_id`` (read only)."""
    if not path.is_file() or _not_ours(path) is not None:
        return False
    try:
        with SqliteStore(path) as store:
            store.get_run(run_id)
    except StargraphError:
        return False
    return True


def open_store(db: str, *, must_exist: bool) -> SqliteStore:
    """Open the SQLite store at ``db``; reading commands refuse to create an empty one, and
    no command turns a database that is not stargraph's into one."""
    path = Path(db)
    if must_exist and not path.is_file():
        raise CliError(
            f"no run database at {db}; start a run with `stargraph run` first, or pass "
            "--db PATH to the database that holds your runs"
        )
    if path.is_file() and path.stat().st_size > 0:
        problem = _not_ours(path)
        if problem is not None:
            raise CliUsageError(
                f"{db} is {problem}, not a stargraph run database; pass --db with the "
                f"database your runs are in (default {DEFAULT_DB}) or a new file"
            )
    return SqliteStore(db)


# The tables every stargraph SQLite store has (checkpoint._sqlite creates them together).
_STORE_TABLES: Final = frozenset({"runs", "steps", "meta"})


def _not_ours(path: Path) -> str | None:
    """Why the existing file at ``path`` is not a stargraph store, or None when it is one
    (or an SQLite database without any table yet)."""
    import sqlite3

    from stargraph._sqlite import table_names

    try:
        names = table_names(path)
    except sqlite3.DatabaseError:
        return "not an SQLite database"
    if not names or names >= _STORE_TABLES:
        return None
    tables = ", ".join(sorted(n for n in names if not n.startswith("sqlite_"))[:5])
    return f"an SQLite database of something else (tables {tables})"


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


def parse_object(value: str | None, option: str, *, of: str = "") -> dict[str, Any] | None:
    """Parse a JSON option value (``@file.json`` reads the file) that must be an object (of
    ``of``, e.g. ``" of channel writes"``); ``None`` when the option is not given."""
    data = parse_json(value, option)
    if data is not None and not isinstance(data, dict):
        raise CliUsageError(f"{option} must be a JSON object{of}, got {type(data).__name__}")
    return data


# The store keeps runs, not graphs. The CLI files the IR of every graph it runs beside the
# database, by hash, so `show`, `diff` and `resume` can find a run's graph without --graph;
# and the GRAPH argument that ran it, so `resume` and `replay` get the live object back,
# services (a chat model, a tool arbiter) included, while the code still has that hash.
def _archive_dir(db: str) -> Path:
    return Path(db).parent / "graphs"


def _archive_path(db: str, graph_hash: str, suffix: str) -> Path:
    return _archive_dir(db) / f"{graph_hash.removeprefix('sha256:')}{suffix}"


def _write_atomically(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a read-only directory must not fail a run; --graph still works


def archive_ir(
    db: str, ir: GraphIR, *, spec: str | None = None, regions: Mapping[str, str] | None = None
) -> None:
    """Save ``ir`` beside the database under its hash (once; best effort), ``spec`` (the
    Python GRAPH argument that ran it) with the folder it was given in, and the graph's
    ``regions`` (its region hashes, code included: what ``stargraph replay RUN --graph new``
    compares a later version with once the code that ran is edited)."""
    path = _archive_path(db, ir.graph_hash, ".json")
    if not path.exists():
        _write_atomically(path, ir.to_json(indent=True))
    if regions is not None:
        kept = _archive_path(db, ir.graph_hash, ".regions")
        if not kept.exists():
            _write_atomically(kept, json.dumps(dict(regions), sort_keys=True))
    is_ir_file = spec is not None and Path(spec).is_file() and not spec.endswith(".py")
    if spec is not None and not is_ir_file:
        source = {"spec": spec, "cwd": os.getcwd()}
        _write_atomically(_archive_path(db, ir.graph_hash, ".source"), json.dumps(source))


def archived_regions(db: str, graph_hash: str) -> dict[str, str] | None:
    """The region hashes :func:`archive_ir` saved for ``graph_hash``, if any."""
    path = _archive_path(db, graph_hash, ".regions")
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict):
        return None
    return {str(k): str(v) for k, v in found.items()}


def archived_ir(db: str, graph_hash: str) -> GraphIR | None:
    """The IR saved by :func:`archive_ir` for ``graph_hash``, else the one the store at
    ``db`` keeps for it (every durable run gives its store its graph's IR), if any."""
    path = _archive_path(db, graph_hash, ".json")
    if path.is_file():
        ir = GraphIR.from_json(path.read_bytes(), source=str(path))
        return ir if ir.graph_hash == graph_hash else None
    return stored_ir(db, graph_hash)


def stored_ir(db: str, graph_hash: str) -> GraphIR | None:
    """The IR the store at ``db`` keeps for ``graph_hash`` (``None`` when it has none)."""
    if not Path(db).is_file():
        return None
    with open_store(db, must_exist=True) as store:
        data = store.get_graph(graph_hash)
    if data is None:
        return None
    ir = GraphIR.from_json(data, source=f"{db} (graph {graph_hash})")
    return ir if ir.graph_hash == graph_hash else None


def archived_target(db: str, graph_hash: str, *, warn_changed: bool = False) -> Target | None:
    """The graph of a run made by ``stargraph run``: the Python object it ran, when that
    still loads with the same hash (its services come with it), else its archived IR.

    With ``warn_changed``, a GRAPH argument that now loads as another graph is reported on
    stderr: the run goes on with the archived graph, which the user may not expect after
    editing the file."""
    source_path = _archive_path(db, graph_hash, ".source")
    if source_path.is_file():
        try:
            source = json.loads(source_path.read_text(encoding="utf-8"))
            spec, folder = str(source["spec"]), str(source["cwd"])
        except (OSError, ValueError, KeyError, TypeError):
            spec = folder = ""
        if spec:
            target = _load_in(spec, folder)
            if target is not None and target.ir.graph_hash == graph_hash:
                return target
            if target is not None and warn_changed:
                click.echo(
                    f"warning: {target.spec} now hashes as {target.ir.graph_hash}, not as "
                    f"{graph_hash}, the graph the run was recorded with; continuing with the "
                    f"archived graph {graph_hash} (pass --graph {shlex.quote(spec)} to use the "
                    "file as it is now, which resume refuses unless the hashes match)",
                    err=True,
                )
    archived = _archive_path(db, graph_hash, ".json")
    ir = archived_ir(db, graph_hash)
    if ir is None:
        return None
    return Target(str(archived) if archived.is_file() else f"{db} (graph {graph_hash})", ir)


def graph_for(
    spec: str | None,
    db: str,
    graph_hash: str,
    *,
    purpose: str,
    what: str = "run",
    warn_changed: bool = False,
) -> Target:
    """The graph named by ``--graph``, else the one kept for ``graph_hash`` (archived
    beside ``db`` by ``stargraph run``, or in the store at ``db`` by any durable run);
    ``warn_changed`` as for :func:`archived_target`."""
    if spec is not None:
        return load_target(spec)
    target = archived_target(db, graph_hash, warn_changed=warn_changed)
    if target is None:
        raise CliUsageError(
            f"the graph {graph_hash} of this {what} is neither archived beside {db} nor kept "
            f"in it (a run stored by an older stargraph, or another database); pass --graph "
            f"FILE.py|module:attr with the graph that made the run to {purpose}"
        )
    return target


def _load_in(spec: str, folder: str) -> Target | None:
    """``load_target(spec)`` as given in ``folder``; None when it no longer loads."""
    file_part, colon, attr = spec.rpartition(":")
    if not (colon and file_part.endswith(".py")):
        file_part, colon, attr = spec, "", ""
    if file_part.endswith(".py") and not Path(file_part).is_absolute():
        spec = str(Path(folder) / file_part) + (f":{attr}" if colon else "")
    elif folder not in sys.path:
        sys.path.append(folder)
    try:
        return load_target(spec)
    except (CliError, StargraphError):
        return None
