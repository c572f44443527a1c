"""What the commands print: error paragraphs, progress views, outcomes and plain tables.

Every command module uses these, and this module imports no command module, so the
commands depend on it and never on the group that assembles them (``_app``).
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import click

from stargraph.cli._load import DEFAULT_DB, find_db
from stargraph.errors import (
    InvalidInputError,
    MissingServiceError,
    ProposalNotFoundError,
    RunBusyError,
    RunCancelledError,
    RunError,
    RunNotFoundError,
    RunNotResumableError,
    StargraphError,
    StepLimitExceeded,
)

__all__ = [
    "cli_form",
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
    """One paragraph for an exception: its message, plus where a run error happened, with
    the fixes the library phrases for Python (``wait=True``) named as the CLI's options."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, RunError):
        where = [
            f"{name} {value}"
            for name, value in (("run", exc.run_id), ("step", exc.step), ("node", exc.node))
            if value is not None and str(value) not in text
        ]
        if where:
            text = f"{text} ({', '.join(where)})"
    if isinstance(exc, StargraphError):
        text = cli_form(text, exc)
    if isinstance(exc, ProposalNotFoundError):
        text = f"{text} (on the command line: `stargraph proposals list [--db PATH]`)"
    if not isinstance(exc, StargraphError):
        text = f"{type(exc).__name__}: {text} (this looks like a bug; rerun with --debug)"
    return text


def _run_of(exc: StargraphError) -> str:
    run_id = getattr(exc, "run_id", None)
    return "RUN_ID" if run_id is None else shlex.quote(str(run_id))


_Fix = Callable[["re.Match[str]", StargraphError], str]

# The fixes library errors spell in Python, and what does the same on the command line.
# Each error keeps its Python wording for Python callers; the CLI rewrites it when it shows
# it. The patterns follow the messages' wording, which the CLI tests pin through real runs.
_CLI_FORMS: Final[tuple[tuple[type[StargraphError], re.Pattern[str], _Fix], ...]] = (
    (
        RunBusyError,
        re.compile(r"call resume\(\.\.\., wait=True\) to wait for it"),
        lambda m, e: f"pass --wait (`stargraph resume {_run_of(e)} --wait`) to wait for it",
    ),
    (
        RunNotResumableError,
        re.compile(r"use fork\((?:'[^']*'|\"[^\"]*\"), step\)"),
        lambda m, e: f"use `stargraph fork {_run_of(e)} --step K`",
    ),
    (
        RunNotResumableError,
        re.compile(r"pass resume\(\.\.\., response=\.\.\.\)"),
        lambda m, e: f"pass --response JSON (`stargraph resume {_run_of(e)} --response JSON`)",
    ),
    (
        RunNotResumableError,
        re.compile(r"call resume\(\) without response="),
        lambda m, e: "resume it without --response",
    ),
    (
        RunNotResumableError,
        re.compile(r"answer it with response= alone"),
        lambda m, e: "answer it with --response alone",
    ),
    (
        RunNotResumableError,
        re.compile(r"resume it without update=, or fork it from step (\d+) with the update"),
        lambda m, e: (
            "resume it without --update, or fork it with the update: "
            f"`stargraph fork {_run_of(e)} --step {m.group(1)} --update JSON`"
        ),
    ),
    (
        RunNotFoundError,
        re.compile(r"list runs with store\.list_runs\(\)"),
        lambda m, e: "list runs with `stargraph runs [--db PATH]`",
    ),
    (
        StepLimitExceeded,
        re.compile(r"raise max_steps in compile\(\)/invoke\(\)"),
        lambda m, e: "pass a larger --max-steps",
    ),
    (
        InvalidInputError,
        re.compile(r"as_node=('[^']*'|\"[^\"]*\")"),
        lambda m, e: f"--as-node {m.group(1)}",
    ),
    (
        InvalidInputError,
        re.compile(r"leave as_node out"),
        lambda m, e: "leave --as-node out",
    ),
    (
        RunCancelledError,
        re.compile(r"continue it with resume\((?:'[^']*'|\"[^\"]*\")\)"),
        lambda m, e: f"continue it with: stargraph resume {_run_of(e)}",
    ),
    (
        MissingServiceError,
        re.compile(
            r"compile (?:it|the graph) with (services=\{.*?: \.\.\.\})"
            r"(?: \(a worker: Worker\(db, services=\.\.\.\) or (`[^`]*`)\))?"
        ),
        lambda m, e: (
            f"give the graph its services on the command line: pass as GRAPH a "
            f"CompiledGraph compiled with {m.group(1)}, or a function returning one"
            + (f"; a worker: {m.group(2)}" if m.group(2) else "")
        ),
    ),
)


def cli_form(text: str, exc: StargraphError) -> str:
    """``text`` (``exc``'s message) with its Python fixes named as the CLI's options."""
    for kind, pattern, fix in _CLI_FORMS:
        if isinstance(exc, kind):
            text = pattern.sub(lambda m, e=exc, f=fix: f(m, e), text)  # type: ignore[misc]
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
