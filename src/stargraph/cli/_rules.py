"""``stargraph rules check``: validate a rule pack before any run, optionally against a
graph's state fields and nodes."""

from __future__ import annotations

from typing import Any

import click

from stargraph.cli._load import load_target
from stargraph.ir import StaticEdgeIR

__all__ = ["rules_group"]


@click.group("rules")
def rules_group() -> None:
    """Rule packs (stargraph.fathom)."""


@rules_group.command("check")
@click.argument("pack", type=click.Path(exists=True, dir_okay=False))
@click.option("--graph", "graph_spec", help="Also check fact fields and goto targets.")
def rules_check_command(pack: str, graph_spec: str | None) -> None:
    """Check a rule pack (.clp or .json spec) before any run; print its id and hash.

    Without --graph the state fields a rule reads (``sg-state`` slots) are unknown: they
    are reported on stderr as unchecked, and the rest of the pack is checked as usual.
    """
    from stargraph import fathom
    from stargraph.graph import Graph

    loaded = fathom.RulePack.load(pack)
    if graph_spec is None:
        _check_without_graph(loaded)
        click.echo(f"ok: rule pack {loaded.id}@{loaded.version} {loaded.source_hash}")
        return
    target = load_target(graph_spec)
    graph = target.graph if target.graph is not None else None
    state = target.compiled.state_model if target.compiled is not None else None
    if state is None:
        state = (graph or Graph(target.ir)).state
    successors: dict[str, set[str]] = {str(n.id): set() for n in target.ir.nodes}
    for edge in target.ir.edges:
        if isinstance(edge, StaticEdgeIR):
            for source in edge.sources:
                successors.setdefault(source, set()).add(edge.target)
        else:
            successors.setdefault(edge.source, set()).update(edge.mapping.values())
    options: dict[str, Any] = {"fact_fields": fathom.fact_fields(state)}
    options["successors"] = successors
    fathom.validate_pack(loaded, **options)
    click.echo(f"ok: rule pack {loaded.id}@{loaded.version} {loaded.source_hash}")


def _check_without_graph(pack: Any) -> None:
    """Validate ``pack`` with every state field it reads left untyped, so that syntax,
    templates, decisions and bounds are still checked in full; warn about those fields."""
    from stargraph import fathom

    unchecked = fathom.validate_pack(pack, open_state=True)
    if unchecked:
        names = ", ".join(sorted(unchecked))
        click.echo(
            f"warning: rule pack {pack.id!r} reads state fields {names} (sg-state slots), which "
            "are unchecked without the graph's state model; pass --graph FILE.py|module:attr "
            "to check that they are fields marked fathom.Fact() and of the right type",
            err=True,
        )
