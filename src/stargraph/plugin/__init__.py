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

from stargraph.plugin import hookspecs
from stargraph.plugin._load import (
    DISABLE_ENV,
    PluginFailure,
    PluginLoad,
    PluginSource,
    load_entry_points,
)
from stargraph.plugin._manager import get_plugin_manager
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
