"""Looking at stored runs: ``runs``, ``show`` and ``diff``.

They read the store only. State needs the graph's state model (reducers), found through
``--graph`` or the IR archived beside the database by ``stargraph run``; without either,
``show`` still prints every step's writes and ``diff`` still compares them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, get_args

import click

from stargraph.checkpoint import CheckpointStore, RunRecord
from stargraph.checkpoint._records import ENDED_STATUSES, RunStatus
from stargraph.cli._load import (
    DEFAULT_DB,
    CliError,
    CliUsageError,
    archived_ir,
    archived_target,
    load_target,
    open_store,
    resolve_db,
)
from stargraph.cli._output import describe_error, print_table
from stargraph.errors import RunNotFoundError
from stargraph.ir import GraphIR
from stargraph.replay import align_steps, value_changes

__all__ = ["diff_command", "diff_runs", "runs_command", "show_command"]


def _dumps(value: Any, *, indent: int | None = None) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=True, default=str)


def _ir_for(spec: str | None, db: str, record: RunRecord, store: CheckpointStore) -> GraphIR | None:
    """The graph of ``record``: ``--graph``, else the one archived for its hash, with the
    code that made the run importable (as ``resume`` finds it), so the state model and
    reducers resolve from any folder, not only the one the run was started in."""
    if spec is not None:
        return load_target(spec).ir
    # A child skill run or a fork has no source of its own: the code that ran it is its
    # root run's, whose module root on sys.path makes the child's refs import too.
    seen: set[str] = set()
    current: RunRecord | None = record
    while current is not None and current.run_id not in seen:
        seen.add(current.run_id)
        target = archived_target(db, current.graph_hash)
        if target is not None and (target.graph or target.compiled) is not None:
            break  # the source loaded: its module root is on sys.path now
        current = _parent(store, current)
    return archived_ir(db, record.graph_hash)


def _parent(store: CheckpointStore, record: RunRecord) -> RunRecord | None:
    """The run ``record`` was forked from, or the run whose skill node ran it (a child
    run's id is its parent's, ``::``, the node's site)."""
    parent = record.parent_run_id or record.run_id.rpartition("::")[0]
    if not parent:
        return None
    try:
        return store.get_run(parent)
    except RunNotFoundError:
        return None


def _short(graph_hash: str) -> str:
    return graph_hash.removeprefix("sha256:")[:12]


@click.command("runs")
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option(
    "--status", type=click.Choice(get_args(RunStatus)), help="Only runs with this status."
)
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the run records as JSON.")
def runs_command(db: str, status: str | None, limit: int, as_json: bool) -> None:
    """List stored runs, newest first: run id, graph, status, last step, updated."""
    with open_store(db, must_exist=True) as store:
        records = store.list_runs(status=status, limit=limit)  # type: ignore[arg-type]
    if as_json:
        click.echo(_dumps([r.model_dump(mode="json") for r in records], indent=2))
        return
    rows: list[tuple[str, ...]] = [
        (
            r.run_id,
            f"{r.graph_name} {_short(r.graph_hash)}",
            r.status,
            str(r.last_step),
            r.updated_at,
        )
        for r in records
    ]
    header: tuple[str, ...] = ("RUN ID", "GRAPH", "STATUS", "LAST STEP", "UPDATED")
    if any(r.thread_id is not None for r in records):
        # Only when some run is a turn of a thread: other listings keep their columns.
        header = (*header[:3], "THREAD", *header[3:])
        rows = [
            (*row[:3], "-" if r.thread_id is None else f"{r.thread_id} #{r.turn}", *row[3:])
            for row, r in zip(rows, records, strict=True)
        ]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*header)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
        return
    if not rows:
        click.echo("no runs" + (f" with status {status}" if status else ""), err=True)
        return
    print_table(header, rows)


def _routed_as(store: CheckpointStore, record: RunRecord) -> str | None:
    """The node a fork's update was routed as (``fork --as-node``), if it was."""
    if record.parent_step is None or record.last_step <= record.parent_step:
        return None
    at = record.parent_step + 1
    (update,) = store.get_steps(record.run_id, start=at, end=at)
    return update.as_node


def _summary(record: RunRecord, routed_as: str | None = None) -> list[str]:
    lines = [
        f"run        {record.run_id}",
        f"graph      {record.graph_name} {record.graph_hash}",
        f"status     {record.outcome()}",
        f"last step  {record.last_step}",
        f"created    {record.created_at or '-'}",
        f"updated    {record.updated_at or '-'}",
    ]
    if record.thread_id is not None:
        lines.append(f"thread     {record.thread_id}, turn {record.turn}")
    if record.parent_run_id:
        routed = f", its update routed as {routed_as}" if routed_as else ""
        lines.append(f"forked     from {record.parent_run_id} at step {record.parent_step}{routed}")
    if record.stopped_by and record.status not in ENDED_STATUSES:  # the status names a rule
        lines.append(f"stopped by {record.stopped_by}")
    if record.error:
        lines.append(f"error      {record.error}")
    if record.interrupt is not None:
        lines.append(f"waiting on {_dumps(record.interrupt)}")
    if record.owner is not None:
        lines.append(f"owner      {record.owner.describe()}, lease until {record.lease_expires}")
    return lines


@click.command("show")
@click.argument("run_id")
@click.option("--step", type=click.IntRange(min=0), help="Show one step and the state after it.")
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option("--graph", "graph_spec", help="The run's graph (default: the archived IR).")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a static HTML report of the run to this file.",
)
def show_command(
    run_id: str, step: int | None, db: str, graph_spec: str | None, html_out: Path | None
) -> None:
    """Show a stored run: summary, steps (writes, next nodes) and state."""
    from stargraph import viz

    with open_store(db, must_exist=True) as store:
        record = store.get_run(run_id)
        ir = _ir_for(graph_spec, db, record, store)
        if html_out is not None:
            if ir is None:
                raise CliUsageError(
                    f"the graph of run {run_id} ({record.graph_hash}) is not archived beside "
                    f"{db}; pass --graph FILE|module:attr to draw it in the report"
                )
            html_out.write_text(viz.html_report(ir, store, run_id), encoding="utf-8")
            click.echo(f"wrote {html_out}", err=True)
            return
        if step is not None and step > record.last_step:
            raise CliError(f"run {run_id} has steps 0..{record.last_step}; there is no step {step}")
        routed_as = _routed_as(store, record) if record.parent_run_id else None
        for line in _summary(record, routed_as):
            click.echo(line)
        click.echo("")
        for view in viz.step_views(store, run_id, step):
            nodes = ", ".join(view.nodes) or "input"
            nxt = ", ".join(view.next) or "-"
            click.echo(f"step {view.step}  {view.time}  {nodes}  -> {nxt}")
            for node, writes in view.writes:
                click.echo(f"    {node}: {_dumps(writes)}")
            for engine, template, slots in view.facts:
                click.echo(f"    rule fact ({engine}) {template}: {_dumps(slots)}")
        click.echo("")
        at = record.last_step if step is None else step
        click.echo(f"state after step {at}:")
        click.echo(_state_text(ir, store, run_id, at))


def _state_text(ir: GraphIR | None, store: CheckpointStore, run_id: str, step: int) -> str:
    from stargraph import viz

    if ir is not None:
        return _dumps(viz.state_at(ir, store, run_id, step), indent=2)
    record = store.get_steps(run_id, start=step, end=step)
    if record and record[0].snapshot is not None:
        return _dumps(record[0].snapshot, indent=2)
    return "  (unknown: pass --graph to rebuild the state through the graph's reducers)"


def diff_runs(
    store: CheckpointStore,
    run_a: str,
    run_b: str,
    *,
    ir_a: GraphIR | None = None,
    ir_b: GraphIR | None = None,
) -> list[str]:
    """Differences between two stored runs, step by step, then status and final state.

    Empty when the runs made the same writes in the same steps and ended the same way.
    """
    from stargraph import viz

    rec_a, rec_b = store.get_run(run_a), store.get_run(run_b)
    out: list[str] = []
    if rec_a.graph_hash != rec_b.graph_hash:
        out.append(f"graph: A = {rec_a.graph_hash}  B = {rec_b.graph_hash}")
    for sa, sb in align_steps(store.get_steps(run_a), store.get_steps(run_b)):
        if sb is None:
            assert sa is not None
            nodes = ", ".join(w.node for w in sa.writes)
            out.append(f"step {sa.step}: only in A ({nodes})")
            continue
        if sa is None:
            nodes = ", ".join(w.node for w in sb.writes)
            out.append(f"step {sb.step}: only in B ({nodes})")
            continue
        k = sa.step if sa.step == sb.step else f"{sa.step} (B: step {sb.step})"
        if sa.step == sb.step == 0:
            for line in value_changes(sa.snapshot, sb.snapshot, ""):
                out.append(f"step 0 input {line}")
        writes_a = {(w.node, w.index): w.writes for w in sa.writes}
        writes_b = {(w.node, w.index): w.writes for w in sb.writes}
        for key in sorted(set(writes_a) | set(writes_b)):
            label = key[0] if key[1] == 0 else f"{key[0]}[{key[1]}]"
            if key not in writes_b:
                out.append(f"step {k} {label}: ran only in A")
            elif key not in writes_a:
                out.append(f"step {k} {label}: ran only in B")
            else:
                out += [
                    f"step {k} {label} {c}" for c in value_changes(writes_a[key], writes_b[key], "")
                ]
        next_a = [(t.node, t.index) for t in sa.next]
        next_b = [(t.node, t.index) for t in sb.next]
        if next_a != next_b:
            out.append(f"step {k} next: A = {[n for n, _ in next_a]}  B = {[n for n, _ in next_b]}")
    for name in ("status", "stopped_by", "error"):
        va, vb = getattr(rec_a, name), getattr(rec_b, name)
        if va != vb:
            out.append(f"{name}: A = {va}  B = {vb}")
    if ir_a is not None and ir_b is not None:
        state_a = viz.state_at(ir_a, store, run_a)
        state_b = viz.state_at(ir_b, store, run_b)
        out += [f"final state {c}" for c in value_changes(state_a, state_b, "")]
    return out


@click.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option("--graph", "graph_spec", help="Graph of both runs (default: archived IRs).")
def diff_command(run_a: str, run_b: str, db: str, graph_spec: str | None) -> None:
    """Compare two runs step by step (writes, next nodes, outcome, final state).

    Exit status as diff(1): 0 when the runs are the same, 1 when they differ, 2 on trouble.
    """
    try:
        with open_store(db, must_exist=True) as store:
            rec_a, rec_b = store.get_run(run_a), store.get_run(run_b)
            lines = diff_runs(
                store,
                run_a,
                run_b,
                ir_a=_ir_for(graph_spec, db, rec_a, store),
                ir_b=_ir_for(graph_spec, db, rec_b, store),
            )
    except CliError as exc:
        raise CliUsageError(exc.message) from exc.__cause__
    except Exception as exc:
        raise CliUsageError(describe_error(exc)) from exc
    if not lines:
        click.echo(f"runs {run_a} and {run_b} are the same", err=True)
        return
    click.echo(f"--- {run_a}\n+++ {run_b}")
    for line in lines:
        click.echo(line)
    sys.exit(1)
