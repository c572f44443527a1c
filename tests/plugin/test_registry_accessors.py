"""The registry's accessors return real types, and a factory that makes something else is
refused where it is made, naming the plugin."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest

from stargraph.agents import SkillListing
from stargraph.checkpoint import CheckpointStore
from stargraph.errors import RegistryError
from stargraph.llm import ChatModel
from stargraph.plugin import Registry, get_plugin_manager, hookimpl
from stargraph.tools import Arbiter, ToolRegistry


class _Broken:
    """Registers a model and a store factory that make plain objects."""

    @hookimpl
    def register_models(self, register: Any) -> None:
        register("broken", lambda **_: object())

    @hookimpl
    def register_checkpoint_stores(self, register: Any) -> None:
        register("nope", lambda url: object())


def _registry() -> Registry:
    return Registry.build(get_plugin_manager(plugins=[_Broken()], entry_points=False))


def test_accessors_declare_what_they_return() -> None:
    names = {
        "Arbiter": Arbiter,
        "ChatModel": ChatModel,
        "CheckpointStore": CheckpointStore,
        "SkillListing": SkillListing,
        "ToolRegistry": ToolRegistry,
    }
    returns = {
        name: typing.get_type_hints(getattr(Registry, name), localns=names)["return"]
        for name in ("arbiter", "model", "store", "tool_registry", "skill_list")
    }
    assert returns == {
        "arbiter": Arbiter,
        "model": ChatModel,
        "store": CheckpointStore,
        "tool_registry": ToolRegistry,
        "skill_list": list[SkillListing],
    }


def test_a_model_factory_making_no_chat_model_is_refused_naming_it() -> None:
    with pytest.raises(RegistryError, match=r"model factory 'broken' of .* returned object"):
        _registry().model("broken")


def test_a_store_factory_making_no_store_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match=r"store factory 'nope' of .* not a CheckpointStore"):
        _registry().store("nope:x")
    # Registered factories that make the real thing pass the check.
    store = _registry().store(f"sqlite:{tmp_path / 'x.db'}")
    assert isinstance(store, CheckpointStore)
    store.close()
