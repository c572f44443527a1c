"""Typed models of why a run was interrupted and of what its rules decided at a step.

Both are stored as JSON (``RunRecord.interrupt``, ``StepRecord.decision``) and carried by
events (``run_interrupted``'s payload); :meth:`Interrupt.record` and
:meth:`RuleDecision.record` give exactly the dicts the checkpoint format holds, and
:meth:`Interrupt.read` reads one back.

The state object that ``invoke``/``resume`` return for a run that stopped at an interrupt
carries its :class:`Interrupt` itself (:func:`mark_interrupted`), and :func:`interrupt_of`
reads it back. A typed state model has no room for LangGraph's ``__interrupt__`` key, so the
mark is a non-field entry of the instance's ``__dict__``: pydantic's equality, ``repr``,
iteration and serialisation look at fields only, so the state's value is unchanged. The mark
names the very object it was put on, so a copy (which shares the entry) carries nothing.
"""

from __future__ import annotations

import hashlib
import weakref
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from stargraph._typed import TypedModel, validate_raw
from stargraph.errors import RunError

__all__ = ["Interrupt", "RuleDecision", "interrupt_id", "interrupt_of", "mark_interrupted"]


def interrupt_id(run_id: str, step: int, node: str, index: int, seq: int) -> str:
    """The id of the ``ctx.interrupt`` that task ``(node, index)`` of ``run_id`` asked at
    journal position ``seq`` of step ``step``: derived, never random, so a resumed or
    replayed run names its interrupts as the run that asked them did."""
    text = f"{run_id}\x00{step}\x00{node}\x00{index}\x00{seq}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Interrupt(TypedModel):
    """Why a run was interrupted: ``before``/``after`` nodes marked to interrupt there (``nodes``),
    a ``node`` that called ``ctx.interrupt`` (``node``, ``index``, the journal position
    ``seq`` of its question, and its ``payload``), or a ``rule`` that decided to interrupt
    (``rule``, ``reason``). ``step`` is the step a resume runs (or re-runs) first.

    A node interrupt has an ``id`` (see :func:`interrupt_id`). When several tasks of one
    step interrupted, this is the first in task order and ``also`` holds the others;
    :attr:`pending` lists them all, and ``resume(run_id, response={id: answer, ...})``
    answers them at once.

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
    id: str | None = None
    also: tuple[Interrupt, ...] = ()
    run_id: str | None = None

    @property
    def pending(self) -> tuple[Interrupt, ...]:
        """Every interrupt the run waits on, in task order (this one first)."""
        if not self.also:
            return (self,)
        return (self.model_copy(update={"also": ()}), *self.also)

    def hint(self) -> str:
        """The call that continues the run, as a user would type it."""
        run = repr(self.run_id) if self.run_id is not None else "run_id"
        if self.kind == "node" and self.also:
            answers = ", ".join(f"{i.id!r}: ..." for i in self.pending)
            return f"resume({run}, response={{{answers}}})"
        if self.kind == "node":
            return f"resume({run}, response=...)"
        return f"resume({run})"

    def record(self) -> dict[str, Any]:
        """The interrupt as stored in a run's record (and carried by ``run_interrupted``)."""
        if self.kind == "node":
            stored: dict[str, Any] = {
                "kind": "node",
                "node": self.node,
                "index": self.index,
                "step": self.step,
                "seq": self.seq,
                "payload": self.payload,
            }
            if self.id is not None:
                stored["id"] = self.id
            if self.also:
                stored["also"] = [other.record() for other in self.also]
            return stored
        if self.kind == "rule":
            return {"kind": "rule", "rule": self.rule, "reason": self.reason, "step": self.step}
        return {"kind": self.kind, "nodes": list(self.nodes), "step": self.step}

    @classmethod
    def read(cls, stored: Any, *, run_id: str | None = None) -> Interrupt | None:
        """The interrupt a run's record holds (``None``: none, or not one of ours);
        ``run_id`` is the run's, for :meth:`hint` (and for the id of a node interrupt
        stored before interrupts had ids)."""
        if not isinstance(stored, dict):
            return None
        try:
            found = validate_raw(cls, stored)
        except ValidationError:
            return None
        if run_id is None:
            return found
        update: dict[str, Any] = {"run_id": run_id}
        if found.kind == "node" and found.id is None and found.node is not None:
            update["id"] = interrupt_id(run_id, found.step, found.node, found.index, found.seq)
        return found.model_copy(update=update)


class RuleDecision(BaseModel):
    """What a step's rules decided, when not ``continue``: the deciding ``rule``, the
    ``goto`` ``targets`` and the ``reason`` of a ``halt``, ``finish`` or ``interrupt``."""

    # Its schema is built at the first decision, not at import.
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

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


_MARK = "__stargraph_interrupt__"
"""The ``__dict__`` key of the mark: pydantic skips underscored keys when it iterates a model."""


class _Mark(weakref.ref[Any]):
    """An :class:`Interrupt` and a weak reference to the one state it was put on: a copy of
    that state shares its ``__dict__`` entries, and its own mark does not point at it."""

    __slots__ = ("interrupt",)
    interrupt: Interrupt

    def __new__(cls, state: Any, interrupt: Interrupt) -> _Mark:
        mark = super().__new__(cls, state)
        mark.interrupt = interrupt
        return mark

    def __reduce__(self) -> tuple[type[None], tuple[()]]:
        # A pickled state is another object once loaded: it is not where the run stopped, and
        # a weak reference cannot be pickled.
        return type(None), ()


def mark_interrupted(state: Any, interrupt: Interrupt) -> None:
    """Mark ``state`` (returned to the caller) as where ``interrupt`` stopped."""
    fields = getattr(state, "__dict__", None)
    if fields is None:
        return
    try:
        fields[_MARK] = _Mark(state, interrupt)
    except TypeError:  # a state model declaring __slots__ without __weakref__: no mark
        return


def interrupt_of(state: Any) -> Interrupt | None:
    """The :class:`Interrupt` a run stopped at, if ``state`` is what ``invoke``/``resume``
    returned for it; ``None`` when that run finished (or ``state`` came from elsewhere).

    >>> from stargraph import interrupt_of
    >>> interrupt_of(object()) is None
    True
    """
    mark = getattr(state, "__dict__", {}).get(_MARK)
    if type(mark) is not _Mark or mark() is not state:
        return None
    return mark.interrupt
