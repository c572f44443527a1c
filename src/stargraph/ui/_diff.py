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
from typing import Any, Final

from stargraph.checkpoint import RunRecord, StepRecord
from stargraph.cli._inspect import _changes
from stargraph.ui._mask import Masker

__all__ = ["AlignedStep", "RunPairDiff", "align_steps", "diff_pair"]

UPDATE_NODE: Final = "__update__"


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


def _update_step(child: RunRecord, steps: dict[int, StepRecord], parent_id: str) -> int | None:
    """The number of ``child``'s update step when it is a fork of ``parent_id`` with one."""
    if child.parent_run_id != parent_id or child.parent_step is None:
        return None
    inserted = steps.get(child.parent_step + 1)
    if inserted is None or not inserted.writes:
        return None
    if any(w.node != UPDATE_NODE for w in inserted.writes):
        return None
    return inserted.step


def _keys(steps: dict[int, StepRecord], inserted: int | None) -> dict[float, StepRecord]:
    """Alignment keys: the step number, shifted down by one after an inserted update step
    (which itself sits half-way between its neighbours)."""
    if inserted is None:
        return {float(n): s for n, s in steps.items()}
    out: dict[float, StepRecord] = {}
    for n, s in steps.items():
        if n < inserted:
            out[float(n)] = s
        elif n == inserted:
            out[n - 0.5] = s
        else:
            out[float(n - 1)] = s
    return out


def align_steps(
    run_a: RunRecord, steps_a: list[StepRecord], run_b: RunRecord, steps_b: list[StepRecord]
) -> tuple[list[tuple[StepRecord | None, StepRecord | None, bool]], str | None]:
    """Pairs ``(step of A, step of B, inserted)`` in order, and how they were aligned."""
    by_a = {s.step: s for s in steps_a}
    by_b = {s.step: s for s in steps_b}
    in_b = _update_step(run_b, by_b, run_a.run_id)
    in_a = None if in_b is not None else _update_step(run_a, by_a, run_b.run_id)
    keys_a, keys_b = _keys(by_a, in_a), _keys(by_b, in_b)
    pairs = [
        (keys_a.get(k), keys_b.get(k), not k.is_integer())
        for k in sorted(set(keys_a) | set(keys_b))
    ]
    shift = None
    if in_b is not None:
        shift = (
            f"B is a fork of A after step {in_b - 1} with an update as its step {in_b}; "
            f"B's steps from {in_b + 1} on are set against A's from {in_b} on"
        )
    elif in_a is not None:
        shift = (
            f"A is a fork of B after step {in_a - 1} with an update as its step {in_a}; "
            f"A's steps from {in_a + 1} on are set against B's from {in_a} on"
        )
    return pairs, shift


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
