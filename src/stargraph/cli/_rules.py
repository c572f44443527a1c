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
    """Validate ``pack`` with every state field it reads declared as an untyped slot, so
    that syntax, templates, decisions and bounds are still checked in full."""
    from stargraph.fathom import _bounds, _load, _values

    class _Unchecked(_values.FactField):
        """A slot of any type: CLIPS then checks how a rule uses it, not what it holds."""

        __slots__ = ()

        def slot_declaration(self) -> str:
            return "(default nil)"

    read = _state_fields_read(pack)
    fields: dict[str, _values.FactField] = {"done": _values.FactField(bool, False)}
    fields.update((name, _Unchecked(object, True)) for name in read if name != "done")
    if read:
        names = ", ".join(sorted(read))
        click.echo(
            f"warning: rule pack {pack.id!r} reads state fields {names} (sg-state slots), which "
            "are unchecked without the graph's state model; pass --graph FILE.py|module:attr "
            "to check that they are fields marked fathom.Fact() and of the right type",
            err=True,
        )
    _load.load_packs(
        [pack], fields=fields, successors=None, functions={}, bounds=_bounds.DEFAULT_BOUNDS
    )


def _state_fields_read(pack: Any) -> set[str]:
    """The ``sg-state`` slots the rules of ``pack`` match on (none when it does not read)."""
    from stargraph.fathom import _sexpr as sx

    try:
        constructs = sx.read_constructs(pack.source)
    except sx.SourceError:
        return set()  # the check proper reports it, with its line
    found: set[str] = set()
    for c in constructs:
        if c.kind != "defrule":
            continue
        lhs, _ = sx.split_rule(c.tree)
        for pattern in sx.patterns(lhs):
            if pattern.head != "sg-state":
                continue
            for item in pattern.items[1:]:
                if isinstance(item, sx.SExpr) and isinstance(item.head, str):
                    found.add(item.head)
    found.discard("sg-tick")
    return found
