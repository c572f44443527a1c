"""Reading stored runs for pictures and reports: steps as plain data, state at a step.

Only public store methods are used, plus the executor's own state fold (``load_values``),
so a report shows exactly the state ``CompiledGraph.get_state`` would. Reconstructing state
needs the graph's state model (for its reducers), but not the node callables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from stargraph.checkpoint import CheckpointStore, StepRecord
from stargraph.errors import CompileError
from stargraph.ir import GraphIR

__all__ = [
    "RuleDecision",
    "StepView",
    "format_ms",
    "rule_decision",
    "rule_facts",
    "state_at",
    "step_views",
]


@dataclass(frozen=True, slots=True)
class RuleDecision:
    """The rule decision saved with a step (any decision other than ``continue``)."""

    kind: str
    rule: str
    targets: tuple[str, ...]
    reason: str | None


@dataclass(frozen=True, slots=True)
class StepView:
    """One committed step as displayable data."""

    step: int
    time: str
    nodes: tuple[str, ...]
    writes: tuple[tuple[str, dict[str, Any]], ...]
    next: tuple[str, ...]
    facts: tuple[tuple[str, str, Any], ...]
    decision: RuleDecision | None = None


def format_ms(ms: int) -> str:
    """Milliseconds since the epoch as an ISO-8601 UTC time (``-`` for 0, i.e. unknown)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def _label(node: str, index: int) -> str:
    return node if index == 0 else f"{node}[{index}]"


def rule_facts(record: StepRecord) -> tuple[tuple[str, str, Any], ...]:
    """``(engine, template, slots)`` of the rule facts saved with a step, minus the engine's
    own per-step bookkeeping (``sg-step``/``sg-state``, re-asserted every step)."""
    facts = record.facts
    if not isinstance(facts, dict):
        return ()
    out: list[tuple[str, str, Any]] = []
    for engine, snap in sorted(facts.items()):
        if not isinstance(snap, dict):
            continue
        for item in snap.get("facts", ()):
            if (
                isinstance(item, list | tuple)
                and len(item) == 2
                and item[0] not in ("sg-step", "sg-state")
            ):
                out.append((str(engine), str(item[0]), item[1]))
    return tuple(out)


def rule_decision(record: StepRecord) -> RuleDecision | None:
    """The ``{kind, rule, targets, reason}`` decision saved with a step, if any."""
    raw = record.decision
    if not isinstance(raw, dict) or not raw.get("kind"):
        return None
    targets = raw.get("targets") or ()
    if isinstance(targets, str):
        targets = (targets,)
    reason = raw.get("reason")
    return RuleDecision(
        kind=str(raw["kind"]),
        rule=str(raw.get("rule") or ""),
        targets=tuple(str(t) for t in targets),
        reason=None if reason is None else str(reason),
    )


def step_views(store: CheckpointStore, run_id: str, step: int | None = None) -> list[StepView]:
    """Every committed step of ``run_id`` (or just ``step``) as :class:`StepView`."""
    records = (
        store.get_steps(run_id) if step is None else store.get_steps(run_id, start=step, end=step)
    )
    return [
        StepView(
            step=r.step,
            time=format_ms(r.created_ms),
            nodes=tuple(_label(w.node, w.index) for w in r.writes),
            writes=tuple((_label(w.node, w.index), w.writes) for w in r.writes),
            next=tuple(_label(t.node, t.index) for t in r.next),
            facts=rule_facts(r),
            decision=rule_decision(r),
        )
        for r in records
    ]


def state_at(
    ir: GraphIR,
    store: CheckpointStore,
    run_id: str,
    step: int | None = None,
    *,
    model: type[BaseModel] | None = None,
) -> dict[str, Any]:
    """The state of ``run_id`` after ``step`` (default: its last step) as JSON data.

    ``model`` is the state model the graph was compiled with (``CompiledGraph.state_model``);
    by default the one ``ir.state.ref`` names is imported. A graph written with
    ``stargraph.langgraph`` over a ``TypedDict`` names the ``TypedDict``: pass its compiled
    graph's model.

    Raises ``CompileError`` when the graph's state model cannot be imported (or is not a
    pydantic model), and the store's ``CheckpointError`` subclasses for a missing run or step.
    """
    from stargraph.errors import CheckpointError
    from stargraph.refs import resolve_ref
    from stargraph.runtime._durable import load_values  # the executor's fold; no public twin
    from stargraph.state import build_channels

    if model is None:
        try:
            model = resolve_ref(ir.state.ref)
        except (ImportError, AttributeError) as exc:
            raise CompileError.at(
                "/state/ref",
                f"cannot import state model {ir.state.ref!r}: {exc}",
                "run from the project directory (or set PYTHONPATH) so it imports",
                subject=f"graph {ir.name!r}",
            ) from exc
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise CompileError.at(
                "/state/ref",
                f"state {ir.state.ref!r} is a {type(model).__name__}, not a pydantic model, "
                "so its stored values cannot be read back without the graph",
                "pass model=CompiledGraph.state_model of the graph that made the run",
                subject=f"graph {ir.name!r}",
            )
    last = store.get_run(run_id).last_step
    at = last if step is None else step
    if not 0 <= at <= last:
        raise CheckpointError(
            f"run {run_id!r} has steps 0..{last}; step {at} does not exist",
            run_id=run_id,
            step=at,
        )
    values, _ = load_values(store, build_channels(model, ir.state), run_id, at)
    dumped: dict[str, Any] = model.model_validate(values).model_dump(mode="json")
    return dumped
