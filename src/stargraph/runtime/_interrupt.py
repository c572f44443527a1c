"""What an interrupted run waits on, and how the state ``invoke()`` returned says so.

A typed state model has no room for LangGraph's ``__interrupt__`` key, and a private
attribute on it would change its equality. So the state object that ``invoke``/``resume``
return for a run that stopped at an interrupt is remembered here, weakly, with the typed
:class:`Interrupt`; :func:`interrupt_of` reads it back. Copies of that object carry nothing:
the marker belongs to the object the call returned.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = ["Interrupt", "interrupt_of", "mark_interrupted"]

InterruptKind = Literal["node", "before", "after", "rule"]


class Interrupt(BaseModel):
    """Why a run stopped and what answers it.

    ``kind`` says who stopped it: ``"node"`` (a node called ``ctx.interrupt(payload)``;
    answer with ``resume(run_id, response=...)``), ``"before"``/``"after"`` (the graph pauses
    around ``nodes``; continue with ``resume(run_id)``, optionally with ``update=``) or
    ``"rule"`` (a rule pack decided to interrupt: ``rule`` and ``reason`` name it).
    ``step`` is the step that runs when the run resumes (``"after"``, ``"rule"``: the step
    just committed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    kind: InterruptKind
    step: int
    nodes: tuple[str, ...] = ()
    payload: Any = None
    rule: str | None = None
    reason: str | None = None

    @property
    def node(self) -> str | None:
        """The node that asked (``kind="node"``), else the first of ``nodes`` or ``None``."""
        return self.nodes[0] if self.nodes else None

    @classmethod
    def from_stored(cls, run_id: str, stored: Mapping[str, Any]) -> Interrupt:
        """The typed form of a run record's ``interrupt`` mapping (``RunRecord.interrupt``)."""
        kind = stored.get("kind", "node")
        if "nodes" in stored:
            nodes = tuple(stored["nodes"])
        elif stored.get("node") is not None:
            nodes = (stored["node"],)
        else:
            nodes = ()
        return cls(
            run_id=run_id,
            kind=kind,
            step=int(stored.get("step", 0)),
            nodes=nodes,
            payload=stored.get("payload") if kind == "node" else None,
            rule=stored.get("rule"),
            reason=stored.get("reason"),
        )

    def hint(self) -> str:
        """The call that continues the run, as a user would type it."""
        if self.kind == "node":
            return f"resume({self.run_id!r}, response=...)"
        return f"resume({self.run_id!r})"


# id(state) -> (weak reference to state, its interrupt). The weak reference's callback
# drops the entry, so a marked state costs nothing once the caller lets it go; comparing
# the referent on lookup guards against a recycled id.
_MARKED: dict[int, tuple[weakref.ReferenceType[Any], Interrupt]] = {}
_LOCK = threading.Lock()


def mark_interrupted(state: Any, interrupt: Interrupt) -> None:
    """Remember that ``state`` (returned to the caller) is where ``interrupt`` stopped."""
    key = id(state)

    def forget(_: weakref.ReferenceType[Any]) -> None:
        with _LOCK:
            entry = _MARKED.get(key)
            if entry is not None and entry[0]() is None:
                del _MARKED[key]

    try:
        ref = weakref.ref(state, forget)
    except TypeError:  # a state model declaring __slots__ without __weakref__: no marker
        return
    with _LOCK:
        _MARKED[key] = (ref, interrupt)


def interrupt_of(state: Any) -> Interrupt | None:
    """The :class:`Interrupt` a run stopped at, if ``state`` is what ``invoke``/``resume``
    returned for it; ``None`` when that run finished (or ``state`` came from elsewhere).

    >>> from stargraph import interrupt_of
    >>> interrupt_of(object()) is None
    True
    """
    with _LOCK:
        entry = _MARKED.get(id(state))
    if entry is None or entry[0]() is not state:
        return None
    return entry[1]
