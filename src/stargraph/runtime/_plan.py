"""The execution plan: what the executor needs per node, resolved once at compile time.

Compiling turns IR references into callables, edges into per-node successor lists, and joins
into barrier tables, so the step loop does no lookups by name beyond one dict access.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import BaseModel

from stargraph.ir import RetryPolicyIR

__all__ = ["JoinSpec", "NodeSpec", "RouterSpec", "Send", "Task", "accepts_ctx"]


@dataclass(frozen=True, slots=True)
class Send:
    """Returned by a router to run ``node`` once more in the next step, map-reduce style.

    ``payload`` (a JSON-compatible mapping of state fields) is overlaid on the state that this
    one execution of ``node`` sees; it is checkpointed with the pending task. A node that
    declares an input model (``with_node(..., input=Model)``) receives the payload instead,
    validated into that model, and it may hold keys that are not state fields.
    """

    node: str
    payload: Mapping[str, Any]


class Task(NamedTuple):
    """One node execution scheduled in a step. Tasks sort by ``(node, index)``: the fixed
    order in which their writes merge and their events are emitted."""

    node: str
    index: int = 0  # type: ignore[assignment]  # shadows tuple.index; the name reads best here
    payload: Mapping[str, Any] | None = None

    @property
    def key(self) -> tuple[str, int]:
        """``(node, index)``: identifies the task within its step."""
        return (self.node, self.index)


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """A conditional edge out of a node."""

    ref: str
    fn: Callable[..., Any]
    mapping: Mapping[str, str]
    takes_ctx: bool
    is_async: bool


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A static edge with several sources: ``target`` runs once all ``sources`` have run."""

    index: int
    sources: frozenset[str]
    target: str


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Everything the executor needs to run one node and schedule what follows it."""

    id: str
    fn: Callable[..., Any]
    ref: str
    takes_ctx: bool
    is_async: bool
    blocking: bool = False
    inline: bool = False
    writes: frozenset[str] | None = None
    timeout_s: float | None = None
    retry: RetryPolicyIR | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    interrupt_before: bool = False
    interrupt_after: bool = False
    must_stub: bool = False
    static_next: tuple[str, ...] = ()
    routers: tuple[RouterSpec, ...] = ()
    joins: tuple[JoinSpec, ...] = ()
    # The node's input model (with_node(..., input=Model)): it receives an instance of it
    # instead of the state (see runtime._inputs).
    input: type[BaseModel] | None = None

    @property
    def plain(self) -> bool:
        """A sync node with no retry policy, timeout or thread: it can be called inline."""
        return not (self.is_async or self.retry or self.timeout_s or self.blocking)

    @property
    def only_static(self) -> bool:
        """True when what follows this node never depends on state (no routers, no joins)."""
        return not self.routers and not self.joins


def accepts_ctx(fn: Callable[..., Any]) -> bool | None:
    """``False`` for ``fn(state)``, ``True`` for ``fn(state, ctx)``, ``None`` otherwise."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    if len(positional) == 1:
        return False
    if len(positional) == 2:
        return True
    return None
