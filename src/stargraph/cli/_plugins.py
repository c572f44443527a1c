"""``stargraph skills`` and ``stargraph plugins``: what the installed plugins provide.

Both read one registry, ``Registry.build(get_plugin_manager())``: stargraph's built-ins plus
every installed distribution with an entry point in group ``stargraph``.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Any

import click

from stargraph.cli._load import (
    DEFAULT_DB,
    CliUsageError,
    archive_ir,
    open_store,
    parse_object,
    resolve_db,
)
from stargraph.cli._output import drive, print_table, report, view

__all__ = ["installed_registry", "plugins_group", "skills_group"]


def installed_registry() -> Any:
    """The registry of stargraph's built-ins and every installed plugin."""
    from stargraph.plugin import Registry, get_plugin_manager

    return Registry.build(get_plugin_manager())


# --------------------------------------------------------------------------- skills


@click.group("skills")
def skills_group() -> None:
    """Skills registered by stargraph and the installed plugins."""


@skills_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the skills as JSON.")
def skills_list(as_json: bool) -> None:
    """List registered skills: name, version, kind, provider, description."""
    registry = installed_registry()
    rows = [
        (
            name,
            skill.version,
            str(skill.kind),
            registry.provider("skill", name),
            skill.description.splitlines()[0] if skill.description else "",
        )
        for name, skill in registry.skills.items()
    ]
    if as_json:
        keys = ("name", "version", "kind", "provider", "description")
        click.echo(json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2))
        return
    if not rows:
        click.echo(
            "no skills registered; install a plugin that provides some (entry-point group "
            "'stargraph', hook register_skills)",
            err=True,
        )
        return
    print_table(("NAME", "VERSION", "KIND", "PROVIDER", "DESCRIPTION"), rows)


@skills_group.command("show")
@click.argument("name")
def skills_show(name: str) -> None:
    """Show one skill: metadata, tools, declared outputs, graph hash, examples."""
    registry = installed_registry()
    skill = registry.skill(name)
    graph = skill.subgraph
    graph_hash = graph if isinstance(graph, str) else graph.graph_hash if graph else "-"
    lines = [
        f"skill      {skill.name}@{skill.version}",
        f"kind       {skill.kind}",
        f"provider   {registry.provider('skill', name)}",
        f"graph      {graph_hash}",
        f"outputs    {', '.join(skill.declared_outputs) or '-'}",
        f"tools      {', '.join(skill.tools) or '-'}",
        f"requires   {', '.join(skill.requires) or '-'}",
        "",
        skill.description,
    ]
    if skill.system_prompt:
        lines += ["", "system prompt:", skill.system_prompt]
    for i, example in enumerate(skill.examples, 1):
        lines += ["", f"example {i}: {example.description}".rstrip(": ")]
        lines.append(f"  input  {json.dumps(example.input, sort_keys=True)}")
        if example.output is not None:
            lines.append(f"  output {json.dumps(example.output, sort_keys=True)}")
    for line in lines:
        click.echo(line)


@skills_group.command("run")
@click.argument("name")
@click.option("--input", "input_json", help="Input state as JSON (or @file.json).")
@click.option("--run-id", help="Id for the run (default: a fresh random id).")
@click.option(
    "--db", default=DEFAULT_DB, callback=resolve_db, show_default=True, help="SQLite run database."
)
@click.option(
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory the skill's file tools may use (default: a fresh temporary one).",
)
@click.option(
    "--model",
    envvar="STARGRAPH_MODEL",
    default="gpt-4o-mini",
    show_default=True,
    help="Model name for agent skills (endpoint: OPENAI_BASE_URL / OPENAI_API_KEY).",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
@click.option("--live/--plain", default=None, help="Live view or plain lines.")
def skills_run(
    *,
    name: str,
    input_json: str | None,
    run_id: str | None,
    db: str,
    workspace: Path | None,
    model: str,
    quiet: bool,
    live: bool | None,
) -> None:
    """Run skill NAME durably on --input; print its final state (JSON) on stdout.

    Agent skills talk to the OpenAI-compatible endpoint in OPENAI_BASE_URL; every skill's
    tools go through the arbiter with the plugin hooks, inside --workspace.
    """
    from stargraph.graph import Graph

    data = parse_object(input_json, "--input")
    registry = installed_registry()
    skill = registry.skill(name)
    if not hasattr(skill.subgraph, "graph_hash"):
        raise CliUsageError(
            f"skill {name!r} refers to its graph by hash ({skill.subgraph}) instead of "
            "carrying it; mount it in a graph with SubgraphNode.from_skill(registry=...)"
        )
    run_id = run_id or f"{name}-{secrets.token_hex(6)}"
    with tempfile.TemporaryDirectory() as scratch:
        folder = workspace if workspace is not None else Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        services: dict[str, Any] = {"arbiter": registry.arbiter(folder)}
        if str(skill.kind) == "agent":
            services["model"] = registry.model("openai", model=model)
        graph: Graph[Any] = Graph(skill.subgraph, impls=skill.impls)
        with open_store(db, must_exist=False) as store:
            app = graph.compile(store=store, services=services)
            archive_ir(db, app.ir)
            try:
                outcome = drive(app.stream(data or {}, run_id=run_id), view(live, quiet))
            finally:
                app.close()
                for service in services.values():
                    close = getattr(service, "close", None)
                    if callable(close):
                        close()
            report(outcome, app, run_id, f"skill {name}", db)


# --------------------------------------------------------------------------- plugins


def _distributions(pm: Any) -> dict[int, str]:
    found = {}
    for plugin, dist in pm.list_plugin_distinfo():
        found[id(plugin)] = f"{dist.metadata['name']} {dist.version}"
    return found


def _mentions(problem: Any, name: str) -> bool:
    return problem.pointer == f"plugin {name}" or f"entry point '{name} = " in problem.message


@click.group("plugins")
def plugins_group() -> None:
    """Installed plugins (entry-point group ``stargraph``)."""


@plugins_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the plugins as JSON.")
def plugins_list(as_json: bool) -> None:
    """List plugins: name, distribution (name version), status, hooks implemented.

    A plugin that fails to import, to register, or in a register_* hook is listed as
    `broken` beside the healthy ones, then the command exits 1 with an error naming its
    entry point and distribution (a broken install should fail scripts that check it).
    Plugins named in STARGRAPH_DISABLE_PLUGINS are listed as `disabled`.
    """
    from importlib.metadata import version

    from stargraph.errors import PluginLoadError
    from stargraph.plugin import Registry, _builtins, get_plugin_manager, load_entry_points

    pm = get_plugin_manager(entry_points=False)
    load = load_entry_points(pm)
    problems = [f.problem() for f in load.failed]
    culprits = [f.plugin for f in load.failed]
    errors: dict[str, str] = {}  # loaded plugins whose register_* hooks failed or clashed
    try:
        Registry.build(pm)
    except PluginLoadError as exc:
        problems += exc.problems
        culprits += exc.plugins
        for name in exc.plugins:
            errors[name] = "; ".join(p.render() for p in exc.problems if _mentions(p, name))
    dists = _distributions(pm)
    rows: list[tuple[str, str, str, str, str | None]] = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin) or repr(plugin)
        if plugin is _builtins:
            dist = f"stargraph {version('stargraph')}"
        else:
            dist = dists.get(id(plugin), "-")
        hooks = ", ".join(sorted(caller.name for caller in pm.get_hookcallers(plugin) or ()))
        error = errors.get(name)
        rows.append((name, dist, "ok" if error is None else "broken", hooks, error))
    for failure in load.failed:
        source = failure.source
        dist = f"{source.distribution} {source.version}" if source else "-"
        rows.append((failure.plugin, dist, "broken", "", failure.problem().render()))
    for source in load.disabled:
        dist = f"{source.distribution} {source.version}"
        rows.append((source.name, dist, "disabled", "", None))
    rows.sort(key=lambda r: (r[0] != "stargraph.builtins", r[0], r[1]))
    if as_json:
        data = [
            {
                "name": name,
                "distribution": dist,
                "status": status,
                "hooks": hooks.split(", ") if hooks else [],
                "error": error,
            }
            for name, dist, status, hooks, error in rows
        ]
        click.echo(json.dumps(data, indent=2))
    else:
        print_table(("PLUGIN", "DISTRIBUTION", "STATUS", "HOOKS"), [r[:4] for r in rows])
    if problems:
        raise PluginLoadError(problems, plugins=sorted(set(culprits)))
