"""The plugin manager factory: hook specs, built-ins, installed plugins, given plugins.

Apart from the package ``__init__`` so that :class:`~stargraph.plugin.Registry` can build a
manager without importing its own package back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pluggy

from stargraph.plugin import hookspecs
from stargraph.plugin._load import load_entry_points
from stargraph.plugin.hookspecs import PROJECT

__all__ = ["get_plugin_manager"]


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
