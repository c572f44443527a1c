"""Loading installed plugins (entry-point group ``stargraph``) one entry point at a time.

pluggy's ``load_setuptools_entrypoints`` stops at the first plugin that fails to import or
register and lets the bare exception out, naming neither the entry point nor the
distribution that declared it. Here every entry point is loaded on its own: a failure is
recorded as a :class:`PluginFailure` (entry point, distribution, error, fix) and the other
plugins still load; :func:`~stargraph.plugin.get_plugin_manager` then raises one
:class:`~stargraph.errors.PluginLoadError` listing every failure, and ``stargraph plugins
list`` shows them beside the healthy plugins.

A plugin can be skipped without uninstalling it: ``STARGRAPH_DISABLE_PLUGINS`` holds entry
point or distribution names separated by commas or spaces (``*`` skips every installed plugin).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import pluggy

from stargraph.errors import PluginLoadError, Problem
from stargraph.plugin.hookspecs import PROJECT

__all__ = [
    "DISABLE_ENV",
    "PluginFailure",
    "PluginLoad",
    "PluginSource",
    "disabled_plugins",
    "load_entry_points",
    "plugin_source",
]

DISABLE_ENV: Final = "STARGRAPH_DISABLE_PLUGINS"
"""Environment variable: installed plugins (entry point or distribution names) not to load."""

_ERROR_CHARS: Final = 500
"""An error is shown in one line; a plugin's multi-megabyte message is cut, not stored whole."""

Stage = Literal["import", "register", "hook", "conflict"]


@dataclass(frozen=True, slots=True)
class PluginSource:
    """Where an installed plugin comes from: its entry point and the distribution declaring it."""

    group: str
    """The entry-point group (``stargraph``)."""
    name: str
    """The entry point's name; also the plugin's name in the plugin manager."""
    value: str
    """What it points to (``module`` or ``module:attr``)."""
    distribution: str
    """The declaring distribution's name."""
    version: str
    """The declaring distribution's version."""

    def describe(self) -> str:
        """``entry point 'acme = acme_mod' (group 'stargraph') of distribution acme 1.0``."""
        return (
            f"entry point '{self.name} = {self.value}' (group {self.group!r}) "
            f"of distribution {self.distribution} {self.version}"
        )

    def fix(self) -> str:
        """How to get rid of a broken plugin: upgrade, uninstall, or skip it."""
        return (
            f"upgrade or uninstall {self.distribution} "
            f"(pip install -U {self.distribution} / pip uninstall {self.distribution}), "
            f"or skip it with {DISABLE_ENV}={self.name}"
        )


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """One plugin that could not be used: who it is, at which stage it failed, and why."""

    plugin: str
    """The plugin's name (its entry point's name for an installed plugin)."""
    stage: Stage
    """``import`` (loading the entry point), ``register`` (pluggy refused its hooks),
    ``hook`` (a ``register_*`` hook raised) or ``conflict`` (its name is taken)."""
    error: str
    """What went wrong, in one line."""
    source: PluginSource | None = None
    """Its entry point and distribution; ``None`` for a plugin passed in by the caller."""

    def problem(self) -> Problem:
        """The failure as a :class:`~stargraph.errors.Problem` naming entry point and fix."""
        who = self.source.describe() if self.source else f"plugin {self.plugin!r}"
        what = {
            "import": "failed to import",
            "register": "failed to register",
            "hook": "failed",
            "conflict": "cannot be loaded",
        }[self.stage]
        hint = (
            self.source.fix()
            if self.source
            else "fix the plugin or stop passing it to get_plugin_manager(plugins=...)"
        )
        return Problem(f"plugin {self.plugin}", f"{who} {what}: {self.error}", hint)


@dataclass(frozen=True, slots=True)
class PluginLoad:
    """What :func:`load_entry_points` did: plugins loaded, failed and skipped."""

    loaded: tuple[PluginSource, ...] = ()
    """Registered with the plugin manager."""
    failed: tuple[PluginFailure, ...] = ()
    """Not registered, each with its error."""
    disabled: tuple[PluginSource, ...] = ()
    """Skipped because ``STARGRAPH_DISABLE_PLUGINS`` (or ``disabled=``) names them."""

    def error(self) -> PluginLoadError | None:
        """One error listing every failure, or ``None`` when every plugin loaded."""
        if not self.failed:
            return None
        return PluginLoadError(
            [f.problem() for f in self.failed], plugins=[f.plugin for f in self.failed]
        )


def describe_error(exc: BaseException) -> str:
    """``Type: message`` in one line, robust to a ``__str__`` that raises, and cut short."""
    try:
        text = str(exc)
    except Exception:  # a plugin's exception may fail even to print itself
        text = "<the error message could not be rendered>"
    text = " ".join(text.split())
    if len(text) > _ERROR_CHARS:
        text = text[:_ERROR_CHARS] + f"... ({len(text) - _ERROR_CHARS} more characters)"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def disabled_plugins(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The entry point or distribution names listed in ``STARGRAPH_DISABLE_PLUGINS``."""
    raw = (os.environ if environ is None else environ).get(DISABLE_ENV, "")
    return frozenset(part for part in re.split(r"[\s,]+", raw) if part)


def _source(ep: importlib.metadata.EntryPoint, dist: Any) -> PluginSource:
    """``dist``: an ``importlib.metadata.Distribution`` or pluggy's facade over one."""
    return PluginSource(
        group=ep.group,
        name=ep.name,
        value=ep.value,
        distribution=str(dist.metadata["Name"] or "?"),
        version=str(dist.version or "?"),
    )


def load_entry_points(
    pm: pluggy.PluginManager, *, group: str = PROJECT, disabled: Iterable[str] | None = None
) -> PluginLoad:
    """Register every installed plugin of ``group`` with ``pm``, one entry point at a time.

    A plugin that fails to import (anything it raises, ``SystemExit`` included), that pluggy
    refuses (a hook with unknown arguments, a module registered twice), or whose name is
    already taken is left out (half-registered hooks are removed) and reported; the others
    are registered. Nothing is raised: see :meth:`PluginLoad.error`. ``disabled`` (default:
    ``STARGRAPH_DISABLE_PLUGINS``) names entry points or distributions to skip; ``*`` skips
    them all.
    """
    skip = frozenset(disabled) if disabled is not None else disabled_plugins()
    loaded: list[PluginSource] = []
    failed: list[PluginFailure] = []
    skipped: list[PluginSource] = []
    by_name: dict[str, PluginSource] = {}
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != group:
                continue
            source = _source(ep, dist)
            if (
                "*" in skip
                or source.name in skip
                or source.distribution in skip
                or pm.is_blocked(ep.name)  # blocked by the caller: skipped on purpose
            ):
                skipped.append(source)
                continue
            first = by_name.get(ep.name)
            if first is not None or pm.has_plugin(ep.name):
                taken = first.describe() if first else f"plugin {ep.name!r}, registered before"
                failed.append(
                    PluginFailure(
                        ep.name,
                        "conflict",
                        f"its name {ep.name!r} is already taken by {taken}; entry point "
                        "names must be unique",
                        source,
                    )
                )
                continue
            by_name[ep.name] = source
            failure = _load_one(pm, group, source)
            if failure is None:
                loaded.append(source)
            else:
                failed.append(failure)
    return PluginLoad(tuple(loaded), tuple(failed), tuple(skipped))


def _load_one(pm: pluggy.PluginManager, group: str, source: PluginSource) -> PluginFailure | None:
    """Import and register one entry point through pluggy (which keeps the plugin ->
    distribution record that ``list_plugin_distinfo`` reads); the failure, if any."""
    ep = importlib.metadata.EntryPoint(source.name, source.value, group)
    try:
        ep.load()
    except (Exception, SystemExit) as exc:
        return PluginFailure(source.name, "import", describe_error(exc), source)
    try:
        # The module is imported (cached) by now: what can still fail is registration.
        pm.load_setuptools_entrypoints(group, name=source.name)
    except (Exception, SystemExit) as exc:
        if pm.has_plugin(source.name):  # pluggy may stop half-way through the hooks
            pm.unregister(name=source.name)
        return PluginFailure(source.name, "register", describe_error(exc), source)
    return None


def plugin_source(pm: pluggy.PluginManager, plugin: object) -> PluginSource | None:
    """The entry point and distribution a registered plugin came from (``None`` when it was
    registered directly, not loaded from an entry point)."""
    name = pm.get_name(plugin)
    for candidate, dist in pm.list_plugin_distinfo():
        if candidate is not plugin:
            continue
        for ep in dist.entry_points:
            if ep.name == name and ep.group == pm.project_name:
                return _source(ep, dist)
    return None
