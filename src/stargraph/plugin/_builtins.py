"""stargraph's own contributions, registered through the same hooks as any plugin."""

from __future__ import annotations

from typing import Any

from stargraph.plugin.hookspecs import hookimpl

__all__ = [
    "register_checkpoint_stores",
    "register_models",
    "register_rule_packs",
    "register_skills",
    "register_tools",
]


@hookimpl
def register_tools(register: Any) -> None:
    """The built-in tools (file system, exec, http fetch) and, with the reference skills,
    the ``refs.retrieve@1.0.0`` tool the ``autoresearch`` skill declares (registered unbound:
    runs bind it to their stores, see ``research_arbiter``)."""
    import importlib

    from stargraph.tools import builtin_tools

    for tool in builtin_tools():
        register(tool)
    try:
        autoresearch = importlib.import_module("stargraph.skills.refs.autoresearch")
    except ImportError:  # no reference skills either: nothing declares the tool
        return
    register(autoresearch.unbound_retrieval_tool())


@hookimpl
def register_rule_packs(register: Any) -> None:
    """The default termination pack (max 50 steps, error budget 3)."""
    from stargraph import fathom

    register(fathom.default_termination_pack(max_steps=50, error_budget=3))


@hookimpl
def register_skills(register: Any) -> None:
    """The reference skills (rag, autoresearch, wiki) when their package is present."""
    import importlib

    try:
        refs = importlib.import_module("stargraph.skills.refs")
    except ImportError:
        return
    for skill in refs.builtin_skills():
        register(skill)


@hookimpl
def register_checkpoint_stores(register: Any) -> None:
    """``sqlite:`` paths and ``postgresql:`` URLs."""

    def sqlite(url: str) -> Any:
        from stargraph.checkpoint import SqliteStore

        return SqliteStore(url.removeprefix("sqlite:///").removeprefix("sqlite:"))

    def postgres(url: str) -> Any:
        from stargraph import checkpoint

        return checkpoint.PostgresStore(url)

    register("sqlite", sqlite)
    register("postgresql", postgres)


@hookimpl
def register_models(register: Any) -> None:
    """``openai``: the OpenAI-compatible chat model (``OPENAI_BASE_URL`` etc.)."""

    def openai(**options: Any) -> Any:
        from stargraph.llm import OpenAIChatModel

        return OpenAIChatModel(**options)

    register("openai", openai)
