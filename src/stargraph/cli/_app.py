"""The ``stargraph`` click group, its error handling, and the graph commands.

Run-inspection commands (``runs``, ``show``, ``diff``) live in ``_inspect``; this module
registers them. Every failure is reported as one paragraph on stderr (``error: ...``) with
exit status 1; usage errors exit 2; ``--debug`` adds the traceback.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click

from stargraph.cli._load import (
    DEFAULT_DB,
    CliError,
    CliUsageError,
    archive_ir,
    compile_target,
    graph_for,
    importable_cwd,
    load_target,
    open_store,
    parse_json,
    refuse_another_store,
)
from stargraph.errors import (
    GraphHashMismatch,
    InvalidInputError,
    ProposalNotFoundError,
    ProposalStateError,
    RunCancelledError,
    RunError,
    RunNotFoundError,
    RunNotResumableError,
    StargraphError,
)
from stargraph.ir import StaticEdgeIR
from stargraph.runtime import SignalScope, cancel_on_signals

__all__ = ["cli"]


def _describe_error(exc: BaseException) -> str:
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


class _Group(click.Group):
    """A group that turns every error into one paragraph (and a traceback with --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            if ctx.params.get("debug") and exc.__cause__ is not None:
                traceback.print_exception(exc)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (`stargraph runs | head`): click's main exits quietly.
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                traceback.print_exc()
            raise CliError(_describe_error(exc)) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="STARGRAPH_DEBUG", help="Show tracebacks.")
@click.version_option(package_name="stargraph", prog_name="stargraph")
def cli(debug: bool) -> None:
    """stargraph: compile agent workflows into content-hashed graphs and run them durably.

    GRAPH arguments are a Python file (triage.py, or triage.py:graph to pick one graph), a
    reference module:attr to a Graph, a CompiledGraph or a function returning one, or an IR
    JSON file. Every command imports your code with the current directory on sys.path.
    Runs are kept in SQLite (--db, default .stargraph/stargraph.db).
    """
    importable_cwd()


# --------------------------------------------------------------------------- graphs


@cli.command("compile")
@click.argument("graph")
def compile_command(graph: str) -> None:
    """Validate GRAPH (every problem at once) and print its graph hash."""
    from stargraph.checkpoint import MemoryStore

    target = load_target(graph)
    # With a store, as `run` compiles it: a graph that interrupts needs one and is valid.
    app = compile_target(target, store=MemoryStore())
    click.echo(app.graph_hash)


@cli.command("hash")
@click.argument("graph")
def hash_command(graph: str) -> None:
    """Print the graph hash of GRAPH without importing its callables."""
    click.echo(load_target(graph).ir.graph_hash)


@cli.command("draw")
@click.argument("graph")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["mermaid", "dot", "png", "svg"]),
    default="mermaid",
    show_default=True,
    help="Mermaid/DOT text need nothing; PNG/SVG need Graphviz's `dot`.",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), help="File.")
def draw_command(graph: str, fmt: str, output: Path | None) -> None:
    """Draw GRAPH as Mermaid, DOT, PNG or SVG (to stdout, or to -o FILE)."""
    from stargraph import viz

    ir = load_target(graph).ir
    if fmt in ("mermaid", "dot"):
        text = viz.to_mermaid(ir) if fmt == "mermaid" else viz.to_dot(ir)
        if output is None:
            click.echo(text, nl=False)
        else:
            output.write_text(text, encoding="utf-8")
            click.echo(f"wrote {output}", err=True)
        return
    if output is None and sys.stdout.isatty():
        raise CliUsageError(f"refusing to write {fmt.upper()} to a terminal; pass -o FILE")
    data = viz.render(ir, "png" if fmt == "png" else "svg")
    if output is None:
        click.echo(data, nl=False)  # click writes bytes to the binary stdout
    else:
        output.write_bytes(data)
        click.echo(f"wrote {output}", err=True)


# --------------------------------------------------------------------------- running


def _resume_hint(run_id: str, spec: str, db: str, extra: str = "") -> str:
    db_part = "" if db == DEFAULT_DB else f" --db {shlex.quote(db)}"
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
        what = f"paused {kind} node(s) {nodes} at step {info.get('step')}"
        extra = " [--update JSON]"
    elif kind == "rule":
        reason = f" ({info['reason']})" if info.get("reason") else ""
        what = f"rule {info.get('rule')} interrupted the run{reason}"
    else:
        what = json.dumps(interrupt, ensure_ascii=False, sort_keys=True, default=str)
    return f"run {run_id} is waiting: {what}; continue it with: " + _resume_hint(
        run_id, spec, db, extra
    )


def _view(live: bool | None, quiet: bool) -> Any:
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


def _drive(events: Any, view: Any) -> Any:
    """Consume a run's events through ``view``; return the root run's last outcome event."""
    from stargraph.cli._live import watch
    from stargraph.runtime import RunFinished, RunInterrupted

    outcome = None
    for event in watch(events, view):
        if not event.path and isinstance(event, RunFinished | RunInterrupted):
            outcome = event
    return outcome


def _report(outcome: Any, app: Any, run_id: str, spec: str, db: str) -> None:
    from stargraph.runtime import RunFinished

    if isinstance(outcome, RunFinished):
        click.echo(json.dumps(outcome.state, indent=2, ensure_ascii=False, default=str))
        return
    record = app.get_run(run_id)
    click.echo(waiting_message(run_id, record.interrupt, spec, db))


_run_options = [
    click.option("--db", default=DEFAULT_DB, show_default=True, help="SQLite run database."),
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


@cli.command("run")
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
    data = parse_json(input_json, "--input")
    if data is not None and not isinstance(data, dict):
        raise CliUsageError(f"--input must be a JSON object, got {type(data).__name__}")
    target = load_target(graph)
    refuse_another_store(target, db)
    run_id = run_id or f"run-{secrets.token_hex(6)}"
    with open_store(db, must_exist=False) as store:
        app = compile_target(target, store=store, max_steps=max_steps)
        archive_ir(db, app.ir, spec=graph)
        hint = _resume_hint(run_id, graph, db)
        try:
            with cancel_on_signals(announce=not quiet) as signals:
                outcome = _drive(app.stream(data or {}, run_id=run_id), _view(live, quiet))
        except RunCancelledError as exc:
            raise _stopped(exc, signals, store, run_id, hint) from exc
        except (KeyboardInterrupt, SystemExit) as exc:
            if not signals.forced:
                raise
            raise _stopped(exc, signals, store, run_id, hint) from exc
        except RunError as exc:
            if not _stored(store, run_id):
                # Refused before anything was stored (an --input that does not fit): there
                # is no run to resume.
                error = CliUsageError if isinstance(exc, InvalidInputError) else CliError
                raise error(f"no run was started: {_describe_error(exc)}") from exc
            if exc.run_id == run_id or exc.run_id is None:
                raise CliError(
                    f"{_describe_error(exc)}. The run is kept: fix the cause and continue it "
                    f"with: {_resume_hint(run_id, graph, db)}"
                ) from exc
            raise
        finally:
            app.close()
        _report(outcome, app, run_id, graph, db)


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


@cli.command("resume")
@click.argument("run_id")
@click.option("--response", help="Answer to the run's interrupt, as JSON (or @file.json).")
@click.option("--update", help="Channel writes to apply before continuing, as a JSON object.")
@click.option(
    "--graph",
    "graph_spec",
    help="The graph that made the run (default: the IR archived when `stargraph run` ran it).",
)
@_with_run_options
def resume_command(
    *,
    run_id: str,
    response: str | None,
    update: str | None,
    graph_spec: str | None,
    db: str,
    max_steps: int | None,
    quiet: bool,
    live: bool | None,
) -> None:
    """Continue a stored run after its last committed step (never re-running a step)."""
    options: dict[str, Any] = {}
    if response is not None:
        options["response"] = parse_json(response, "--response")
    updates = parse_json(update, "--update")
    if updates is not None:
        if not isinstance(updates, dict):
            raise CliUsageError("--update must be a JSON object of channel writes")
        options["update"] = updates
    if max_steps is not None:
        options["max_steps"] = max_steps
    with open_store(db, must_exist=True) as store:
        record = store.get_run(run_id)
        target = graph_for(graph_spec, db, record.graph_hash, purpose="resume it")
        app = compile_target(target, store=store)
        hint = _resume_hint(run_id, target.spec, db)
        try:
            with cancel_on_signals(announce=not quiet) as signals:
                outcome = _drive(app.resume_stream(run_id, **options), _view(live, quiet))
        except RunCancelledError as exc:
            raise _stopped(exc, signals, store, run_id, hint) from exc
        except (KeyboardInterrupt, SystemExit) as exc:
            if not signals.forced:
                raise
            raise _stopped(exc, signals, store, run_id, hint) from exc
        except GraphHashMismatch as exc:
            raise CliError(
                f"run {run_id} was recorded by graph {exc.stored}, but {target.spec} is graph "
                f"{exc.current}; resume it with the graph that made it (a migration needs "
                "CompiledGraph.resume(migration=...) in Python)"
            ) from exc
        finally:
            app.close()
        _report(outcome, app, run_id, target.spec, db)


# --------------------------------------------------------------------------- rules


@cli.group("rules")
def rules_group() -> None:
    """Rule packs (stargraph.fathom)."""


@rules_group.command("check")
@click.argument("pack", type=click.Path(exists=True, dir_okay=False))
@click.option("--graph", "graph_spec", help="Also check fact fields and goto targets.")
def rules_check_command(pack: str, graph_spec: str | None) -> None:
    """Check a rule pack (.clp or .json spec) before any run; print its id and hash."""
    from stargraph import fathom
    from stargraph.graph import Graph

    loaded = fathom.RulePack.load(pack)
    options: dict[str, Any] = {}
    if graph_spec is not None:
        target = load_target(graph_spec)
        graph = target.graph if target.graph is not None else None
        state = target.compiled.state_model if target.compiled is not None else None
        if state is None:
            state = (graph or Graph(target.ir)).state
        options["fact_fields"] = fathom.fact_fields(state)
        successors: dict[str, set[str]] = {str(n.id): set() for n in target.ir.nodes}
        for edge in target.ir.edges:
            if isinstance(edge, StaticEdgeIR):
                for source in edge.sources:
                    successors.setdefault(source, set()).add(edge.target)
            else:
                successors.setdefault(edge.source, set()).update(edge.mapping.values())
        options["successors"] = successors
    fathom.validate_pack(loaded, **options)
    click.echo(f"ok: rule pack {loaded.id}@{loaded.version} {loaded.source_hash}")


# --------------------------------------------------------------------------- proposals

DEFAULT_PROPOSALS_DB: Final = str(Path(DEFAULT_DB).parent / "proposals.db")
"""Where proposals are kept unless ``--db`` says otherwise: beside the run database."""

_proposals_db = click.option(
    "--db",
    default=DEFAULT_PROPOSALS_DB,
    show_default=True,
    help="SQLite proposals database (a ProposalStore).",
)


def _open_proposals(db: str) -> Any:
    """The :class:`ProposalStore` at ``db``; refuses to create an empty one."""
    from stargraph.skills.machine import ProposalStore

    if not Path(db).is_file():
        raise CliError(
            f"no proposals database at {db}; proposals are made by agents through the "
            "propose.tool / propose.skill / propose.config_change tools of a ProposalStore, "
            "or pass --db PATH to the database that holds them"
        )
    # allowed_tools of a proposed skill were checked against the proposing agent's tools
    # when it was submitted; this command does not know that agent's tool set.
    return ProposalStore(db)


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


@cli.group("proposals")
def proposals_group() -> None:
    """Proposals made by agents (new tools, skills, config changes), for a human to decide.

    The propose.* tools only store pending proposals; nothing is installed until approved.
    """


@proposals_group.command("list")
@click.option(
    "--status", type=click.Choice(["pending", "approved", "rejected"]), help="Only this status."
)
@click.option(
    "--kind", type=click.Choice(["tool", "skill", "config_change"]), help="Only this kind."
)
@click.option("--json", "as_json", is_flag=True, help="Print the proposals as JSON.")
@_proposals_db
def proposals_list(status: str | None, kind: str | None, as_json: bool, db: str) -> None:
    """List proposals in submission order: id, kind, status, subject, lane, created."""
    with _open_proposals(db) as store:
        found = store.list(status=status, kind=kind)
    if as_json:
        data = [{**p.model_dump(mode="json"), "subject": p.subject} for p in found]
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    if not found:
        what = " ".join(x for x in (status, kind) if x) or "any"
        click.echo(f"no proposals ({what}) in {db}", err=True)
        return
    rows = [
        (p.id, p.kind, p.status, p.subject, p.lane, _when(p.created_at), p.rationale) for p in found
    ]
    header = ("ID", "KIND", "STATUS", "SUBJECT", "LANE", "CREATED (UTC)", "RATIONALE")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


@proposals_group.command("show")
@click.argument("proposal_id")
@_proposals_db
def proposals_show(proposal_id: str, db: str) -> None:
    """Show one proposal as JSON: its payload, status, decision and decision log."""
    with _open_proposals(db) as store:
        proposal = store.get(proposal_id)
        log = store.log(proposal_id)
    data = {**proposal.model_dump(mode="json"), "subject": proposal.subject, "log": log}
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True))


def _implementation(ref: str) -> Any:
    """The tool ``module:attr`` names (a tool, or a zero-argument function returning one)."""
    from stargraph.refs import resolve_ref
    from stargraph.tools import ToolSpec

    importable_cwd()
    try:
        obj = resolve_ref(ref)
    except (ImportError, AttributeError) as exc:
        raise CliError(
            f"cannot import --implementation {ref!r}: {exc}; pass module:attr naming the tool, "
            "run from your project directory or add it to PYTHONPATH"
        ) from exc
    if not isinstance(getattr(obj, "spec", None), ToolSpec) and callable(obj):
        obj = obj()
    if not isinstance(getattr(obj, "spec", None), ToolSpec):
        raise CliError(
            f"--implementation {ref!r} is a {type(obj).__name__}, not a tool (e.g. a function "
            "decorated with @stargraph.tools.tool)"
        )
    return obj


@proposals_group.command("approve")
@click.argument("proposal_id")
@click.option(
    "--agent-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Skill proposals: the agent directory the SkillSpec is written to as NAME.json "
    "[default: skills].",
)
@click.option(
    "--implementation",
    metavar="MODULE:ATTR",
    help="Tool proposals (required): the tool a human wrote for the proposed manifest.",
)
@click.option("--note", default="", help="A note recorded with the approval.")
@_proposals_db
def proposals_approve(
    proposal_id: str, agent_dir: Path | None, implementation: str | None, note: str, db: str
) -> None:
    """Approve a pending proposal, producing a new registry version.

    A skill proposal is written to AGENT_DIR/NAME.json, where the next registry build loads
    it; a tool proposal needs --implementation; a config change prints the new values.
    """
    with _open_proposals(db) as store:
        proposal = store.get(proposal_id)
        if implementation is not None and proposal.kind != "tool":
            raise CliUsageError(
                f"--implementation is for tool proposals; {proposal_id} is a {proposal.kind} "
                "proposal"
            )
        if agent_dir is not None and proposal.kind != "skill":
            raise CliUsageError(
                f"--agent-dir is for skill proposals; {proposal_id} is a {proposal.kind} proposal"
            )
        if proposal.status != "pending":
            raise ProposalStateError(
                f"proposal {proposal_id!r} is already {proposal.status}; only pending "
                "proposals can be approved or rejected"
            )
        if proposal.kind == "skill":
            _approve_skill(store, proposal, agent_dir or Path("skills"), note)
        elif proposal.kind == "tool":
            if implementation is None:
                raise CliUsageError(
                    f"{proposal_id} proposes tool {proposal.subject!r} as a manifest only; "
                    "write the tool and approve with --implementation module:attr"
                )
            _approve_tool(store, proposal, _implementation(implementation), note)
        else:
            merged = store.approve(proposal_id, {}, note=note)
            version = store.get(proposal_id).registry_version
            click.echo(f"approved {proposal_id} (config change, version {version}); new values:")
            click.echo(json.dumps(dict(merged), indent=2, ensure_ascii=False, sort_keys=True))


def _approve_skill(store: Any, proposal: Any, agent_dir: Path, note: str) -> None:
    from stargraph.skills.machine import SkillSpecRegistry, builtin_skillspecs

    spec = store.spec_of(proposal)
    target = agent_dir / f"{spec.name}.json"
    # The new registry version: built-ins and the agent directory as they are, plus this
    # skill (non-strict, so an unrelated bad file there does not block the decision).
    base = SkillSpecRegistry.build(
        builtins=builtin_skillspecs(),
        agent_dir=agent_dir if agent_dir.is_dir() else None,
        strict=False,
    )
    # Written to a temporary file first: a directory we cannot write to fails before the
    # proposal is marked approved; the rename after the approval makes it last.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        agent_dir.mkdir(parents=True, exist_ok=True)
        tmp.write_text(
            json.dumps(spec.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    except OSError as exc:
        raise CliError(
            f"cannot write {target}: {exc.strerror or exc}; pass --agent-dir DIR with a "
            "directory you can write to (nothing was approved)"
        ) from exc
    try:
        new = store.approve(proposal.id, base, note=note)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    replaced = target.exists()
    tmp.replace(target)
    click.echo(
        f"approved {proposal.id} (skill {spec.name}): {'replaced' if replaced else 'wrote'} "
        f"{target}; skill registry version {new.version}"
    )


def _approve_tool(store: Any, proposal: Any, implementation: Any, note: str) -> None:
    from stargraph.cli._registry import _registry

    new = store.approve(
        proposal.id, _registry().tool_registry(), implementation=implementation, note=note
    )
    click.echo(
        f"approved {proposal.id} (tool {implementation.spec.id}); tool registry version "
        f"{new.digest}. Register the implementation in your plugin (hook register_tools) "
        "so agents get it."
    )


@proposals_group.command("reject")
@click.argument("proposal_id")
@click.option("--reason", required=True, help="Why (recorded with the decision).")
@_proposals_db
def proposals_reject(proposal_id: str, reason: str, db: str) -> None:
    """Reject a pending proposal, recording --reason."""
    if not reason.strip():
        raise CliUsageError("--reason must say why the proposal is rejected")
    with _open_proposals(db) as store:
        rejected = store.reject(proposal_id, reason)
    click.echo(f"rejected {rejected.id} ({rejected.kind} {rejected.subject}): {reason}")


# Registered last: the inspection commands import this module's group.
from stargraph.cli import _inspect  # noqa: E402
from stargraph.cli._registry import plugins_group, skills_group  # noqa: E402
from stargraph.cli._replay import replay_command  # noqa: E402
from stargraph.cli._ui import ui_command  # noqa: E402
from stargraph.cli._workers import fork_command, submit_command, worker_command  # noqa: E402

_inspect.register(cli)
for _command in (
    replay_command,
    skills_group,
    plugins_group,
    fork_command,
    submit_command,
    worker_command,
    ui_command,
):
    cli.add_command(_command)
