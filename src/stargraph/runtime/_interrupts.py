"""Typed models of why a run parked and of what its rules decided at a step.

Both are stored as JSON (``RunRecord.interrupt``, ``StepRecord.decision``) and carried by
events (``run_interrupted``'s payload); :meth:`Interrupt.record` and
:meth:`RuleDecision.record` give exactly the dicts the checkpoint format holds, and
:meth:`Interrupt.read` reads one back.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["Interrupt", "RuleDecision"]


class Interrupt(BaseModel):
    """Why a run parked: ``before``/``after`` nodes marked to interrupt there (``nodes``),
    a ``node`` that called ``ctx.interrupt`` (``node``, ``index``, the journal position
    ``seq`` of its question, and its ``payload``), or a ``rule`` that decided to interrupt
    (``rule``, ``reason``). ``step`` is the step a resume runs (or re-runs) first."""

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
    def read(cls, stored: Any) -> Interrupt | None:
        """The interrupt a run's record holds (``None``: none, or not one of ours)."""
        if not isinstance(stored, dict):
            return None
        try:
            return cls.model_validate(stored)
        except ValidationError:
            return None


class RuleDecision(BaseModel):
    """What a step's rules decided, when not ``continue``: the deciding ``rule``, the
    ``goto`` ``targets`` and the ``reason`` of a ``halt`` or ``interrupt``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["goto", "halt", "interrupt"]
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
