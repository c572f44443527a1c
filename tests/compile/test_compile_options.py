"""``Graph.compile`` spells its options out; they travel as one frozen ``RunOptions``."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from stargraph import END, START, Graph
from stargraph.checkpoint import MemoryStore
from stargraph.compile import RunOptions
from stargraph.examples.basics import CounterState, bump
from stargraph.plugin import get_plugin_manager
from stargraph.runtime import SeededEntropy


def _graph() -> Graph[CounterState]:
    return (
        Graph("opts", state=CounterState)
        .with_node("bump", bump)
        .with_edge(START, "bump")
        .with_edge("bump", END)
    )


def test_a_misspelt_compile_keyword_is_a_type_error_naming_compile() -> None:
    # Python itself refuses it at the call, before anything is compiled.
    typo: dict[str, Any] = {"stroe": MemoryStore()}
    with pytest.raises(
        TypeError, match=r"Graph\.compile\(\) got an unexpected keyword argument 'stroe'"
    ):
        _graph().compile(**typo)


def test_compile_spells_out_exactly_the_run_options() -> None:
    params = inspect.signature(Graph.compile).parameters
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in params.values())
    keywords = {name: p.default for name, p in params.items() if name != "self"}
    defaults = {f.name: getattr(RunOptions(), f.name) for f in dataclasses.fields(RunOptions)}
    assert keywords == defaults


def test_compile_passes_every_option_through() -> None:
    store = MemoryStore()
    app = _graph().compile(
        store=store,
        max_steps=7,
        entropy=SeededEntropy,
        durability="exit",
        snapshot_every=3,
        on_code_change="error",
        services={"x": 1},
    )
    assert (app.store, app.max_steps, app.durability) == (store, 7, "exit")
    assert (app.snapshot_every, app.on_code_change, dict(app.services)) == (3, "error", {"x": 1})


def test_run_options_are_frozen_and_a_child_drops_only_plugins_and_max_steps() -> None:
    store = MemoryStore()
    plugins = get_plugin_manager(entry_points=False)
    parent = RunOptions(store=store, max_steps=9, plugins=plugins, durability="exit")
    with pytest.raises(dataclasses.FrozenInstanceError):
        parent.max_steps = 1  # type: ignore[misc]
    child = parent.for_child(max_steps=4)
    assert child == dataclasses.replace(parent, max_steps=4, plugins=None)
