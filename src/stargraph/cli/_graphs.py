"""Commands on a graph itself: ``compile`` (validate, print the hash), ``hash`` (without
importing callables) and ``draw`` (Mermaid, DOT, PNG, SVG)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from stargraph.cli._load import CliUsageError, compile_target, load_target

__all__ = ["compile_command", "draw_command", "hash_command"]


@click.command("compile")
@click.argument("graph")
def compile_command(graph: str) -> None:
    """Validate GRAPH (every problem at once) and print its graph hash."""
    from stargraph.checkpoint import MemoryStore

    target = load_target(graph)
    # With a store, as `run` compiles it: a graph that interrupts needs one and is valid.
    app = compile_target(target, store=MemoryStore())
    click.echo(app.graph_hash)


@click.command("hash")
@click.argument("graph")
def hash_command(graph: str) -> None:
    """Print the graph hash of GRAPH without importing its callables."""
    click.echo(load_target(graph).ir.graph_hash)


@click.command("draw")
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
