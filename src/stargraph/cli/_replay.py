"""``stargraph replay``: replay a stored run or a cassette offline, or branch a counterfactual.

* ``stargraph replay RUN_ID`` / ``stargraph replay run.cassette.json`` re-executes the run from
  its record (no model call, no tool body, nothing written) and prints its events; a replay
  that diverges from the record exits 1 with the divergence (and the request diff). Before
  it starts it prints the nodes whose bodies run again (what they do outside the record
  happens again); ``--stub all`` or ``--stub NODE,NODE`` serves their recorded writes
  instead (``CompiledGraph.replay(stub=)``).
* ``--from-step K --set key=value ...`` forks the run before step ``K`` with those channel
  writes and runs the fork *live* from there (``CompiledGraph.replay(from_step=, mutate=)``),
  then prints how the new run differs from its parent (``stargraph.replay.diff``).
* ``--export FILE`` writes the stored run as a cassette.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import click

from stargraph.cli import _load
from stargraph.cli._load import DEFAULT_DB, CliError, CliUsageError, resolve_db
from stargraph.errors import ReplayError

__all__ = ["format_run_diff", "parse_assignments", "parse_stub", "plan_line", "replay_command"]


def parse_assignments(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``("count=3", "name=bob")`` -> ``{"count": 3, "name": "bob"}``; values are JSON when
    they parse as JSON, else plain strings."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise CliUsageError(
                f"--set expects key=value (a channel and its new value), got {pair!r}; "
                "e.g. --set counter=3 or --set 'items=[\"a\"]'"
            )
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _where(step: Any) -> str:
    """``step K``, or which side a step is on when the two runs number it differently."""
    if step.step_a is None:
        return f"step {step.step_b} (B only)"
    if step.step_b is None:
        return f"step {step.step_a} (A only)"
    if step.step_a != step.step_b:
        return f"step {step.step_a} (B: step {step.step_b})"
    return f"step {step.step}"


def format_run_diff(run_diff: Any) -> list[str]:
    """Lines describing a :class:`stargraph.replay.RunDiff` (empty when the runs agree)."""
    lines: list[str] = []
    for step in run_diff.steps:
        if step.step_a is None or step.step_b is None:  # a step only one side has
            writes, then = (
                (step.writes_b, step.next_b)
                if step.step_a is None
                else (
                    step.writes_a,
                    step.next_a,
                )
            )
            lines.append(f"{_where(step)}: writes {_dumps(writes)}; next {then}")
            continue
        parts = []
        if step.writes_a != step.writes_b:
            parts.append(f"writes A = {_dumps(step.writes_a)}  B = {_dumps(step.writes_b)}")
        if step.next_a != step.next_b:
            parts.append(f"next A = {step.next_a}  B = {step.next_b}")
        if step.facts_differ:
            parts.append("rule facts differ")
        lines.append(f"{_where(step)}: " + ("; ".join(parts) or "input differs"))
    if run_diff.status_a != run_diff.status_b:
        lines.append(f"status: A = {run_diff.status_a}  B = {run_diff.status_b}")
    return lines


@click.command("replay")
@click.argument("source", required=False)
@click.option(
    "--cassette",
    "cassette_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Replay this cassette file (instead of SOURCE).",
)
@click.option(
    "--graph",
    "graph_spec",
    help="The graph to replay with (default: the run's archived graph); another version of "
    "it replays region by region.",
)
@click.option(
    "--live",
    is_flag=True,
    help="With --graph of another version: changed regions use the graph's services.",
)
@click.option(
    "--on-inputs",
    type=click.Choice(["run", "stop"]),
    default="run",
    show_default=True,
    help="With --graph of another version: an unchanged region whose input changed "
    "upstream runs, or stops the replay.",
)
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option(
    "--from-step",
    type=click.IntRange(min=1),
    help="Counterfactual: fork before step K and run live from there.",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="KEY=VALUE",
    help="With --from-step: a channel write (JSON value, else a string); repeatable.",
)
@click.option(
    "--export",
    "export_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the stored run as a cassette to this file.",
)
@click.option(
    "--stub",
    "stub_spec",
    metavar="all|must|NODE,NODE",
    help="Serve these nodes' recorded writes instead of running their bodies: all, must "
    "(only must_stub nodes, the default) or node names (site/node inside a subgraph).",
)
@click.option("--quiet", "-q", is_flag=True, help="Do not print the replayed events.")
def replay_command(
    *,
    source: str | None,
    cassette_path: str | None,
    graph_spec: str | None,
    live: bool,
    on_inputs: str,
    db: str,
    from_step: int | None,
    assignments: tuple[str, ...],
    export_path: Path | None,
    stub_spec: str | None,
    quiet: bool,
) -> None:
    """Replay SOURCE (a run id in --db, or a cassette file) offline and print its events.

    Exit status: 0 when the replay matches the record, 1 when it diverges (the divergence and
    the request diff are printed). With --from-step K a counterfactual run is made from the
    stored run and its differences from the parent are printed.

    With --graph naming another version of the run's graph, the run is replayed against it
    region by region: unchanged regions are served from the record, changed ones run their
    new code (--live: with the graph's services); the per-region report and the final-state
    diff are printed, exit 0 when the new version reproduces the record, else 1.
    """
    from stargraph import replay as replay_pkg
    from stargraph.checkpoint import Recording

    if (source is None) == (cassette_path is None):
        raise CliUsageError(
            "give a run id (or a cassette file) as SOURCE, or --cassette FILE: exactly one"
        )
    if source is None:
        assert cassette_path is not None
        source = cassette_path
    if graph_spec is not None and _across(
        source, graph_spec, db, live=live, on_inputs=on_inputs, from_step=from_step
    ):
        return

    mutate = parse_assignments(assignments)
    if mutate and from_step is None:
        raise CliUsageError("--set needs --from-step K (the step whose state it changes)")
    stub = parse_stub(stub_spec)
    if stub_spec is not None and from_step is not None:
        raise CliUsageError(
            "--stub is for an offline replay; --from-step K runs the fork live from step K, "
            "so there is nothing to stub: drop one of them"
        )
    if Path(source).is_file():
        if from_step is not None or export_path is not None:
            raise CliUsageError(
                "--from-step and --export need a run id in --db, not a cassette file "
                f"({source}); a counterfactual continues a stored run"
            )
        cassette = replay_pkg.load_cassette(source)
        target = _load.graph_for(
            graph_spec, db, cassette.run.graph_hash, purpose="replay it", what="recording"
        )
        app = _load.compile_target(target)
        _replay(app, cassette, cassette.run.run_id, stub=stub, quiet=quiet)
        return
    with _load.open_store(db, must_exist=True) as store:
        record = store.get_run(source)
        target = _load.graph_for(graph_spec, db, record.graph_hash, purpose="replay it")
        app = _load.compile_target(target, store=store, run_id=source)
        try:
            if from_step is None:
                _replay(app, source, source, stub=stub, quiet=quiet)
            else:
                new_id = f"{source}~from{from_step}-{secrets.token_hex(3)}"
                _load.archive_ir(db, app.ir, spec=graph_spec)
                app.replay(source, from_step=from_step, mutate=mutate, new_run_id=new_id)
                changed = ", ".join(f"{k}={_dumps(v)}" for k, v in mutate.items()) or "no changes"
                click.echo(
                    f"counterfactual run {new_id}: fork of {source} before step {from_step} "
                    f"with {changed}; status {store.get_run(new_id).status}"
                )
                run_diff = replay_pkg.diff(
                    Recording.from_store(store, source), Recording.from_store(store, new_id)
                )
                lines = format_run_diff(run_diff)
                if not lines:
                    click.echo(f"no differences from {source}")
                else:
                    click.echo(f"--- {source}\n+++ {new_id}")
                    for line in lines:
                        click.echo(line)
            if export_path is not None:
                replay_pkg.export_cassette(store, source, export_path)
                click.echo(f"wrote cassette {export_path}", err=True)
        finally:
            app.close()


def parse_stub(spec: str | None) -> str | frozenset[str]:
    """``--stub``: ``all``, ``must`` (also when not given) or comma-separated node names."""
    if spec is None or spec.strip() == "must":
        return "must"
    if spec.strip() == "all":
        return "all"
    names = frozenset(name.strip() for name in spec.split(",") if name.strip())
    if not names:
        raise CliUsageError(
            f"--stub expects all, must or node names separated by commas, got {spec!r}; "
            "e.g. --stub all or --stub fetch,save"
        )
    return names


def plan_line(plan: Any) -> str:
    """The line printed before a replay starts: the nodes whose bodies run again."""
    if not plan.reruns:
        return (
            f"replay of run {plan.run_id}: no node body runs again (every recorded node's "
            "writes are served from the record)"
        )
    return (
        f"replay of run {plan.run_id} runs these node bodies again: "
        f"{', '.join(plan.reruns)}; their model, tool and ctx.once calls come from the "
        "record, anything else they do (files, services) happens again; --stub all serves "
        f"their recorded writes instead (or --stub {','.join(plan.reruns)})"
    )


def _replay(app: Any, source: Any, run_id: str, *, stub: Any, quiet: bool) -> None:
    from stargraph.cli._live import describe_event

    steps = 0
    try:
        plan = app.replay_plan(source, stub=stub)
    except ReplayError as exc:
        raise CliError(f"cannot replay run {run_id}: {exc}".rstrip()) from exc
    click.echo(plan_line(plan), err=True)
    try:
        for event in app.replay_stream(source, stub=stub):
            if not event.path and event.kind == "step_completed":
                steps += 1
            line = describe_event(event)
            if line is not None and not quiet:
                click.echo(line)
    except ReplayError as exc:
        raise CliError(f"replay of run {run_id} diverged from its record: {exc}".rstrip()) from exc
    click.echo(f"replay of run {run_id} matches its record ({steps} steps, offline)", err=True)


def _across(
    source: str,
    graph_spec: str,
    db: str,
    *,
    live: bool,
    on_inputs: str,
    from_step: int | None,
) -> bool:
    """Replay ``source`` against ``--graph`` region by region when that graph is another
    version than the one that recorded it (``False``: it is the same, replay as usual)."""
    from stargraph import replay as replay_pkg
    from stargraph.checkpoint import Recording
    from stargraph.runtime._plan import ChildRunId
    from stargraph.runtime._versions import region_hashes, replay_across

    target = _load.load_target(graph_spec)
    children: dict[str, Recording] | None = None  # a cassette carries its own
    if Path(source).is_file():
        recording: Recording = replay_pkg.load_cassette(source)
        regions = dict(getattr(recording, "regions", None) or {})
    else:
        with _load.open_store(db, must_exist=True) as store:
            recording = Recording.from_store(store, source)
            # The child runs, for a changed skill to be replayed region by region inside.
            children = {
                r.run_id: Recording.from_store(store, r.run_id)
                for r in store.list_runs(limit=1_000_000)
                if ChildRunId.descends(r.run_id, source)
            }
        regions = _load.archived_regions(db, recording.run.graph_hash) or {}
    if recording.run.graph_hash == target.ir.graph_hash:
        return False
    if from_step is not None:
        raise CliUsageError(
            f"--from-step forks a run of its own graph, but --graph {graph_spec} is another "
            f"version ({target.ir.graph_hash}, the run's is {recording.run.graph_hash})"
        )
    if not regions:
        old = _load.archived_target(db, recording.run.graph_hash)
        if old is None:
            raise CliUsageError(
                f"run {recording.run.run_id} was recorded by graph {recording.run.graph_hash}, "
                f"whose regions are neither in the cassette nor archived beside {db}; export "
                "the cassette with export_cassette(..., graph=app) (or stargraph check "
                "--record) to replay it against another version"
            )
        regions = region_hashes(_load.compile_target(old).plan)
    app = _load.compile_target(target)
    try:
        report = replay_across(
            app.steploop,
            recording,
            regions,
            live=live,
            on_inputs="stop" if on_inputs == "stop" else "run",
            children=None if children is None else children.get,
        )
    except ReplayError as exc:
        raise CliError(
            f"replay of run {recording.run.run_id} against {graph_spec} stopped: {exc}".rstrip()
        ) from exc
    finally:
        app.close()
    for region in report.regions:
        why = f" ({region.reason})" if region.reason else ""
        mark = " [changed]" if region.changed else ""
        click.echo(
            f"{region.status:11} {region.region}{mark}{why}: {region.served} served, "
            f"{region.executed} run"
        )
    for line in report.changes:
        click.echo(f"final state: {line}")
    if report.identical:
        click.echo(f"run {report.run_id}: the new version reproduces the record", err=True)
        return True
    changed = ", ".join(report.changed_regions) or "none"
    raise CliError(
        f"run {report.run_id} differs under the new version (changed regions: {changed})"
    )
