"""Rule decisions at step boundaries: the executor's side of ``stargraph.fathom``.

The runtime does not import the rule engine (only ``stargraph.fathom`` imports clipspy); the
compiler hands it a factory of :class:`DecisionMaker` objects, which ``stargraph.fathom``
implements. After each step, the rules of the graph - and of each node that ran - decide
``continue``, ``goto``, ``halt``, ``finish`` or ``interrupt`` (an :class:`EngineDecision`
each); decisions combine with the precedence halt = finish > interrupt > goto > continue
(:data:`RANK`) into
one :class:`StepDecision`, and every non-``continue`` one is an event naming the rule that
fired and a ``RuleDecision`` stored with the step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol, runtime_checkable

__all__ = ["RANK", "DecisionKind", "DecisionMaker", "EngineDecision", "RuleSet", "StepDecision"]

DecisionKind = Literal["continue", "goto", "halt", "finish", "interrupt"]
"""What rules may decide after a step. ``halt`` stops the run before its end (status
``halted``); ``finish`` declares the task complete and ends the run ``done``."""

RANK: Final[Mapping[str, int]] = {
    "continue": 0,
    "goto": 1,
    "interrupt": 2,
    "halt": 3,
    "finish": 3,
}
"""Precedence of decision kinds: the strongest wins, within one engine and across engines.
``finish`` and ``halt`` rank equal, so the first to fire (by salience) wins: a task finished
at the step its budget ran out is reported done."""


class EngineDecision(Protocol):
    """One engine's decision after one node's step (``stargraph.fathom.Decision``).

    The step loop folds the decisions of every engine into one :class:`StepDecision`; what is
    stored with the step is the fold (``runtime._interrupts.RuleDecision``: several ``goto``
    targets, no ``continue``), not any one engine's answer.
    """

    @property
    def kind(self) -> DecisionKind:
        """``continue``, ``goto``, ``halt``, ``finish`` or ``interrupt``."""
        ...

    @property
    def target(self) -> str | None:
        """The node to go to, for ``goto``."""
        ...

    @property
    def reason(self) -> str | None:
        """Why, for ``halt``, ``finish`` and ``interrupt``."""
        ...

    @property
    def rule(self) -> str | None:
        """The rule that decided (``None`` when none fired)."""
        ...


@runtime_checkable
class DecisionMaker(Protocol):
    """One run's rule engine: ``stargraph.fathom.RuleEngine`` (and its pooled form)
    implements it, and ``stargraph.fathom.DecisionEngine`` is this protocol."""

    def decide(
        self,
        *,
        step: int,
        node: str,
        state_facts: Mapping[str, Any],
        last_event: str | None = None,
        tool_result: str | None = None,
        error_count: int = 0,
    ) -> EngineDecision:
        """The decision after ``node`` ran as step ``step``."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """JSON-able facts to store with a checkpoint. Read-only: the same object again
        means the facts did not change (a step then stores a reference to the step that
        holds them), so facts that change must come in a new object."""
        ...

    def restore(self, snapshot: Any) -> None:
        """Load facts saved by :meth:`snapshot`."""
        ...

    def close(self) -> None:
        """Release the engine."""
        ...


class StepDecision:
    """The combined decision of one step: its kind, the goto targets, and the deciding rule."""

    __slots__ = ("kind", "reason", "rule", "targets")

    def __init__(self) -> None:
        self.kind = "continue"
        self.targets: list[str] = []
        self.rule: str | None = None
        self.reason: str | None = None

    def add(self, decision: EngineDecision) -> None:
        """Fold one engine's decision in, keeping the strongest kind."""
        if decision.kind == "goto" and decision.target is not None:
            self.targets.append(decision.target)
        if RANK[decision.kind] > RANK[self.kind]:
            self.kind = decision.kind
            self.rule = decision.rule
            self.reason = decision.reason


class RuleSet:
    """The engines of one run: one for the graph's packs, one per node that mounts packs.

    Engine facts the rules see besides the state's ``Fact()`` fields come from state
    channels of the same name when the state has them: ``last_event``, ``tool_result`` and
    ``error_count`` (the ReAct and state-machine skills declare them).
    """

    def __init__(
        self,
        graph_engine: DecisionMaker | None,
        node_engines: Mapping[str, Callable[[], DecisionMaker]],
    ) -> None:
        self.graph_engine = graph_engine
        self._node_factories = node_engines
        self._node_engines: dict[str, DecisionMaker] = {}
        # The last snapshot, and the engines' snapshots it was made of: while each engine
        # gives the same object again, so does snapshot() (its callers tell "unchanged" by
        # identity). Holding them keeps their ids from being reused.
        self._parts: list[tuple[str, dict[str, Any]]] = []
        self._snapshot: dict[str, Any] = {}
        # Whether ``_snapshot`` holds the engines' facts as they are: an engine's facts
        # change only as it decides or restores (or a new engine joins), so the steps no
        # engine decides after (a ReAct run's act and observe) ask none of them again.
        self._current = False

    def applies(self, ran: Sequence[Any]) -> bool:
        """Whether any engine decides after a step in which the tasks ``ran`` ran (objects
        with a ``node``): the graph's, or the engine of one of their nodes."""
        if self.graph_engine is not None:
            return True
        factories = self._node_factories
        if len(ran) == 1:  # a chain's or a loop's step: one task, no generator
            return ran[0].node in factories
        return any(task.node in factories for task in ran)

    def _engine_for(self, node: str) -> DecisionMaker | None:
        if node not in self._node_factories:
            return None
        engine = self._node_engines.get(node)
        if engine is None:
            engine = self._node_engines[node] = self._node_factories[node]()
            self._current = False
        return engine

    def decide(self, step: int, ran: Sequence[str], values: Mapping[str, Any]) -> StepDecision:
        """Ask every relevant engine, for every node that ran (in node order)."""
        combined = StepDecision()
        self._current = False
        last_event = _text(values.get("last_event"))
        tool_result = _text(values.get("tool_result"))
        error_count = int(values.get("error_count") or 0)
        for node in sorted(set(ran)):
            for engine in (self.graph_engine, self._engine_for(node)):
                if engine is not None:
                    decision = engine.decide(
                        step=step,
                        node=node,
                        state_facts=values,
                        last_event=last_event,
                        tool_result=tool_result,
                        error_count=error_count,
                    )
                    combined.add(decision)
        return combined

    def snapshot(self) -> dict[str, Any]:
        """Facts of every engine, for the step's checkpoint: the same (read-only) dict as
        the last call's while no engine's snapshot changed."""
        if self._current:
            return self._snapshot
        parts: list[tuple[str, dict[str, Any]]] = []
        if self.graph_engine is not None:
            parts.append(("graph", self.graph_engine.snapshot()))
        for node, engine in sorted(self._node_engines.items()):
            parts.append((f"node:{node}", engine.snapshot()))
        last = self._parts
        if len(parts) != len(last) or any(
            key != was_key or facts is not was
            for (key, facts), (was_key, was) in zip(parts, last, strict=True)
        ):
            self._parts, self._snapshot = parts, dict(parts)
        self._current = True
        return self._snapshot

    def restore(self, snapshot: Mapping[str, Any] | None) -> None:
        """Restore every engine from a step's checkpoint (a resumed run decides the same)."""
        self._current = False
        if not snapshot:
            return
        if self.graph_engine is not None and "graph" in snapshot:
            self.graph_engine.restore(snapshot["graph"])
        for key, facts in snapshot.items():
            if key.startswith("node:"):
                engine = self._engine_for(key[5:])
                if engine is not None:
                    engine.restore(facts)

    def close(self) -> None:
        """Close every engine."""
        if self.graph_engine is not None:
            self.graph_engine.close()
        for engine in self._node_engines.values():
            engine.close()
        self._node_engines.clear()
        self._parts, self._snapshot = [], {}
        self._current = False


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
