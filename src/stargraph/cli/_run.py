"""Running graphs durably: ``run`` and ``resume``, with progress on stderr, the outcome on
stdout, and Ctrl-C / SIGTERM stopping a run where it can be continued."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from stargraph.cli._load import (
    DEFAULT_DB,
    CliError,
    CliUsageError,
    archive_ir,
    compile_target,
    graph_for,
    load_target,
    open_store,
    parse_json,
    parse_object,
    refuse_another_store,
    resolve_db,
)
from stargraph.cli._output import (
    describe_error,
    drive,
    report,
    resume_hint,
    taken_run_id,
    view,
)
from stargraph.errors import (
    GraphHashMismatch,
    InvalidInputError,
    RunCancelledError,
    RunError,
    RunNotFoundError,
)
from stargraph.runtime import SignalScope, cancel_on_signals
from stargraph.runtime._versions import region_hashes

__all__ = ["resume_command", "run_command"]


_run_options = [
    click.option(
        "--db",
        default=DEFAULT_DB,
        callback=resolve_db,
        show_default=True,
        help="SQLite run database.",
    ),
    click.option("--max-steps", type=click.IntRange(min=1), help="Step limit for this run."),
    click.option("--quiet", "-q", is_flag=True, help="No progress output."),
    click.option(
        "--live/--plain", default=None, help="Live view or plain lines (default: live on a TTY)."
    ),
]


def _with_run_options(fn: Any) -> Any:
    for option in reversed(_run_options):
        fn = option(fn)
    return fn


@click.command("run")
@click.argument("graph")
@click.option("--input", "input_json", help="Input state as JSON (or @file.json).")
@click.option("--run-id", help="Id for the run (default: a fresh random id).")
@_with_run_options
def run_command(
    *,
    graph: str,
    input_json: str | None,
    run_id: str | None,
    db: str,
    max_steps: int | None,
    quiet: bool,
    live: bool | None,
) -> None:
    """Run GRAPH durably, showing progress on stderr and the final state (JSON) on stdout.

    An interrupted run exits 0 and says how to resume it; a failed run exits 1.
    """
    data = parse_object(input_json, "--input")
    target = load_target(graph)
    refuse_another_store(target, db)
    run_id = run_id or f"run-{secrets.token_hex(6)}"
    with open_store(db, must_exist=False) as store:
        if _stored(store, run_id):
            taken = store.get_run(run_id)
            # --graph only when GRAPH made that run; resume finds its own graph otherwise.
            same = taken.graph_hash == target.ir.graph_hash
            raise CliUsageError(taken_run_id(taken, graph if same else None, db, "--run-id"))
        app = compile_target(target, store=store, max_steps=max_steps)
        archive_ir(db, app.ir, spec=graph, regions=region_hashes(app.plan))
        hint = resume_hint(run_id, graph, db)
        try:
            with _stoppable(store, run_id, hint, quiet=quiet):
                outcome = drive(app.stream(data or {}, run_id=run_id), view(live, quiet))
        except RunError as exc:
            if not _stored(store, run_id):
                # Refused before anything was stored (an --input that does not fit): there
                # is no run to resume.
                error = CliUsageError if isinstance(exc, InvalidInputError) else CliError
                raise error(f"no run was started: {describe_error(exc)}") from exc
            if exc.run_id == run_id or exc.run_id is None:
                raise CliError(
                    f"{describe_error(exc)}. The run is kept: fix the cause and continue it "
                    f"with: {resume_hint(run_id, graph, db)}"
                ) from exc
            raise
        finally:
            app.close()
        report(outcome, app, run_id, graph, db)


@contextmanager
def _stoppable(store: Any, run_id: str, hint: str, *, quiet: bool) -> Iterator[None]:
    """Ctrl-C / SIGTERM handling around driving run ``run_id``: a run stopped by a signal or
    cancelled leaves the block as the :func:`_stopped` error saying how to continue it."""
    try:
        with cancel_on_signals(announce=not quiet) as signals:
            yield
    except RunCancelledError as exc:
        raise _stopped(exc, signals, store, run_id, hint) from exc
    except (KeyboardInterrupt, SystemExit) as exc:
        if not signals.forced:
            raise
        raise _stopped(exc, signals, store, run_id, hint) from exc


def _stopped(
    exc: BaseException, signals: SignalScope, store: Any, run_id: str, hint: str
) -> CliError:
    """A run stopped by Ctrl-C or SIGTERM (or cancelled): what became of it, and the command
    that continues it; the exit status is the shell's for the signal (130 for Ctrl-C)."""
    if isinstance(exc, RunCancelledError):
        what = f"was cancelled ({exc.reason}) after step {exc.step}, its last committed step"
    else:
        step = store.get_run(run_id).last_step
        what = (
            f"stopped at once on a second {signals.name}; it shows as orphaned until resumed "
            f"from step {step}, its last committed step"
        )
    code = signals.exit_code if signals.signum is not None else 1
    stopped = type("RunStopped", (CliError,), {"exit_code": code})
    return stopped(f"run {run_id} {what}; continue it with: {hint}")  # type: ignore[no-any-return]


def _stored(store: Any, run_id: str) -> bool:
    try:
        store.get_run(run_id)
    except RunNotFoundError:
        return False
    return True


@click.command("resume")
@click.argument("run_id")
@click.option("--response", help="Answer to the run's interrupt, as JSON (or @file.json).")
@click.option("--update", help="Channel writes to apply before continuing, as a JSON object.")
@click.option(
    "--graph",
    "graph_spec",
    help="The graph that made the run (default: the IR archived when `stargraph run` ran it).",
)
@click.option(
    "--wait",
    is_flag=True,
    help="If another process is running the run, wait for it to let go, then continue.",
)
@_with_run_options
def resume_command(
    *,
    run_id: str,
    response: str | None,
    update: str | None,
    graph_spec: str | None,
    wait: bool,
    db: str,
    max_steps: int | None,
    quiet: bool,
    live: bool | None,
) -> None:
    """Continue a stored run after its last committed step (never re-running a step)."""
    options: dict[str, Any] = {}
    if response is not None:
        options["response"] = parse_json(response, "--response")
    updates = parse_object(update, "--update", of=" of channel writes")
    if updates is not None:
        options["update"] = updates
    if max_steps is not None:
        options["max_steps"] = max_steps
    if wait:
        options["wait"] = True
    with open_store(db, must_exist=True) as store:
        record = store.get_run(run_id)
        target = graph_for(
            graph_spec, db, record.graph_hash, purpose="resume it", warn_changed=True
        )
        app = compile_target(target, store=store, run_id=run_id)
        hint = resume_hint(run_id, target.spec, db)
        try:
            with _stoppable(store, run_id, hint, quiet=quiet):
                outcome = drive(app.resume_stream(run_id, **options), view(live, quiet))
        except GraphHashMismatch as exc:
            raise CliError(
                f"run {run_id} was recorded by graph {exc.stored}, but {target.spec} is graph "
                f"{exc.current}; resume it with the graph that made it (a migration needs "
                "CompiledGraph.resume(migration=...) in Python)"
            ) from exc
        finally:
            app.close()
        report(outcome, app, run_id, target.spec, db)
