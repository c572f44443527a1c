"""``stargraph proposals``: what agents proposed (tools, skills, config changes), for a human
to list, read, approve or reject.

Proposals live in a :class:`~stargraph.skills.machine.ProposalStore` (SQLite), by default
beside the run database; nothing is installed until a human approves it here.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import click

from stargraph.cli._load import DEFAULT_DB, CliError, CliUsageError, importable_cwd
from stargraph.cli._output import print_table
from stargraph.cli._plugins import installed_registry
from stargraph.errors import ProposalStateError

__all__ = ["DEFAULT_PROPOSALS_DB", "proposals_group"]

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


@click.group("proposals")
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
    print_table(header, rows)


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
    new = store.approve(
        proposal.id, installed_registry().tool_registry(), implementation=implementation, note=note
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
