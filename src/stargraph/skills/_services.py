"""How skill nodes take their live objects from ``ctx.services``, and how they fail.

The reference skills, the SkillSpec machine and the Markdown workflows all reach for a model,
an arbiter or a store in ``ctx.services``; one function checks what they find, so a missing
or mistyped service reads the same everywhere: which node, which key, what was found instead
and how to pass it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stargraph.errors import NodeError

if TYPE_CHECKING:
    from stargraph.runtime import RunContext

__all__ = ["node_error", "require_service", "typed_service"]


def node_error(ctx: RunContext, message: str) -> NodeError:
    """A :class:`~stargraph.errors.NodeError` located at ``ctx``'s run, step and node."""
    return NodeError(message, run_id=ctx.run_id, step=ctx.step, node=ctx.node)


def require_service(
    ctx: RunContext, key: str, check: Callable[[Any], bool], what: str, *, who: str = "node"
) -> Any:
    """``ctx.services[key]`` if ``check`` accepts it; else a NodeError saying that ``who``
    (``"node"``, ``"skill node"``...) needs ``what`` (``"a ChatModel"``) there."""
    found = ctx.services.get(key)
    if not check(found):
        got = "nothing" if found is None else type(found).__name__
        raise node_error(
            ctx,
            f"{who} {ctx.node!r} needs {what} as services[{key!r}] but got {got}; "
            f"compile the graph with services={{{key!r}: ...}}",
        )
    return found


def typed_service(ctx: RunContext, key: str, kind: type[Any], *, who: str = "node") -> Any:
    """``ctx.services[key]``, which must be an instance of ``kind``
    (:func:`require_service` with an ``isinstance`` check). ``kind`` is typed ``type[Any]``
    so that a runtime-checkable Protocol (``DocumentStore``) is accepted too."""
    return require_service(
        ctx, key, lambda value: isinstance(value, kind), f"a {kind.__name__}", who=who
    )
