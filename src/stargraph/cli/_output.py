"""What the commands print: error paragraphs, progress views, outcomes and plain tables.

Every command module uses these, and this module imports no command module, so the
commands depend on it and never on the group that assembles them (``_app``).
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import click

from stargraph.cli._load import DEFAULT_DB, find_db
from stargraph.errors import (
    ProposalNotFoundError,
    RunError,
    RunNotFoundError,
    RunNotResumableError,
    StargraphError,
)

__all__ = [
    "describe_error",
    "drive",
    "print_table",
    "report",
    "resume_hint",
    "taken_run_id",
    "view",
    "waiting_message",
]


def describe_error(exc: BaseException) -> str:
    """One paragraph for an exception: its message, plus where a run error happened."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, RunError):
        where = [
            f"{name} {value}"
            for name, value in (("run", exc.run_id), ("step", exc.step), ("node", exc.node))
            if value is not None and str(value) not in text
        ]
        if where:
            text = f"{text} ({', '.join(where)})"
    if isinstance(exc, RunNotResumableError) and "fork(" in text:
        text = f"{text} (on the command line: `stargraph fork {exc.run_id} --step K`)"
    if isinstance(exc, RunNotFoundError):
        text = f"{text} (on the command line: `stargraph runs [--db PATH]`)"
    if isinstance(exc, ProposalNotFoundError):
        text = f"{text} (on the command line: `stargraph proposals list [--db PATH]`)"
    if not isinstance(exc, StargraphError):
        text = f"{type(exc).__name__}: {text} (this looks like a bug; rerun with --debug)"
    return text


def resume_hint(run_id: str, spec: str, db: str, extra: str = "") -> str:
    """The ``stargraph resume`` command line that continues ``run_id`` (``extra``: options)."""
    db_part = "" if db in (DEFAULT_DB, find_db()) else f" --db {shlex.quote(db)}"
    return f"stargraph resume {shlex.quote(run_id)}{extra} --graph {shlex.quote(spec)}{db_part}"


def waiting_message(run_id: str, interrupt: Any, spec: str, db: str) -> str:
    """``run X is waiting: <what>; continue it with: <command>``."""
    info = interrupt if isinstance(interrupt, dict) else {}
    kind = info.get("kind")
    extra = ""
    if kind == "node":
        payload = json.dumps(info.get("payload"), ensure_ascii=False, sort_keys=True)
        what = f"node {info.get('node')!r} asks {payload}"
        extra = " --response JSON"
    elif kind in ("before", "after"):
        nodes = ", ".join(repr(n) for n in info.get("nodes", ()))
        what = f"interrupted {kind} node(s) {nodes} at step {info.get('step')}"
        extra = " [--update JSON]"
    elif kind == "rule":
        reason = f" ({info['reason']})" if info.get("reason") else ""
        what = f"rule {info.get('rule')} interrupted the run{reason}"
    else:
        what = json.dumps(interrupt, ensure_ascii=False, sort_keys=True, default=str)
    return f"run {run_id} is waiting: {what}; continue it with: " + resume_hint(
        run_id, spec, db, extra
    )


def taken_run_id(record: Any, spec: str | None, db: str, option: str) -> str:
    """Why ``option`` (``--run-id``) cannot name the existing run ``record``, and the commands
    that do what the user may have meant: a fresh id, or the existing run continued."""
    run_id = record.run_id
    quoted = shlex.quote(run_id)
    db_part = "" if db in (DEFAULT_DB, find_db()) else f" --db {shlex.quote(db)}"
    graph = f" --graph {shlex.quote(spec)}" if spec is not None else ""
    status = record.status
    if status == "interrupted":
        info = record.interrupt if isinstance(record.interrupt, dict) else {}
        extra = " --response JSON" if info.get("kind") == "node" else ""
        then = f"to continue it instead: stargraph resume {quoted}{extra}{graph}{db_part}"
    elif status in ("failed", "cancelled", "orphaned"):
        then = f"to continue it instead: stargraph resume {quoted}{graph}{db_part}"
    elif status == "running":
        then = f"it is running now; see it with: stargraph show {quoted}{db_part}"
    else:  # done: nothing to continue, but a fork branches from any of its steps
        then = (
            f"to see it: stargraph show {quoted}{db_part}; to branch from one of its steps: "
            f"stargraph fork {quoted} --step K{db_part}"
        )
    return (
        f"run {run_id} already exists in {db} ({status} at step {record.last_step}); pass "
        f"another {option} (or leave it out for a fresh id); {then}"
    )


def view(live: bool | None, quiet: bool) -> Any:
    """The progress view on stderr: none (``quiet``), live (a TTY by default), or plain lines."""
    from stargraph.cli._live import LiveView, PlainView

    if quiet:
        return _Silent()
    if live is None:
        live = sys.stderr.isatty() and sys.stdout.isatty()
    if live:
        from rich.console import Console

        return LiveView(Console(stderr=True))
    return PlainView(sys.stderr)


class _Silent:
    def show(self, event: Any) -> None:
        """Show nothing."""

    def close(self) -> None:
        """Nothing to close."""


def drive(events: Iterable[Any], progress: Any) -> Any:
    """Consume a run's events through ``progress``; return the root run's last outcome
    event (``RunFinished`` or ``RunInterrupted``; ``None`` if it had none)."""
    from stargraph.cli._live import watch
    from stargraph.runtime import RunFinished, RunInterrupted

    outcome = None
    for event in watch(events, progress):
        if not event.path and isinstance(event, RunFinished | RunInterrupted):
            outcome = event
    return outcome


def report(outcome: Any, app: Any, run_id: str, spec: str, db: str) -> None:
    """Print a run's outcome: its final state as JSON, or what it waits on and how to
    continue it."""
    from stargraph.runtime import RunFinished

    if isinstance(outcome, RunFinished):
        click.echo(json.dumps(outcome.state, indent=2, ensure_ascii=False, default=str))
        return
    record = app.get_run(run_id)
    click.echo(waiting_message(run_id, record.interrupt, spec, db))


def print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Print ``rows`` under ``header`` as plain left-aligned columns (for pipes and scripts)."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
