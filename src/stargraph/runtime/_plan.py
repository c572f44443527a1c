"""The execution plan: what the executor needs per node, resolved once at compile time.

Compiling turns IR references into callables, edges into per-node successor lists, and joins
into barrier tables, so the step loop does no lookups by name beyond one dict access.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import types
import weakref
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Literal, NamedTuple, Union, cast, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from stargraph.checkpoint._records import TaskRecord
from stargraph.errors import MissingServiceError
from stargraph.ir import END, GraphIR, RetryPolicyIR
from stargraph.reducers import append as _append_reducer
from stargraph.refs import importable_name
from stargraph.runtime._protocols import HasCodeHash, Journaled
from stargraph.runtime._rules import RuleSet
from stargraph.runtime._secrets import SecretMask, mask_of
from stargraph.state import Channel, Checker

__all__ = [
    "ChildRunId",
    "Command",
    "JoinSpec",
    "NodeSpec",
    "Plan",
    "RouterSpec",
    "Send",
    "Task",
    "WriteRule",
    "accepts_ctx",
    "by_task",
    "code_hash",
]


@dataclass(frozen=True, slots=True)
class Send:
    """Returned by a router to run ``node`` once more in the next step, map-reduce style.

    ``payload`` (a JSON-compatible mapping of state fields) is overlaid on the state that this
    one execution of ``node`` sees; it is checkpointed with the pending task. A node that
    declares an input model (``with_node(..., input=Model)``) receives the payload instead,
    validated into that model, and it may hold keys that are not state fields.
    """

    node: str
    payload: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Command:
    """Returned by a node instead of a dict: write ``update`` and go to ``goto`` as well.

    ``update`` is a mapping of channel writes, checked like any node's. ``goto`` names the
    node(s) to run in the next step (a node id, :data:`~stargraph.ir.END`, a ``Send``, or a
    list of them), *in addition to* what the node's edges schedule; every node it names must
    be declared with ``with_node(..., destinations=[...])``, so the graph's IR, hash,
    drawing and validation know the edge. Where a run goes is committed with the step, so a
    resumed or replayed run goes the same way.
    """

    update: Mapping[str, Any] | None = None
    goto: str | Send | Sequence[str | Send] = ()
    graph: str | None = None
    """``Command.PARENT``: the command is for the graph the subgraph (skill) runs in. The
    child run ends after this step; its subgraph node writes ``update`` (only to the parent
    channels the skill's outputs go to) and goes to ``goto``, which must be among the
    node's ``destinations`` (``SubgraphNode.from_skill(..., destinations=[...])``)."""
    resume: Any = None
    """Reserved for resuming an interrupted run (``resume(run_id, response)`` does that
    today); a node returning it is refused with a typed error."""

    PARENT: ClassVar[str] = "__parent__"
    """``graph=Command.PARENT``: the command is for the graph a subgraph runs in."""

    # How the tools layer (which does not import the runtime) knows a tool returned one.
    __stargraph_command__: ClassVar[bool] = True


class UnmetRequirement(NamedTuple):
    """A capability a mounted skill requires that its graph was not given."""

    pointer: str
    """Where the mount is in the IR (``/nodes/<i>``)."""
    node: str
    skill: str
    capability: str
    """As the skill wrote it, ``service:<name>``."""

    @property
    def service(self) -> str:
        """The service key the capability names."""
        return self.capability.partition(":")[2]

    def describe(self) -> str:
        """``node 'ask' (skill rag@1.0.0) requires service:docs``."""
        return f"node {self.node!r} (skill {self.skill}) requires {self.capability}"


def unmet_error(unmet: Sequence[UnmetRequirement]) -> MissingServiceError:
    """Why a live run of a graph with unmet skill requirements does not start: every one of
    them named, the first as the error's ``node`` and ``service``."""
    first = unmet[0]
    names = ", ".join(repr(need.service) for need in unmet)
    return MissingServiceError(
        "; ".join(need.describe() for need in unmet)
        + f", which the graph was not given; compile it with services={{{names}: ...}} (a "
        "worker: Worker(db, services=...) or `stargraph worker --services module:fn`); a "
        "replay needs none: its record answers the calls",
        service=first.service,
        node=first.node,
    )


class Task(NamedTuple):
    """One node execution scheduled in a step. Tasks sort by ``(node, index)``: the fixed
    order in which their writes merge and their events are emitted."""

    node: str
    index: int = 0  # type: ignore[assignment]  # shadows tuple.index; the name reads best here
    payload: Mapping[str, Any] | None = None

    @property
    def key(self) -> tuple[str, int]:
        """``(node, index)``: identifies the task within its step."""
        return (self.node, self.index)


WriteRule = tuple[Callable[[Any], Any], type | None, Checker | None]
"""How a channel takes one written value: ``(validate, exact, check)``. A value of exactly
type ``exact`` (an ``int``, ``float``, ``str`` or ``bool`` field) is valid as it is, so the
validator, which would hand back that same value, is not called; ``check`` is the channel's
storability check (``None``: not needed)."""

_EXACT: frozenset[type] = frozenset({int, float, str, bool})
"""Field types whose validator returns a value of exactly that type unchanged."""


def write_rule(channel: Channel, info: FieldInfo | None) -> WriteRule:
    """The :data:`WriteRule` of ``channel``, the field ``info`` describes."""
    # A constrained field (``Field(ge=0)``) must see every value, even one of its exact type.
    exact: type | None = None
    if info is not None and not info.metadata:
        exact = _exact_type(info.annotation)
    return (channel.validate, exact, channel.check)


def _exact_type(annotation: Any) -> type | None:
    """The type of which a value is valid as it is for a field of type ``annotation``: the
    field's own (``int``, ``float``, ``str``, ``bool``), or the one of an optional field
    (``str | None``), whose validator hands such a value back too (only ``None`` is then
    left to the validator); ``None`` for any other type."""
    if annotation in _EXACT:
        return cast(type, annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        arms = get_args(annotation)
        if len(arms) == 2 and type(None) in arms:
            (base,) = (a for a in arms if a is not type(None))
            if base in _EXACT:
                return cast(type, base)
    return None


def by_task(result: tuple[Task, Any]) -> Task:
    """Sort key of a ``(task, ...)`` pair: its task, so ``(node, index)`` order (a step's
    tasks differ in those, so their payloads are never compared)."""
    return result[0]


@dataclass(frozen=True, slots=True)
class ChildRunId:
    """The run id of the child run a subgraph node makes: ``<parent>::<site>@<n>.<index>``.

    ``parent`` is the run the node ran in (itself a child run when subgraphs nest: the
    innermost site comes last), ``site`` the node's site (its IR position), ``activation``
    which step *of that node* made it (1 for the node's first step in the run, 2 for its
    second ...) and ``index`` the task (a ``Send`` fan-out's position). The parent's global
    step number is not part of it: a node added or removed elsewhere in the graph shifts
    every later step but leaves each child run's id alone, so a changed graph finds the
    child runs a recording holds where it expects them. The one place that writes and
    reads that format.
    """

    parent: str
    site: str
    activation: int
    index: int

    SEPARATOR = "::"

    def format(self) -> str:
        """The run id, ``<parent>::<site>@<activation>.<index>``."""
        return self.id_of(self.parent, self.site, self.activation, self.index)

    @classmethod
    def id_of(cls, parent: str, site: str, activation: int, index: int) -> str:
        """The run id of those parts, as :meth:`format` writes it, without building the
        object (a subgraph node makes one per child run; the frozen dataclass costs more
        than the string)."""
        return f"{parent}{cls.SEPARATOR}{site}@{activation}.{index}"

    @classmethod
    def parse(cls, run_id: str) -> ChildRunId | None:
        """The parts of ``run_id`` when it is a child run's id (its innermost level), else
        ``None``."""
        parent, sep, rest = run_id.rpartition(cls.SEPARATOR)
        site, at, where = rest.rpartition("@")
        activation, dot, index = where.partition(".")
        if not (
            sep and parent and site and at and dot and activation.isdigit() and index.isdigit()
        ):
            return None
        return cls(parent, site, int(activation), int(index))

    @staticmethod
    def activations(
        records: Iterable[Any], nodes: Container[str], counts: dict[str, int] | None = None
    ) -> dict[tuple[int, str], int]:
        """The activation of each of ``nodes`` at each step of ``records`` (step records of
        one run, in step order, from its first step - or from where ``counts``, the
        activations before them, left off; updated in place): ``(step, node)`` -> the
        number a child run id made there carries. The same count ``Run.activate`` keeps."""
        counts = {} if counts is None else counts
        out: dict[tuple[int, str], int] = {}
        for record in records:
            if record.step <= 0:
                continue  # the input: no node ran
            for node in sorted({w.node for w in record.writes if w.node in nodes}):
                counts[node] = counts.get(node, 0) + 1
                out[(record.step, node)] = counts[node]
        return out

    @classmethod
    def descends(cls, run_id: str, ancestor: str) -> bool:
        """Whether ``run_id`` is a child run of ``ancestor``, at any depth."""
        return run_id.startswith(ancestor + cls.SEPARATOR)

    @classmethod
    def top(cls, run_id: str, ancestor: str) -> ChildRunId | None:
        """The child run of ``ancestor`` that ``run_id`` is or descends from (``None``:
        ``run_id`` does not descend from ``ancestor``)."""
        if not cls.descends(run_id, ancestor):
            return None
        first = run_id[len(ancestor) + len(cls.SEPARATOR) :].split(cls.SEPARATOR, 1)[0]
        return cls.parse(ancestor + cls.SEPARATOR + first)

    @classmethod
    def rebase(cls, run_id: str, ancestor: str, onto: str) -> str:
        """``run_id`` (a descendant of ``ancestor``) as the same descendant of ``onto``: the
        id a fork's child run has under the run the fork copied the step from."""
        assert cls.descends(run_id, ancestor), (run_id, ancestor)
        return onto + run_id[len(ancestor) :]


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """A conditional edge out of a node."""

    ref: str
    fn: Callable[..., Any]
    mapping: Mapping[str, str]
    takes_ctx: bool
    is_async: bool


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A static edge with several sources: ``target`` runs once all ``sources`` have run."""

    index: int
    sources: frozenset[str]
    target: str


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """Everything the executor needs to run one node and schedule what follows it."""

    id: str
    fn: Callable[..., Any]
    ref: str
    takes_ctx: bool
    is_async: bool
    blocking: bool = False
    inline: bool = False
    writes: frozenset[str] | None = None
    timeout_s: float | None = None
    retry: RetryPolicyIR | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    interrupt_before: bool = False
    interrupt_after: bool = False
    must_stub: bool = False
    static_next: tuple[str, ...] = ()
    routers: tuple[RouterSpec, ...] = ()
    joins: tuple[JoinSpec, ...] = ()
    # Where a Command the node returns may go (with_node(..., destinations=[...])).
    destinations: frozenset[str] = frozenset()
    # The node's input model (with_node(..., input=Model)): it receives an instance of it
    # instead of the state (see runtime._inputs).
    input: type[BaseModel] | None = None
    # "subgraph": the node runs a child graph (``fn`` is its runner), as a run of its own
    # in this process's store; "function": a plain callable.
    kind: Literal["function", "subgraph"] = "function"

    # Read at every step, so derived once (see __post_init__): ``plain``, a sync node with
    # no retry policy, timeout or thread, can be called inline; ``bare``, a plain node
    # called as ``fn(state)`` (no ctx, no input model); ``only_static``: what follows the
    # node never depends on state (no routers, no joins, no Command destinations);
    # ``one_router``: one sync router without ctx is the only way on.
    plain: bool = field(init=False)
    bare: bool = field(init=False)
    only_static: bool = field(init=False)
    one_router: bool = field(init=False)

    def __post_init__(self) -> None:
        plain = not (self.is_async or self.retry or self.timeout_s or self.blocking)
        object.__setattr__(self, "plain", plain)
        bare = plain and not self.takes_ctx and self.input is None
        object.__setattr__(self, "bare", bare)
        fixed = not self.joins and not self.destinations
        object.__setattr__(self, "only_static", fixed and not self.routers)
        one_router = (
            fixed
            and not self.static_next
            and len(self.routers) == 1
            and not self.routers[0].takes_ctx
            and not self.routers[0].is_async
        )
        object.__setattr__(self, "one_router", one_router)


def accepts_ctx(fn: Callable[..., Any]) -> bool | None:
    """``False`` for ``fn(state)``, ``True`` for ``fn(state, ctx)``, ``None`` otherwise."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    if len(positional) == 1:
        return False
    if len(positional) == 2:
        return True
    return None


def code_hash(fns: Sequence[Callable[..., Any]]) -> str:
    """``sha256:`` of the source code of the given callables (by qualified name, sorted)."""
    parts = []
    for fn in fns:
        if isinstance(fn, HasCodeHash):
            # A subgraph node: the code of its child graph, hashed the same way.
            parts.append(f"subgraph\n{fn.code_hash}")
            continue
        # A script's functions hash alike run as __main__ or imported (refs name them so too).
        module = importable_name(str(getattr(fn, "__module__", "?")))
        name = f"{module}:{getattr(fn, '__qualname__', repr(fn))}"
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            source = repr(fn)  # builtins and C functions: their identity is all we have
        parts.append(f"{name}\n{source}")
    digest = hashlib.sha256("\n\0".join(sorted(set(parts))).encode()).hexdigest()
    return f"sha256:{digest}"


@dataclass(frozen=True, eq=False)
class Plan:
    """What a compiled graph runs: its IR, state model and channels, the compiled nodes
    (with their successors, routers and joins), the routers out of START, the rule engine
    factory and the services nodes reach. Frozen: the step loop, the stores' bridge and the
    task runners read it and never change it. Tables the step loop looks up per step
    (successor tasks, one-task tuples) are derived once, here.
    """

    ir: GraphIR
    state_model: type[BaseModel]
    channels: Mapping[str, Channel]
    specs: Mapping[str, NodeSpec]
    start_routers: tuple[RouterSpec, ...] = ()
    rules: Callable[[], RuleSet] | None = None
    services: Mapping[str, Any] = field(default_factory=dict)
    unmet_requires: tuple[UnmetRequirement, ...] = ()
    input_model: type[BaseModel] | None = None
    """The model a run's input must fit (``Graph(..., input=)``), or None."""
    output_model: type[BaseModel] | None = None
    """The model a run hands back (``Graph(..., output=)``), or None."""
    private: Mapping[str, Any] = field(default_factory=dict)
    managed: frozenset[str] = frozenset()
    """The managed values (``RemainingSteps`` fields): filled in for nodes, written by none."""
    """Private channels and their defaults (see ``runtime._schemas``)."""
    """Capabilities mounted skills require that ``services`` lacks: a live run refuses to
    start (a replay, served from its record, does not ask)."""
    static_tasks: Mapping[str, tuple[Task, ...]] = field(init=False)
    single_tasks: Mapping[str, tuple[Task, ...]] = field(init=False)
    entry_tasks: tuple[Task, ...] = field(init=False)
    bindable: tuple[str, ...] = field(init=False)
    mask: SecretMask | None = field(init=False)
    interrupts: bool = field(init=False)
    commands: bool = field(init=False)
    cached: bool = field(init=False)
    """Whether a node has a cache policy (its hits are flagged on its events)."""
    sited: frozenset[str] = field(init=False)
    """The subgraph nodes: a run counts their activations, which their child run ids
    carry (see :class:`ChildRunId`)."""
    """Whether a node may route by returning a ``Command`` (it declares destinations)."""
    async_routers: bool = field(init=False)
    unreduced: frozenset[str] = field(init=False)
    any_async: bool = field(init=False)
    any_inline: bool = field(init=False)
    rules_of: Mapping[str, WriteRule] = field(init=False)
    writable: Mapping[str, Mapping[str, WriteRule]] = field(init=False)
    reducers: Mapping[str, Callable[[Any, Any], Any] | None] = field(init=False)
    task_records: Mapping[tuple[Task, ...], tuple[TaskRecord, ...]] = field(init=False)
    """The records of the task lists the graph schedules without a router (successors,
    single targets, the entry): shared by every step and run that schedules one, since
    records are frozen and a ``MemoryStore`` keeps each step for as long as its run."""
    appendable: tuple[str, ...] = field(init=False)
    """The channels whose every write appends to the value (``reducers.append``): a stored
    snapshot refers back to them instead of copying them."""
    _holding_ir: weakref.WeakSet[object] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        specs = self.specs
        fields = self.state_model.model_fields
        rules = {
            name: write_rule(channel, fields.get(name)) for name, channel in self.channels.items()
        }
        static = {
            node: tuple(Task(n) for n in spec.static_next if n != END)
            for node, spec in specs.items()
        }
        # One-task tuples per target, for routers that pick a single node.
        single: dict[str, tuple[Task, ...]] = {node: (Task(node),) for node in specs}
        single[END] = ()
        # Services that can route their calls through a task journal (chat models, arbiters).
        bindable = tuple(sorted(k for k, v in self.services.items() if isinstance(v, Journaled)))
        entry = tuple(Task(node) for node in sorted(set(self.ir.entry)))
        lists = {*static.values(), *single.values(), entry}
        derived: dict[str, object] = {
            "static_tasks": static,
            "single_tasks": single,
            # The first step's tasks when no router leaves START (as make_tasks orders them).
            "entry_tasks": entry,
            "bindable": bindable,
            # The secrets the services register, masked in every call record.
            "mask": mask_of(self.services),
            "interrupts": any(s.interrupt_before or s.interrupt_after for s in specs.values()),
            "commands": any(s.destinations for s in specs.values()),
            "cached": any(getattr(n, "cache", None) is not None for n in self.ir.nodes),
            "sited": frozenset(node for node, spec in specs.items() if spec.kind == "subgraph"),
            # Async routers are awaited by the async driver before it schedules.
            "async_routers": any(r.is_async for r in self.start_routers)
            or any(r.is_async for spec in specs.values() for r in spec.routers),
            # Channels without a reducer: one write per step (a merge checks them).
            "unreduced": frozenset(k for k, c in self.channels.items() if c.reducer is None),
            # Whether a step may hold async or ``inline`` tasks at all (most graphs: neither,
            # and a step of several tasks need not sort them out one by one).
            "any_async": any(s.is_async for s in specs.values()),
            "any_inline": any(s.inline and not s.is_async for s in specs.values()),
            # How each channel takes a write, and the channels each node may write (all of
            # them unless it declares writes=[...]): a write's checks are one lookup.
            "rules_of": rules,
            "writable": {
                node: {k: r for k, r in rules.items() if k not in self.managed}
                if spec.writes is None
                else {k: r for k, r in rules.items() if k in spec.writes and k not in self.managed}
                for node, spec in specs.items()
            },
            "reducers": {k: c.reducer for k, c in self.channels.items()},
            "task_records": {
                tasks: tuple(TaskRecord(node=t.node, index=t.index) for t in tasks)
                for tasks in lists
            },
            "appendable": tuple(
                k for k, c in self.channels.items() if c.reducer is _append_reducer.fn
            ),
            # Weakly: a store may be dropped while the graph lives on.
            "_holding_ir": weakref.WeakSet(),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def holds_ir(self, store: object) -> bool:
        """Whether this process gave ``store`` this graph's IR already (see
        :meth:`gave_ir`)."""
        try:
            return store in self._holding_ir
        except TypeError:  # a store that takes no weak reference: given every time
            return False

    def gave_ir(self, store: object) -> None:
        """Record that ``store`` now holds this graph's IR, so later runs do not serialise
        and write it again."""
        with contextlib.suppress(TypeError):  # a store that takes no weak reference
            self._holding_ir.add(store)

    @property
    def graph_hash(self) -> str:
        """``"sha256:<hex>"`` of the behavioural content of the graph (its IR's hash)."""
        return self.ir.graph_hash

    @cached_property
    def code_hash(self) -> str:
        """``"sha256:<hex>"`` of the source of every node, router and input model."""
        specs = self.specs.values()
        fns: list[Callable[..., Any]] = [spec.fn for spec in specs]
        fns += [r.fn for spec in specs for r in spec.routers]
        fns += [r.fn for r in self.start_routers]
        fns += [spec.input for spec in specs if spec.input is not None]
        return code_hash(fns)
