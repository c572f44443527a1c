"""What ``Graph.compile(...)`` takes besides the graph: one frozen value.

``Graph.compile`` spells every option out as a keyword (a misspelt one is a ``TypeError``
from Python, and mypy sees it), packs them into a :class:`RunOptions` and hands that to
:func:`stargraph.compile.compile_ir`. An embedded subgraph is compiled with its parent's
options through :meth:`RunOptions.for_child`, so what a child inherits is written down once.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stargraph.runtime._settings import RunSettings

if TYPE_CHECKING:
    import pluggy

    from stargraph.skills import NestingProfile

__all__ = ["RunOptions"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions(RunSettings):
    """How runs of a compiled graph are made: every ``Graph.compile(...)`` keyword.

    The runtime's options (``max_steps``, ``entropy``, ``store``, ``durability``,
    ``snapshot_every``, ``on_code_change``) are those of the base class, which the compiled
    graph takes as they are; the compiler's follow. Not validated here:
    :func:`~stargraph.compile.compile_ir` checks the values along with the graph, so a bad
    option is one more problem of the one ``CompileError``. See ``Graph.compile`` for what
    each option does.
    """

    services: Mapping[str, Any] | None = None
    plugins: pluggy.PluginManager | None = None
    executor: concurrent.futures.Executor | None = None
    nesting: NestingProfile | None = None

    def for_child(self, *, max_steps: int) -> RunOptions:
        """The options of an embedded subgraph: the parent's, with the child node's own
        ``max_steps`` and without the plugins (a child's events reach observers through its
        parent, bubbled, once; giving the child its own observer would report them twice)."""
        return dataclasses.replace(self, max_steps=max_steps, plugins=None)
