"""Typed models of why a run was interrupted and of what its rules decided at a step.

Both are stored as JSON (``RunRecord.interrupt``, ``StepRecord.decision``) and carried by
events (``run_interrupted``'s payload); :meth:`Interrupt.record` and
:meth:`RuleDecision.record` give exactly the dicts the checkpoint format holds, and
:meth:`Interrupt.read` reads one back.

The state object that ``invoke``/``resume`` return for a run that stopped at an interrupt is
remembered here, weakly, with its :class:`Interrupt`; :func:`interrupt_of` reads it back. A
typed state model has no room for LangGraph's ``__interrupt__`` key, and a private attribute
on it would change its equality, so the marker lives beside the object, not on it: copies of
that object carry nothing.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from stargraph._typed import TypedModel, validate_raw
from stargraph.errors import RunError

__all__ = ["Interrupt", "RuleDecision", "interrupt_of", "mark_interrupted"]


class Interrupt(TypedModel):
    """Why a run was interrupted: ``before``/``after`` nodes marked to interrupt there (``nodes``),
    a ``node`` that called ``ctx.interrupt`` (``node``, ``index``, the journal position
    ``seq`` of its question, and its ``payload``), or a ``rule`` that decided to interrupt
    (``rule``, ``reason``). ``step`` is the step a resume runs (or re-runs) first.

    ``run_id`` names the run when the interrupt comes from :func:`interrupt_of` (it is not
    part of what a run's record stores); :meth:`hint` is the call that continues the run."""

    typed_error = RunError

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: Literal["before", "after", "node", "rule"]
    step: int
    nodes: tuple[str, ...] = ()
    node: str | None = None
    index: int = 0
    seq: int = 0
    payload: Any = None
    rule: str | None = None
    reason: str | None = None
    run_id: str | None = None

    def hint(self) -> str:
        """The call that continues the run, as a user would type it."""
        run = repr(self.run_id) if self.run_id is not None else "run_id"
        if self.kind == "node":
            return f"resume({run}, response=...)"
        return f"resume({run})"

    def record(self) -> dict[str, Any]:
        """The interrupt as stored in a run's record (and carried by ``run_interrupted``)."""
        if self.kind == "node":
            return {
                "kind": "node",
                "node": self.node,
                "index": self.index,
                "step": self.step,
                "seq": self.seq,
                "payload": self.payload,
            }
        if self.kind == "rule":
            return {"kind": "rule", "rule": self.rule, "reason": self.reason, "step": self.step}
        return {"kind": self.kind, "nodes": list(self.nodes), "step": self.step}

    @classmethod
    def read(cls, stored: Any, *, run_id: str | None = None) -> Interrupt | None:
        """The interrupt a run's record holds (``None``: none, or not one of ours);
        ``run_id`` is the run's, for :meth:`hint`."""
        if not isinstance(stored, dict):
            return None
        try:
            found = validate_raw(cls, stored)
        except ValidationError:
            return None
        return found if run_id is None else found.model_copy(update={"run_id": run_id})


class RuleDecision(BaseModel):
    """What a step's rules decided, when not ``continue``: the deciding ``rule``, the
    ``goto`` ``targets`` and the ``reason`` of a ``halt``, ``finish`` or ``interrupt``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["goto", "halt", "finish", "interrupt"]
    rule: str | None = None
    targets: tuple[str, ...] = ()
    reason: str | None = None

    def record(self) -> dict[str, Any]:
        """The decision as stored with its step's checkpoint."""
        return {
            "kind": self.kind,
            "rule": self.rule,
            "targets": list(self.targets),
            "reason": self.reason,
        }


# id(state) -> (weak reference to state, its interrupt). The weak reference's callback drops
# the entry, so a marked state costs nothing once the caller lets it go; comparing the
# referent on lookup guards against a recycled id.
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
