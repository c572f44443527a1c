"""``stargraph plugins``: what the installed plugins provide.

It reads one registry, ``Registry.build(get_plugin_manager())``: stargraph's built-ins plus
every installed distribution with an entry point in group ``stargraph`` (``stargraph
skills``, in ``_skills``, adds the project's own tools and skills to it).
"""

from __future__ import annotations

import json
from typing import Any

import click

from stargraph.cli._output import print_table

__all__ = ["installed_registry", "plugins_group"]


def installed_registry() -> Any:
    """The registry of stargraph's built-ins and every installed plugin."""
    from stargraph.plugin import Registry, get_plugin_manager

    return Registry.build(get_plugin_manager())


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
