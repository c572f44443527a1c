"""What a replay re-executes: the nodes whose bodies run again, and those served instead.

A replay serves every *call* a node makes from the record (model, tool, clock, ids,
``ctx.once``), but a node's body is ordinary code: whatever it does besides those calls - a
file appended to, a request sent with a client of its own - happens again when it runs. Only
its writes are checked. So before a replay starts it works out, from the record, which
recorded nodes will run (:attr:`ReplayPlan.reruns`) and which are served their recorded
writes (:attr:`ReplayPlan.served`), descending into subgraph child runs; left to its default,
it warns (:class:`~stargraph.errors.ReplayEffectsWarning`) when any will run.

Which nodes are served is the replay's ``stub``: ``"must"`` (the ``must_stub`` nodes, the
default), ``"all"`` (every node: nothing runs but the graph's routing, rules and reducers,
checked against the record), or a collection of node names served besides the ``must_stub``
ones (``site/node`` names a node of a subgraph's child run).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from stargraph.errors import ReplayEffectsWarning, ReplayError, ReplayMissError
from stargraph.runtime._plan import ChildRunId, Plan
from stargraph.runtime._recorded import ReplaySource, Stub

if TYPE_CHECKING:
    from stargraph.runtime._steploop import StepLoop

__all__ = ["ReplayPlan", "StubOption", "as_stub", "plan_replay", "served_nodes", "warn_reruns"]

StubOption = Literal["must", "all"] | Collection[str]
"""What ``replay(stub=)`` accepts: ``"must"``, ``"all"`` or node names."""


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What a replay of run ``run_id`` will do with each recorded node, worked out before it
    starts (``CompiledGraph.replay_plan``).

    ``reruns``: the nodes whose bodies run again - their model, tool and ``ctx.once`` calls
    are served from the record, anything else they do (files, services reached without a
    tool) happens again, and their writes are checked against the record. ``served``: the
    nodes that do not run; their recorded writes are merged instead. A node of a subgraph's
    child run is named ``site/node``; a served subgraph node's child is not replayed, so its
    nodes are in neither. Each name appears once, in the order the record first ran it.
    """

    run_id: str
    stub: Stub
    reruns: tuple[str, ...]
    served: tuple[str, ...]

    @property
    def offline(self) -> bool:
        """Whether no node body runs again (every recorded node is served)."""
        return not self.reruns

    def describe(self) -> str:
        """One sentence: which nodes run again and how to serve them instead."""
        if not self.reruns:
            return (
                f"replay of run {self.run_id!r} runs no node body again: every recorded "
                "node's writes are served from the record"
            )
        names = ", ".join(repr(name) for name in self.reruns)
        return (
            f"replay of run {self.run_id!r} runs the bodies of {names} again: their model, "
            "tool and ctx.once calls come from the record, but anything else they do (a "
            "file written, a service called without a tool) happens again; pass stub='all' "
            "to serve every node's recorded writes instead, or stub={"
            + ", ".join(repr(name) for name in self.reruns)
            + "} to serve these, or stub='must' to re-run them knowingly"
        )


def _site(spec: Any) -> tuple[str, StepLoop]:
    """The site and the child step loop of a subgraph node (its ``fn`` is its runner)."""
    runner: Any = spec.fn
    return runner.site, runner.child.steploop


def _names(plan: Plan, path: tuple[str, ...], out: set[str]) -> None:
    for name, spec in plan.specs.items():
        out.add("/".join((*path, name)))
        if spec.kind == "subgraph":
            site, child = _site(spec)
            _names(child.plan, (*path, site), out)


def as_stub(stub: StubOption | None, plan: Plan) -> Stub:
    """``replay(stub=)`` checked against the graph: ``"must"``, ``"all"``, or the frozen set
    of names, each a node of the graph or ``site/node`` of a subgraph's child."""
    if stub is None or stub == "must":
        return "must"
    if stub == "all":
        return "all"
    if isinstance(stub, str):
        raise ReplayError(
            f"replay(stub={stub!r}): stub is 'must', 'all' or a collection of node names; "
            f"to serve one node pass stub={{{stub!r}}}"
        )
    names = frozenset(stub)
    known: set[str] = set()
    _names(plan, (), known)
    unknown = sorted(str(name) for name in names if name not in known)
    if unknown:
        raise ReplayError(
            f"the replay's stub names {', '.join(map(repr, unknown))}, not a node of the graph; "
            f"its nodes are {', '.join(sorted(known))} (a subgraph's as site/node)"
        )
    return names


def served_nodes(plan: Plan, stub: Stub, path: tuple[str, ...] = ()) -> frozenset[str]:
    """The nodes of ``plan`` (the graph of a run at ``path``) a replay with ``stub`` serves."""
    specs = plan.specs
    if stub == "all":
        return frozenset(specs)
    prefix = "/".join(path) + "/" if path else ""
    named = () if stub == "must" else stub
    return frozenset(
        name
        for name, spec in specs.items()
        if spec.must_stub or name in named or (prefix and prefix + name in named)
    )


def plan_replay(
    loop: StepLoop, source: ReplaySource, *, until_step: int | None = None
) -> ReplayPlan:
    """The :class:`ReplayPlan` of replaying ``source`` (up to ``until_step``) through
    ``loop``'s graph with ``source.stub``; child recordings are read as the replay will."""
    reruns: dict[str, None] = {}
    served: dict[str, None] = {}
    _walk(loop.plan, source, until_step, (), (reruns, served))
    return ReplayPlan(
        run_id=source.recording.run.run_id,
        stub=source.stub,
        reruns=tuple(reruns),
        served=tuple(served),
    )


def _walk(
    plan: Plan,
    source: ReplaySource,
    until_step: int | None,
    path: tuple[str, ...],
    out: tuple[dict[str, None], dict[str, None]],
) -> None:
    """Add the nodes ``source``'s record ran (at ``path``) to ``out``: (re-run, served)."""
    reruns, served = out
    serve = served_nodes(plan, source.stub, path)
    recording = source.recording
    run_id = recording.run.run_id
    steps = sorted(recording.steps, key=lambda s: s.step)
    activations = ChildRunId.activations(
        steps, {n for n, s in plan.specs.items() if s.kind == "subgraph"}
    )
    for record in steps:
        if record.step == 0:
            continue  # the input: no node ran
        if until_step is not None and record.step > until_step:
            break
        for write in record.writes:
            spec = plan.specs.get(write.node)
            if spec is None:
                continue  # an update or a migration, not a node
            name = "/".join((*path, write.node))
            if write.node in serve:
                served[name] = None
            elif spec.kind == "subgraph":
                # Its body replays the child run from the child's recording.
                site, child = _site(spec)
                activation = activations[(record.step, write.node)]
                child_id = ChildRunId.id_of(run_id, site, activation, write.index)
                try:
                    child_source = source.child(child_id, child.store)
                except ReplayMissError:
                    # The replay reports the missing child when it reaches the node; until
                    # then the node is one whose body runs.
                    reruns[name] = None
                    continue
                _walk(child.plan, child_source, None, (*path, site), out)
            else:
                reruns[name] = None


def warn_reruns(plan: ReplayPlan, *, stacklevel: int) -> None:
    """Warn (:class:`~stargraph.errors.ReplayEffectsWarning`) when ``plan`` runs any node
    body again."""
    if plan.reruns:
        warnings.warn(plan.describe(), ReplayEffectsWarning, stacklevel=stacklevel + 1)
