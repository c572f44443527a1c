"""Running a subgraph node: the child run, its projection back, and its durability.

The child runs as a run of its own in the parent's store, with an id derived from the parent
run, the site and the parent step (``<run>::<site>@<step>.<index>``), so:

- a crash inside the child resumes *inside* the child: the parent re-executes the subgraph
  node, which finds the child run and resumes it, without re-running its finished steps;
- nesting composes (a child may mount children), with nested step ids in the run ids;
- in a replay (the node's journal is in replay mode) the child is *replayed* from its own
  recording (``runtime._replay.replay_child``), never run: no model call, no store write.

What comes back to the parent: for each declared output the child *wrote*, one write. When the
parent and child channels share a reducer (``append``, ``add``, ``merge``), the child's raw
writes are folded with it, so an appended list is not duplicated and a summed key is not
added twice; otherwise the child's final value is written once. Keys the child did not write
are not written at all, so parent reducers never re-apply to them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import reduce
from typing import Any

from stargraph.errors import InvalidWriteError
from stargraph.runtime import CompiledGraph, RunContext
from stargraph.runtime._plan import ChildRunId
from stargraph.state import Channel

__all__ = ["SubgraphRunner"]

_SCALARS = (str, int, float, bool, type(None))


def _private(value: Any) -> Any:
    """A copy the child may mutate freely: scalars as they are, flat lists/tuples of scalars
    shallow-copied (the common case, ~20x cheaper than deepcopy), anything else deep-copied."""
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, list | tuple) and all(isinstance(v, _SCALARS) for v in value):
        return list(value) if isinstance(value, list) else value
    return copy.deepcopy(value)


class SubgraphRunner:
    """The callable a subgraph node executes: ``runner(state, ctx) -> writes``."""

    def __init__(
        self,
        child: CompiledGraph[Any],
        *,
        node_id: str,
        site: str,
        inputs: Mapping[str, str],
        outputs: Mapping[str, str],
        parent_channels: Mapping[str, Channel],
        bubble_events: bool,
    ) -> None:
        self.child = child
        self.node_id = node_id
        self.site = site
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)
        self.parent_channels = parent_channels
        self.bubble_events = bubble_events
        self.declared = frozenset(child.ir.outputs or child.channels)
        # Child channels that share a parent channel's name without being declared outputs:
        # writing one is an attempt to mutate an undeclared parent key.
        self.guarded = frozenset(
            k for k in child.channels if k in parent_channels and k not in self.declared
        )

    @property
    def code_hash(self) -> str:
        """The child's code hash: a change inside the skill changes the parent's code hash."""
        return self.child.code_hash

    def __repr__(self) -> str:
        return f"SubgraphRunner({self.site!r}, {self.child.graph_hash})"

    def __call__(self, state: Any, ctx: RunContext) -> dict[str, Any]:
        """Run (or resume) the child for this parent step; return the parent writes."""
        child_input = {}
        for child_key, parent_key in self.inputs.items():
            value = getattr(state, parent_key)
            # The child gets its own copies: nothing it does in place can reach the parent.
            child_input[child_key] = _private(value)
        run_id = ChildRunId(ctx.run_id, self.site, ctx.step, ctx.index).format()
        emit = ctx.events.append if (self.bubble_events and ctx.events is not None) else None
        path = (*ctx.path, self.site)
        if ctx.journal is not None and ctx.journal.replay:
            from stargraph.runtime._replay import replay_child

            values, raw = replay_child(
                self.child.steploop,
                child_input,
                run_id=run_id,
                source=ctx.journal.source,
                parent_run_id=ctx.run_id,
                path=path,
                emit=emit,
            )
        else:
            values, raw = self.child.run_nested(
                child_input, run_id=run_id, path=path, emit=emit, parent=ctx
            )
        return self._project(values, raw, ctx)

    def _project(
        self, values: Mapping[str, Any], raw: list[tuple[str, dict[str, Any]]], ctx: RunContext
    ) -> dict[str, Any]:
        written: dict[str, list[Any]] = {}
        for node, writes in raw:
            for key, value in writes.items():
                if key in self.guarded:
                    raise InvalidWriteError(
                        f"skill at site {'/'.join((*ctx.path, self.site))!r}: child node "
                        f"{node!r} wrote {key!r}, a channel of the parent that the skill does "
                        f"not declare (declared outputs: {sorted(self.declared)}); add it to "
                        "the skill's state_schema or rename the child's field",
                        run_id=ctx.run_id,
                        step=ctx.step,
                        node=self.node_id,
                    )
                written.setdefault(key, []).append(value)
        out: dict[str, Any] = {}
        for child_key, parent_key in self.outputs.items():
            if child_key not in written:
                continue
            parent_reducer = self.parent_channels[parent_key].reducer
            child_reducer = self.child.channels[child_key].reducer
            if parent_reducer is not None and parent_reducer is child_reducer:
                out[parent_key] = reduce(parent_reducer, written[child_key])
            else:
                out[parent_key] = values[child_key]
        return out
