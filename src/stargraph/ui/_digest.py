"""What the console needs from a whole run, folded step by step and cached.

The runs list shows token totals and the run page the path taken and per-node durations;
each needs every step. A :class:`RunDigest` is folded once and then only over the steps
committed since (a 1,000-step run is read once, not on every page view or live update).

Durations: a step record carries its commit time only, so a node's time is the wall time
between the previous commit and the commit of the step it ran in (its step's wall time,
shared by the nodes that ran side by side in that step, engine overhead included).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from stargraph.checkpoint import CheckpointStore, StepRecord

__all__ = ["DigestCache", "RunDigest", "Totals"]


@dataclass(slots=True)
class RunDigest:
    """Totals over steps ``0..counted`` of one run."""

    counted: int = -1
    last_ms: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    cost: float | None = None
    node_ms: dict[str, int] = field(default_factory=dict)
    node_runs: dict[str, int] = field(default_factory=dict)
    transitions: set[tuple[str, str]] = field(default_factory=set)
    last_nodes: tuple[str, ...] = ()
    timed: bool = False
    written: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """``(step, task index)`` of every write, by node: where a subgraph node's child runs
    are (their ids are built from them)."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens of every recorded model call."""
        return self.prompt_tokens + self.completion_tokens

    def fold(self, record: StepRecord) -> None:
        """Add one committed step (steps must come in order)."""
        # A node fanned out by N Send tasks writes N times in one step: it ran N times.
        tasks = Counter(w.node for w in record.writes)
        nodes = tuple(tasks)
        for w in record.writes:
            self.written.setdefault(w.node, []).append((record.step, w.index))
        if record.step > 0:
            known = bool(record.created_ms and self.last_ms)
            elapsed = record.created_ms - self.last_ms if known else 0
            self.timed = self.timed or known
            for node, runs in tasks.items():
                self.node_ms[node] = self.node_ms.get(node, 0) + max(elapsed, 0)
                self.node_runs[node] = self.node_runs.get(node, 0) + runs
            sources = self.last_nodes or ("__start__",)
            self.transitions.update((s, t) for s in sources for t in nodes)
            if nodes:
                self.last_nodes = nodes
        self.last_ms = record.created_ms or self.last_ms
        for call in record.calls:
            if call.kind == "llm":
                self.model_calls += 1
                usage = call.value.get("usage") if isinstance(call.value, dict) else None
                if isinstance(usage, dict):
                    self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                    self.completion_tokens += int(usage.get("completion_tokens") or 0)
                    cost = usage.get("cost")
                    if isinstance(cost, int | float):
                        self.cost = (self.cost or 0.0) + float(cost)
            elif call.kind == "tool":
                self.tool_calls += 1
        self.counted = record.step


@dataclass(slots=True)
class Totals:
    """Model and tool call totals summed over runs (a run and its child skill runs)."""

    runs: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    cost: float | None = None

    def add(self, digest: RunDigest) -> None:
        """Count one more run's digest."""
        self.runs += 1
        self.model_calls += digest.model_calls
        self.prompt_tokens += digest.prompt_tokens
        self.completion_tokens += digest.completion_tokens
        self.tool_calls += digest.tool_calls
        if digest.cost is not None:
            self.cost = (self.cost or 0.0) + digest.cost


class DigestCache:
    """Digests by run id, brought up to a run's last step on demand (thread-safe)."""

    def __init__(self, store: CheckpointStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._digests: dict[str, RunDigest] = {}

    def get(self, run_id: str, last_step: int) -> RunDigest:
        """The digest of ``run_id`` over steps ``0..last_step``."""
        with self._lock:
            digest = self._digests.get(run_id)
            if digest is None or digest.counted > last_step:
                # A shorter run than cached: a store was swapped under us; start again.
                digest = self._digests[run_id] = RunDigest()
            if digest.counted < last_step:
                for record in self._store.get_steps(
                    run_id, start=digest.counted + 1, end=last_step
                ):
                    digest.fold(record)
            return digest


def usage_of(value: Any) -> tuple[int, int]:
    """``(prompt, completion)`` tokens of a recorded model response, zeros if absent."""
    usage = value.get("usage") if isinstance(value, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
