"""Two runs side by side: their steps aligned, and what differs in each aligned pair.

The comparisons are those of ``stargraph diff`` (:func:`stargraph.cli._inspect.diff_runs`):
the input of step 0, each task's writes (by node and index), the tasks scheduled next, the
rule facts, then status, stop reason, error and final state. What this adds is the alignment.

A fork with an update holds its parent's steps ``0..p`` and then the update as step ``p+1``
(written by ``__update__``); the step its parent ran as ``p+1`` runs in the fork as ``p+2``,
and so on. Comparing by step number would set every later step against the wrong one, so
when one run is the other's fork, its update step is shown as inserted (only on its side)
and its later steps are set against the parent's step one lower.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stargraph.checkpoint import RunRecord, StepRecord
from stargraph.replay import align_steps as replay_align_steps
from stargraph.replay import inserted_step
from stargraph.replay import value_changes as _changes
from stargraph.ui._mask import Masker

__all__ = ["AlignedStep", "RunPairDiff", "align_steps", "diff_pair"]


@dataclass(frozen=True, slots=True)
class AlignedStep:
    """One row of the side-by-side view: a step of A, of B, or of both, and what differs."""

    a: StepRecord | None
    b: StepRecord | None
    changes: tuple[str, ...] = ()
    inserted: bool = False
    """The row is a fork's update step: it has no counterpart in the other run."""

    @property
    def same(self) -> bool:
        """Both sides present and nothing differs."""
        return self.a is not None and self.b is not None and not self.changes


@dataclass(frozen=True, slots=True)
class RunPairDiff:
    """Aligned steps of two runs, and how their ends differ."""

    run_a: RunRecord
    run_b: RunRecord
    rows: tuple[AlignedStep, ...]
    outcome: tuple[str, ...]
    """Lines for status, stop reason, error and final state (empty when they agree)."""
    shift: str | None
    """How the steps were aligned, for the reader (``None``: by step number)."""

    @property
    def identical(self) -> bool:
        """Every aligned step and the outcome agree."""
        return all(r.same for r in self.rows) and not self.outcome


def align_steps(
    run_a: RunRecord, steps_a: list[StepRecord], run_b: RunRecord, steps_b: list[StepRecord]
) -> tuple[list[tuple[StepRecord | None, StepRecord | None, bool]], str | None]:
    """Pairs ``(step of A, step of B, inserted)`` in order (the pairing of
    :func:`stargraph.replay.align_steps`, as ``stargraph diff`` makes it), and how they were
    aligned, for the reader."""
    pairs = [
        (sa, sb, (sa is None) != (sb is None) and inserted_step(sa or sb))
        for sa, sb in replay_align_steps(sorted(steps_a, key=_number), sorted(steps_b, key=_number))
    ]
    for sa, sb, inserted in pairs:
        if inserted:
            return pairs, _shift(run_a, run_b, sa, sb)
    return pairs, None


def _number(step: StepRecord) -> int:
    return step.step


def _shift(run_a: RunRecord, run_b: RunRecord, sa: StepRecord | None, sb: StepRecord | None) -> str:
    """Says where the first inserted step is and how the steps after it are paired."""
    side, other, run, parent, step = (
        ("B", "A", run_b, run_a, sb) if sb is not None else ("A", "B", run_a, run_b, sa)
    )
    assert step is not None
    n = step.step
    if run.parent_run_id == parent.run_id:
        where = f"{side} is a fork of {other} after step {n - 1} with an update as its step {n}"
    else:
        where = f"{side} has an update as its step {n} that {other} has not"
    return f"{where}; {side}'s steps from {n + 1} on are set against {other}'s from {n} on"


def _label(node: str, index: int) -> str:
    return node if index == 0 else f"{node}[{index}]"


def _step_changes(masker: Masker, a: StepRecord, b: StepRecord) -> list[str]:
    """What differs between two aligned steps, as ``stargraph diff`` words it (masked)."""
    out: list[str] = []
    if a.step == 0 and b.step == 0:
        out += [
            f"input {c}" for c in _changes(masker.data(a.snapshot), masker.data(b.snapshot), "")
        ]
    writes_a = {(w.node, w.index): w.writes for w in a.writes}
    writes_b = {(w.node, w.index): w.writes for w in b.writes}
    for key in sorted(set(writes_a) | set(writes_b)):
        label = _label(*key)
        if key not in writes_b:
            out.append(f"{label}: ran only in A")
        elif key not in writes_a:
            out.append(f"{label}: ran only in B")
        else:
            found = _changes(masker.data(writes_a[key]), masker.data(writes_b[key]), "")
            out += [f"{label} {c}" for c in found]
    next_a = [_label(t.node, t.index) for t in a.next]
    next_b = [_label(t.node, t.index) for t in b.next]
    if next_a != next_b:
        out.append(f"next: A = {next_a}  B = {next_b}")
    if a.facts != b.facts:
        out.append("rule facts differ")
    return out


def diff_pair(
    masker: Masker,
    run_a: RunRecord,
    steps_a: list[StepRecord],
    run_b: RunRecord,
    steps_b: list[StepRecord],
    *,
    final_a: dict[str, Any] | None = None,
    final_b: dict[str, Any] | None = None,
) -> RunPairDiff:
    """Align two runs' steps and compare each pair; ``final_a``/``final_b`` are their final
    states when the graphs are known (compared too)."""
    pairs, shift = align_steps(run_a, steps_a, run_b, steps_b)
    rows = []
    for a, b, inserted in pairs:
        changes: tuple[str, ...] = ()
        if a is not None and b is not None:
            changes = tuple(_step_changes(masker, a, b))
        rows.append(AlignedStep(a, b, changes, inserted))
    outcome: list[str] = []
    if run_a.graph_hash != run_b.graph_hash:
        outcome.append(f"graph: A = {run_a.graph_hash}  B = {run_b.graph_hash}")
    for name in ("status", "stopped_by", "error"):
        va, vb = getattr(run_a, name), getattr(run_b, name)
        if va != vb:
            shown_a = masker.text(str(va)) if va is not None else None
            shown_b = masker.text(str(vb)) if vb is not None else None
            outcome.append(f"{name}: A = {shown_a}  B = {shown_b}")
    if final_a is not None and final_b is not None:
        found = _changes(masker.data(final_a), masker.data(final_b), "")
        outcome += [f"final state {c}" for c in found]
    return RunPairDiff(run_a, run_b, tuple(rows), tuple(outcome), shift)
