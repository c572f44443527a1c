"""Plugins: pluggy hooks, the plugin manager factory, and the one registry.

    from stargraph.plugin import get_plugin_manager, Registry
    registry = Registry.build(get_plugin_manager())
    registry.skills["rag"], registry.tools["choir.fs.read@1.0.0"]

Installed plugins load from the entry-point group ``stargraph``; stargraph's own tools, rule
packs and reference skills register through the same hooks (``stargraph.plugin._builtins``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pluggy

from stargraph.plugin import hookspecs
from stargraph.plugin._registry import Entry, LoadReport, Registry, Scope, SkillLoader
from stargraph.plugin.hookspecs import PROJECT, hookimpl, hookspec

__all__ = [
    "Entry",
    "LoadReport",
    "PROJECT",
    "Registry",
    "Scope",
    "SkillLoader",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
    "hookspecs",
]


def get_plugin_manager(
    *, plugins: Iterable[Any] = (), entry_points: bool = True, builtins: bool = True
) -> pluggy.PluginManager:
    """A new plugin manager (there is no global one): the hook specs, stargraph's built-ins,
    the installed plugins of entry-point group ``stargraph``, and ``plugins`` given here."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    if builtins:
        from stargraph.plugin import _builtins

        pm.register(_builtins, name="stargraph.builtins")
    if entry_points:
        pm.load_setuptools_entrypoints(PROJECT)
    for plugin in plugins:
        pm.register(plugin)
    return pm
