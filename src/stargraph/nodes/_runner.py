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
from collections.abc import Callable, Mapping
from functools import partial, reduce
from typing import Any

from pydantic import BaseModel

from stargraph.errors import InvalidWriteError
from stargraph.reducers import append
from stargraph.runtime import CompiledGraph, RunContext
from stargraph.runtime._context import activation_of
from stargraph.runtime._plan import ChildRunId, Command, Send
from stargraph.runtime._stored import run_nested
from stargraph.runtime._values import PARENT_KEY
from stargraph.state import Channel

__all__ = ["SubgraphRunner"]

_SCALARS = (str, int, float, bool, type(None))

_PLAIN_DEPTH = 32
"""How deep :func:`_private` copies nested lists and dicts itself before it hands the value
to ``copy.deepcopy`` (which also copes with cycles and shared parts)."""


class _NotPlain(Exception):
    """The value holds something other than lists, dicts and scalars (or is too deep)."""


def _plain_copy(value: Any, depth: int) -> Any:
    """A copy of nested lists, dicts and tuples of scalars (tuples of scalars as they are);
    raises :class:`_NotPlain` on anything else."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > _PLAIN_DEPTH:
        raise _NotPlain
    if kind is list:
        return [v if type(v) in _SCALARS else _plain_copy(v, depth + 1) for v in value]
    if kind is dict:
        return {
            k: v if type(v) in _SCALARS else _plain_copy(v, depth + 1) for k, v in value.items()
        }
    if kind is tuple:
        if all(type(v) in _SCALARS for v in value):
            return value
        return tuple(_plain_copy(v, depth + 1) for v in value)
    raise _NotPlain


def _private(value: Any) -> Any:
    """A copy the child may mutate freely: scalars as they are; lists, dicts and tuples of
    those (JSON-like data, the common case) copied level by level, several times cheaper
    than ``copy.deepcopy``; anything else (models, sets, objects) deep-copied."""
    if type(value) in _SCALARS:
        return value
    try:
        return _plain_copy(value, 0)
    except _NotPlain:
        return copy.deepcopy(value)


_Fold = Callable[[list[Any]], Any]
"""Folds the raw writes of one key, in merge order, into the one write the parent gets."""


class SubgraphRunner:
    """The callable a subgraph node executes: ``runner(state, ctx) -> writes``.

    The projections are planned once, here: which parent field feeds which child channel,
    and for each output whether the child's raw writes are folded with the shared reducer
    or its final value is taken.
    """

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
        model = child.steploop.plan.state_model
        fields = list(model.model_fields)
        # When the parent's state is of the child's own model, every field is projected to
        # itself and the model has no validator of its own (nor post-init), the projection
        # of the parent's state is a valid child state already: it is not validated again.
        # ``_same_model`` is that model, checked against the parent state's type per call.
        self._same_model: type[BaseModel] | None = None
        if inputs == {name: name for name in fields} and _plain_model(model):
            self._same_model = model
            inputs = {name: name for name in fields}  # the model's field order
        self._inputs = tuple((child_key, parent_key) for child_key, parent_key in inputs.items())
        # (child key, parent key, how to fold the child's raw writes of the key into one
        # parent write, or None to take the child's final value), in the order of ``outputs``.
        self._outputs: tuple[tuple[str, str, _Fold | None], ...] = tuple(
            (child_key, parent_key, _fold(parent_channels[parent_key], child, child_key))
            for child_key, parent_key in outputs.items()
        )

    @property
    def code_hash(self) -> str:
        """The child's code hash: a change inside the skill changes the parent's code hash."""
        return self.child.code_hash

    def __repr__(self) -> str:
        return f"SubgraphRunner({self.site!r}, {self.child.graph_hash})"

    def __call__(self, state: Any, ctx: RunContext) -> dict[str, Any] | Command:
        """Run (or resume) the child for this parent step; return the parent writes (a
        ``Command`` when a child node sent one to the parent)."""
        child_input = {}
        for child_key, parent_key in self._inputs:
            value = getattr(state, parent_key)
            # The child gets its own copies: nothing it does in place can reach the parent.
            child_input[child_key] = value if type(value) in _SCALARS else _private(value)
        run_id = ChildRunId.id_of(ctx.run_id, self.site, activation_of(ctx), ctx.index)
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
                thread=ctx.thread_id,
            )
        else:
            values, raw = run_nested(
                self.child.steploop,
                child_input,
                run_id=run_id,
                path=path,
                emit=emit,
                parent=ctx,
                valid=type(state) is self._same_model,
            )
        return self._project(values, raw, ctx)

    def child_input(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The child run's input from the parent's channel ``values`` (what a call hands
        the child; a replay against another graph version starts the child from it)."""
        return {child_key: values[parent_key] for child_key, parent_key in self._inputs}

    def projection(
        self, values: Mapping[str, Any], raw: list[tuple[str, dict[str, Any]]]
    ) -> dict[str, Any]:
        """The parent writes of a child run that ended with ``values`` after the raw writes
        ``raw`` (one that sent its parent no ``Command`` and wrote no guarded channel)."""
        return self._projected(values, raw)

    def _project(
        self, values: Mapping[str, Any], raw: list[tuple[str, dict[str, Any]]], ctx: RunContext
    ) -> dict[str, Any] | Command:
        if self.guarded:
            self._check_guarded(raw, ctx)
        out = self._projected(values, raw)
        sent = [(node, writes[PARENT_KEY]) for node, writes in raw if PARENT_KEY in writes]
        if not sent:
            return out
        # What child nodes sent the parent: their updates over the projection (only to the
        # channels the skill's outputs go to), their gotos routed by this node's
        # destinations when the parent checks the Command.
        allowed = set(self.outputs.values())
        goto: list[Any] = []
        for node, command in sent:
            refused = sorted(set(command["update"]) - allowed)
            if refused:
                raise InvalidWriteError(
                    f"skill at site {'/'.join((*ctx.path, self.site))!r}: child node {node!r} "
                    f"sent the parent Command(graph=Command.PARENT) updating {refused}, which "
                    f"the skill's outputs do not go to (they go to {sorted(allowed)}); "
                    "declare them as outputs of the skill, or update only those",
                    run_id=ctx.run_id,
                    step=ctx.step,
                    node=self.node_id,
                )
            out.update(command["update"])
            goto.extend(
                item if type(item) is str else Send(item["node"], item["payload"])
                for item in command["goto"]
            )
        return Command(update=out, goto=goto)

    def _projected(
        self, values: Mapping[str, Any], raw: list[tuple[str, dict[str, Any]]]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for child_key, parent_key, fold in self._outputs:
            # Keys the child did not write are left out: parent reducers must not re-apply.
            if fold is None:
                for _, writes in raw:
                    if child_key in writes:
                        out[parent_key] = values[child_key]
                        break
            else:
                parts = [writes[child_key] for _, writes in raw if child_key in writes]
                if parts:
                    out[parent_key] = fold(parts)
        return out

    def _check_guarded(self, raw: list[tuple[str, dict[str, Any]]], ctx: RunContext) -> None:
        """Raise on the first write (in merge order) to a guarded channel."""
        for node, writes in raw:
            for key in writes:
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


_INERT_CONFIG = frozenset(
    {
        "title",
        "frozen",
        "extra",
        "arbitrary_types_allowed",
        "populate_by_name",
        "validate_assignment",
        "protected_namespaces",
        "json_schema_extra",
        "use_attribute_docstrings",
        "defer_build",
        "hide_input_in_errors",
        "ser_json_inf_nan",
        "ser_json_timedelta",
        "ser_json_bytes",
    }
)
"""Model config keys that leave the validation of a valid field value as it is (unlike,
say, ``str_to_lower`` or ``strict``, which the channels' own validators do not apply)."""


def _plain_model(model: type[BaseModel]) -> bool:
    """Whether validating a ``model`` state built field by field from valid values of those
    fields changes nothing: no model or field validator, no post-init hook, no alias, no
    config that transforms values."""
    decorators = model.__pydantic_decorators__
    return (
        set(model.model_config) <= _INERT_CONFIG
        and not decorators.validators
        and not decorators.field_validators
        and not decorators.root_validators
        and not decorators.model_validators
        and model.__pydantic_post_init__ is None
        and all(
            info.alias is None and info.validation_alias is None
            for info in model.model_fields.values()
        )
    )


def _fold(parent: Channel, child: CompiledGraph[Any], child_key: str) -> _Fold | None:
    """How to fold the child's raw writes of ``child_key`` when parent and child channels
    share a reducer (so an appended list is not duplicated, a summed key not added twice),
    or ``None``: the child's final value is written once."""
    reducer = parent.reducer
    if reducer is None or reducer is not child.channels[child_key].reducer:
        return None
    if reducer is append.fn:
        return _concat
    return partial(reduce, reducer)


def _concat(parts: list[Any]) -> Any:
    """``reduce(append, parts)`` without the list it builds for every part but the last."""
    if len(parts) == 1:
        return parts[0]
    return [item for part in parts for item in part]
