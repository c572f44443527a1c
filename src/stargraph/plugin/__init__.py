"""Plugins: pluggy hooks, the plugin manager factory, and the one registry.

    from stargraph.plugin import get_plugin_manager, Registry
    registry = Registry.build(get_plugin_manager())
    registry.skills["rag"], registry.tools["choir.fs.read@1.0.0"]

Installed plugins load from the entry-point group ``stargraph``; stargraph's own tools, rule
packs and reference skills register through the same hooks (``stargraph.plugin._builtins``).
A plugin that fails to import or register raises :class:`~stargraph.errors.PluginLoadError`
naming its entry point and distribution; ``STARGRAPH_DISABLE_PLUGINS=name,...`` skips
installed plugins by entry point or distribution name (``*``: all of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pluggy

from stargraph.plugin import hookspecs
from stargraph.plugin._load import (
    DISABLE_ENV,
    PluginFailure,
    PluginLoad,
    PluginSource,
    load_entry_points,
)
from stargraph.plugin._registry import Entry, LoadReport, Registry, Scope, SkillLoader
from stargraph.plugin.hookspecs import PROJECT, hookimpl, hookspec

__all__ = [
    "DISABLE_ENV",
    "Entry",
    "LoadReport",
    "PROJECT",
    "PluginFailure",
    "PluginLoad",
    "PluginSource",
    "Registry",
    "Scope",
    "SkillLoader",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "hookspecs",
    "load_entry_points",
]


def get_plugin_manager(
    *,
    plugins: Iterable[Any] = (),
    entry_points: bool = True,
    builtins: bool = True,
    disabled: Iterable[str] | None = None,
) -> pluggy.PluginManager:
    """A new plugin manager (there is no global one): the hook specs, stargraph's built-ins,
    the installed plugins of entry-point group ``stargraph``, and ``plugins`` given here.

    Installed plugins named in ``disabled`` (entry point or distribution names; default:
    the ``STARGRAPH_DISABLE_PLUGINS`` environment variable) are skipped. If any other
    installed plugin fails to import or register, one
    :class:`~stargraph.errors.PluginLoadError` names each (entry point, distribution, error)
    and how to upgrade, uninstall or skip it. Use :func:`load_entry_points` on a manager made
    with ``entry_points=False`` to load the healthy plugins and get the failures instead.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if builtins:
        from stargraph.plugin import _builtins

        pm.register(_builtins, name="stargraph.builtins")
    if entry_points:
        error = load_entry_points(pm, group=PROJECT, disabled=disabled).error()
        if error is not None:
            raise error
    for plugin in plugins:
        pm.register(plugin)
    return pm
