"""Where a replay's recordings come from: the run replayed, and its descendant runs.

A subgraph node's child run is a run of its own (``<run>::<site>@<activation>.<index>``, see
:class:`~stargraph.runtime._plan.ChildRunId`), so replaying the node replays its child from
the child's recording. A :class:`ReplaySource` is handed down explicitly - from the replayed
run to its tasks' journals, from a subgraph node to its child's replay - and finds each
child's recording in the cassette's ``children`` or, when the recording carries none, in the
graph's store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from stargraph.checkpoint import CheckpointStore, Recording
from stargraph.errors import ReplayMissError
from stargraph.runtime._plan import ChildRunId

__all__ = ["ReplaySource", "Stub"]

Stub = Literal["must", "all"] | frozenset[str]
"""Which nodes a replay serves their recorded writes instead of running them: ``"must"``
(the ``must_stub`` ones), ``"all"``, or the ``must_stub`` ones and those named (a node of
the graph, or ``site/node`` for a node of a subgraph's child)."""


class ReplaySource:
    """The recording being replayed, and where the recordings of its descendants are."""

    __slots__ = ("children", "loaded", "recording", "store", "stub")

    def __init__(
        self,
        recording: Recording,
        *,
        children: Mapping[str, Recording] | None = None,
        store: CheckpointStore | None = None,
        stub: Stub = "must",
        loaded: dict[str, Recording] | None = None,
    ) -> None:
        """``children``: the recordings of descendant runs, by run id; by default those the
        recording carries (a loaded cassette), else none (``store`` is asked instead).
        ``stub``: which nodes the replay serves their recorded writes (see
        ``runtime._replay``); descendants are replayed with the same. ``loaded``: child
        recordings read from the store already, shared with the descendants' sources (a
        replay's plan reads them before the replay does)."""
        self.recording = recording
        self.stub = stub
        self.loaded: dict[str, Recording] = {} if loaded is None else loaded
        if children is None:
            carried = getattr(recording, "children", None)
            if carried is not None:
                children = {child.run.run_id: child for child in carried}
        self.children = children
        self.store = store

    def _child_ids(self, run_id: str) -> list[str]:
        """``run_id``, then - for a fork, at a step it copied from its parent - the id the
        child has under the parent run (a fork copies steps, not the child runs they made)."""
        record = self.recording.run
        ids = [run_id]
        if record.parent_run_id is None or record.parent_step is None:
            return ids
        # Tried second: a child the fork made after the step it was forked at is under the
        # fork's own id; one of a copied step only under the parent's, at the same position
        # (the fork's copied history counts activations as the parent's did).
        if ChildRunId.descends(run_id, record.run_id):
            ids.append(ChildRunId.rebase(run_id, record.run_id, record.parent_run_id))
        return ids

    def child_recording(self, run_id: str) -> Recording:
        """The recording of child run ``run_id`` (from the cassette, else the store)."""
        ids = self._child_ids(run_id)
        if self.children is not None:
            for candidate in ids:
                found = self.children.get(candidate)
                if found is not None:
                    return found
            where = "the cassette's children"
        else:
            store = self.store
            if store is not None:
                for candidate in ids:
                    cached = self.loaded.get(candidate)
                    if cached is not None:
                        return cached
                    try:
                        found = Recording.from_store(store, candidate)
                    except LookupError:
                        continue
                    self.loaded[candidate] = found
                    return found
            where = "the graph's store" if store is not None else "a store (the graph has none)"
        raise ReplayMissError(
            f"replay of run {self.recording.run.run_id!r}: subgraph child run {run_id!r} is "
            f"not in {where}; export the cassette again (export_cassette includes child runs) "
            "or replay from the store that holds the run",
            run_id=self.recording.run.run_id,
        )

    def child(self, run_id: str, store: CheckpointStore | None) -> ReplaySource:
        """The source of child run ``run_id``'s replay (its descendants are looked up where
        this run's are; ``store`` is the child graph's)."""
        return ReplaySource(
            self.child_recording(run_id),
            children=self.children,
            store=store,
            stub=self.stub,
            loaded=self.loaded,
        )
