"""The hooks a stargraph plugin may implement (pluggy project name ``stargraph``).

Each ``register_*`` hook receives a ``register`` callable; call it once per item. pluggy
passes an implementation only the arguments it names, so hooks can grow arguments later.
"""

from __future__ import annotations

from typing import Any

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "stargraph"
"""The pluggy project name, and the entry-point group installed plugins use."""

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marks a hook specification."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's hook implementation: ``@hookimpl def register_tools(register): ...``."""


@hookspec
def register_skills(register: Any) -> None:
    """Call ``register(skill)`` for each ``stargraph.skills.Skill`` the plugin provides."""


@hookspec
def register_tools(register: Any) -> None:
    """Call ``register(tool)`` for each tool (``@tool`` function or manifest tool)."""


@hookspec
def register_nodes(register: Any) -> None:
    """Call ``register(ref, fn)`` for each node callable referenced by a registry id."""


@hookspec
def register_rule_packs(register: Any) -> None:
    """Call ``register(pack)`` for each ``stargraph.fathom.RulePack``."""


@hookspec
def register_checkpoint_stores(register: Any) -> None:
    """Call ``register(scheme, factory)``: ``factory(url) -> CheckpointStore`` for a URL scheme."""


@hookspec
def register_models(register: Any) -> None:
    """Call ``register(name, factory)``: ``factory(**options) -> ChatModel``."""


@hookspec
def before_tool_call(call: Any) -> None:
    """Observe a tool call about to enter the arbiter's pipeline."""


@hookspec
def after_tool_call(call: Any, result: Any, error: Any) -> None:
    """Observe a tool call's outcome: its ``ToolResult`` or the ``ToolError`` it raised."""


@hookspec(firstresult=True)
def authorize_action(call: Any) -> bool | None:
    """Decide a tool call: ``False`` denies, ``True`` allows, ``None`` abstains."""


@hookspec
def on_event(event: Any) -> None:
    """Observe every run event (run, node, step, rule decisions)."""
