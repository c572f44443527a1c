"""``stargraph fork``, ``stargraph worker`` and ``stargraph submit``.

``fork`` starts a new run from a step of a stored run (``CompiledGraph.fork``). ``submit``
queues a run for workers and ``worker`` runs them (``stargraph.workers``): several workers on
one database share its queue, and a run whose worker dies is resumed by another.
"""

from __future__ import annotations

import json
import logging
import shlex
import signal
from types import FrameType
from typing import Any

import click

from stargraph._typed import validate_raw
from stargraph.cli._load import (
    DEFAULT_DB,
    CliUsageError,
    Target,
    archive_ir,
    compile_target,
    find_db,
    graph_for,
    importable_cwd,
    load_target,
    open_store,
    parse_object,
    python_reference,
    resolve_db,
)
from stargraph.cli._output import taken_run_id

__all__ = ["fork_command", "submit_command", "worker_command"]


def _existing(store: Any, run_id: str | None) -> Any:
    """The stored record of ``run_id``, or None (no such run, or no id given)."""
    from stargraph.errors import RunNotFoundError

    if run_id is None:
        return None
    try:
        return store.get_run(run_id)
    except RunNotFoundError:
        return None


def _db_part(db: str) -> str:
    return "" if db in (DEFAULT_DB, find_db()) else f" --db {shlex.quote(db)}"


@click.command(
    "fork",
    epilog="""\b
Examples:
  stargraph fork order-7 --step 2                  # a new run with steps 0..2 of order-7
  stargraph fork order-7 --step 2 --update '{"approved": false}' --new-run-id order-7b
  stargraph fork ticket-3 --step 1 --update '{"category": "spam"}' --as-node classify
  stargraph resume order-7b                        # then continue the fork
""",
)
@click.argument("run_id")
@click.option("--step", type=click.IntRange(min=0), required=True, help="Last step to keep.")
@click.option("--update", help="Channel writes recorded as the fork's next step (JSON object).")
@click.option(
    "--as-node",
    metavar="NODE",
    help="Route the update as if NODE wrote it: NODE's edges, routers and rules choose the "
    "next tasks (default: keep the tasks the run had scheduled).",
)
@click.option("--new-run-id", help="Id of the new run (default: RUN_ID~<random>).")
@click.option("--graph", "graph_spec", help="The run's graph (default: the archived one).")
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
def fork_command(
    *,
    run_id: str,
    step: int,
    update: str | None,
    as_node: str | None,
    new_run_id: str | None,
    graph_spec: str | None,
    db: str,
) -> None:
    """Start a new run from step STEP of RUN_ID, optionally with changed channels.

    The fork holds a copy of steps 0..STEP (it replays like its parent up to there) and is
    linked to its parent; --update becomes its next step. Nothing runs until you resume it.
    Without --as-node the fork runs next what the parent had scheduled after STEP, whatever
    the update changed; with it, the update is routed from the edited state.
    """
    updates = parse_object(update, "--update", of=" of channel writes")
    with open_store(db, must_exist=True) as store:
        record = store.get_run(run_id)
        taken = _existing(store, new_run_id)
        if taken is not None:
            raise CliUsageError(taken_run_id(taken, None, db, "--new-run-id"))
        if step > record.last_step:
            raise CliUsageError(
                f"run {run_id} has steps 0..{record.last_step}; pass --step 0 to {record.last_step}"
            )
        target = graph_for(graph_spec, db, record.graph_hash, purpose="fork it")
        app = compile_target(target, store=store, run_id=run_id)
        try:
            new_id = app.fork(run_id, step, update=updates, new_run_id=new_run_id, as_node=as_node)
            last = store.get_run(new_id).last_step
            scheduled = [t.node for t in store.get_steps(new_id, start=last, end=last)[-1].next]
        finally:
            app.close()
    click.echo(new_id)
    if as_node is not None:
        click.echo(f"routed as {as_node}: next {', '.join(scheduled) or 'nothing (END)'}", err=True)
    click.echo(
        f"forked run {new_id} from {run_id} at step {step}; continue it with: "
        f"stargraph resume {shlex.quote(new_id)}{_db_part(db)}",
        err=True,
    )


_db_option = click.option(
    "--db",
    default=DEFAULT_DB,
    callback=resolve_db,
    show_default=True,
    help="A postgresql:// DSN or a SQLite file: the queue and the runs.",
)
_schema_option = click.option(
    "--schema", default="stargraph", show_default=True, help="PostgreSQL schema."
)


@click.command(
    "submit",
    epilog="""\b
Examples:
  stargraph submit triage.py --input '{"text": "my invoice is wrong"}'
  stargraph submit myapp.flows:graph --db postgresql://app@db/app --run-id t-42
  stargraph submit myapp.agent:app                 # a CompiledGraph or a factory, too
  stargraph worker --db postgresql://app@db/app    # in as many processes as you like
""",
)
@click.argument("graph")
@click.option("--input", "input_json", help="Input state as JSON (or @file.json).")
@click.option("--run-id", help="Id for the run (default: a fresh random id).")
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Workers that may die running it before it is dead-lettered.",
)
@_db_option
@_schema_option
def submit_command(
    *,
    graph: str,
    input_json: str | None,
    run_id: str | None,
    max_attempts: int,
    db: str,
    schema: str,
) -> None:
    """Queue a run of GRAPH for `stargraph worker` processes; print its run id.

    GRAPH must be importable by the workers: a Python file or module:attr naming a Graph, a
    CompiledGraph or a function returning one (workers compile it with their own store and
    services, see `stargraph worker --services`; a run whose graph hashes otherwise in the
    worker is refused). Start the workers from the same folder (or with the code on
    PYTHONPATH).
    """
    from stargraph.workers import submit

    data = parse_object(input_json, "--input")
    target = load_target(graph)
    if target.graph is None and target.compiled is None:
        raise CliUsageError(
            f"{graph} is an IR file; workers import the graph by reference: pass a Python "
            "file or module:attr naming a Graph, a CompiledGraph or a function returning one"
        )
    from stargraph.checkpoint import MemoryStore

    # Every problem now, not in a worker later: the graph, then the input.
    app = compile_target(target, store=MemoryStore())
    _check_input(app, data or {})
    ref = _reference(graph, target)
    run_id = submit(
        db,
        ref,
        data or {},
        run_id=run_id,
        max_attempts=max_attempts,
        schema=schema,
        graph_hash=target.ir.graph_hash,
    )
    if not db.startswith(("postgresql://", "postgres://")):
        archive_ir(db, target.ir, spec=ref)
    click.echo(run_id)
    click.echo(f"queued run {run_id} of {ref}; `stargraph worker{_db_part(db)}` runs it", err=True)


def _check_input(app: Any, data: dict[str, Any]) -> None:
    """The checks a run makes of its input, made before it is queued."""
    from pydantic import ValidationError

    from stargraph.errors import InvalidInputError
    from stargraph.runtime._run import refuse_unknown_keys

    try:
        refuse_unknown_keys(app.state_model, data, None)
        validate_raw(app.state_model, data)
    except InvalidInputError as exc:
        raise CliUsageError(f"--input is refused, nothing was queued: {exc}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()
        )
        raise CliUsageError(
            f"--input is refused, nothing was queued: it does not fit "
            f"{app.state_model.__name__}: {problems}"
        ) from exc


def _reference(spec: str, target: Target) -> str:
    """``module:attr`` for a GRAPH argument (a Python file becomes its module's name)."""
    ref = python_reference(spec)
    if ref is None:
        raise CliUsageError(f"{spec} cannot be imported by a worker; pass module:attr")
    return ref


@click.command(
    "worker",
    epilog="""\b
Examples:
  stargraph worker                                  # the SQLite queue in .stargraph/
  stargraph worker --db postgresql://app@db/app -v  # PostgreSQL: SKIP LOCKED + leases
  stargraph worker --max-runs 1 --idle-exit 5       # one run, or give up after 5 s idle
  stargraph worker --services myapp.agent:services  # services() returns {"model": ...}
""",
)
@_db_option
@_schema_option
@click.option(
    "--lease", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds."
)
@click.option("--heartbeat", type=click.FloatRange(min=0.01), help="Seconds (default lease/3).")
@click.option(
    "--poll",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Idle re-check seconds.",
)
@click.option("--max-runs", type=click.IntRange(min=1), help="Exit after this many runs.")
@click.option("--idle-exit", type=click.FloatRange(min=0), help="Exit after idle seconds.")
@click.option("--name", help="Worker name (default host:pid:random).")
@click.option(
    "--services",
    "services_ref",
    help="module:fn returning the services mapping the graphs need ({'model': ...}).",
)
@click.option("--verbose", "-v", is_flag=True, help="Log every claim and outcome.")
def worker_command(
    *,
    db: str,
    schema: str,
    lease: float,
    heartbeat: float | None,
    poll: float,
    max_runs: int | None,
    idle_exit: float | None,
    name: str | None,
    services_ref: str | None,
    verbose: bool,
) -> None:
    """Claim queued runs (`stargraph submit`) and run them to their end, durably.

    Graphs are imported by reference with the current folder on sys.path. SIGTERM or
    Ctrl-C stops the worker: its current run stops at its next step boundary and goes back
    to the queue (a second signal stops at once); a worker that dies loses its lease and
    another one resumes the run from its last committed step. A graph whose nodes need a
    model or an arbiter gets them from --services module:fn: the worker calls fn() once and
    compiles every graph it runs with the mapping it returns.
    """
    from stargraph.workers import Worker, load_services

    importable_cwd()
    services = None if services_ref is None else load_services(services_ref)

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    worker = Worker(
        db,
        schema=schema,
        lease_s=lease,
        heartbeat_s=heartbeat,
        poll_s=poll,
        name=name,
        services=services,
    )
    processed = serve(worker, max_runs=max_runs, idle_exit=idle_exit, report=click.echo)
    click.echo(f"worker {worker.name} stopped after {processed} run(s)", err=True)


def serve(
    worker: Any,
    *,
    max_runs: int | None,
    idle_exit: float | None,
    report: Any = None,
) -> int:
    """Run ``worker`` until it is done, SIGTERM or Ctrl-C; close it; return runs processed."""

    def _stop(signum: int, frame: FrameType | None) -> None:
        worker.stop()

    previous = signal.signal(signal.SIGTERM, _stop)
    processed = 0

    def outcome(run_id: str, what: str) -> None:
        nonlocal processed
        processed += 1
        if report is not None:
            report(json.dumps({"run_id": run_id, "outcome": what}))

    try:
        worker.run(
            max_runs=max_runs, idle_exit_s=idle_exit, on_outcome=outcome, handle_signals=True
        )
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        worker.close()
    return processed
