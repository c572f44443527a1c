"""The IR: the one data structure that defines a graph.

Authoring (``stargraph.graph``) produces it, the compiler validates it, the runtime executes
it. Every model is frozen; node and edge variants are discriminated on ``kind`` so a JSON
document says exactly what it is. Collections whose order carries no meaning (nodes, edges,
entry, join sources) are sorted when the model is built, so the IR *is* its canonical form:
declaration order never reaches the hash.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Annotated, Any, ClassVar, Final, Literal, NewType

import orjson
from pydantic import ConfigDict, Field, ValidationError, field_validator

from stargraph._typed import TypedModel
from stargraph.errors import IRError, Problem, UnknownNodeError, _ProblemsError
from stargraph.ir._canonical import content_hash
from stargraph.refs import importable_name

__all__ = [
    "END",
    "IR_VERSION",
    "START",
    "CachePolicyIR",
    "ClosureIR",
    "ConditionalEdgeIR",
    "EdgeIR",
    "FieldIR",
    "FunctionNodeIR",
    "GraphHash",
    "GraphIR",
    "NodeId",
    "NodeIR",
    "RetryPolicyIR",
    "RulePackIR",
    "StateSchemaIR",
    "StaticEdgeIR",
    "SubgraphNodeIR",
]

IR_VERSION: Final = "1"
"""The IR format version this library reads and writes."""

START: Final = "__start__"
"""Virtual source node: edges from ``START`` name the entry nodes."""

END: Final = "__end__"
"""Virtual sink node: a run ends when no node is scheduled; edges to ``END`` say so."""

NodeId = NewType("NodeId", str)
"""A node's id, unique within its graph."""

GraphHash = NewType("GraphHash", str)
"""``"sha256:<64 hex>"`` of a graph's behavioural content."""

JsonValue = Any
"""Any JSON-compatible value (kept loose: pydantic validates JSON-compatibility on dump)."""

_FROZEN = ConfigDict(frozen=True, extra="forbid")

_SAFE_INT: Final = 2**53 - 1


def _check_hashable_json(value: Any, where: str = "") -> Any:
    """Reject values RFC 8785 cannot hash identically everywhere: integers beyond 2**53 - 1
    (JSON numbers are doubles) and non-finite floats. Raises ``ValueError`` for pydantic."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        if not value.isascii() and not _utf8(value):
            raise ValueError(f"the string at {where or '/'} holds a lone surrogate; use UTF-8 text")
        return value
    if isinstance(value, int):
        if abs(value) > _SAFE_INT:
            raise ValueError(
                f"integer {value} at {where or '/'} is outside JSON's exact range "
                f"(|n| <= 2**53 - 1); store it as a string"
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"non-finite float {value} at {where or '/'}; use null or a string")
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not (key.isascii() or _utf8(key)):
                raise ValueError(f"key {key!r:.40} at {where or '/'} is not JSON text")
            _check_hashable_json(item, f"{where}/{key}")
        return value
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_hashable_json(item, f"{where}/{i}")
        return value
    raise ValueError(f"{type(value).__name__} at {where or '/'} is not JSON; use JSON values")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _IRModel(TypedModel):
    model_config = _FROZEN
    typed_error: ClassVar[type[_ProblemsError]] = IRError

    @classmethod
    def _typed(cls, exc: ValidationError) -> _ProblemsError:
        return IRError(
            [_problem_from_pydantic("", err) for err in exc.errors(include_url=False)],
            subject=f"{cls.__name__} data",
        )


class FieldIR(_IRModel):
    """One state channel: its type, its reducer and its default."""

    name: str
    type: str = Field(description="Canonical spelling of the annotation, e.g. 'list[str]'.")
    reducer: str | None = Field(
        default=None, description="Reducer id ('append', 'add', ...) or 'module:qualname'."
    )
    default: JsonValue = Field(default=None, description="JSON form of the default value.")
    required: bool = Field(default=False, description="True when the field has no default.")
    fact: bool = Field(default=False, description="Mirrored into the rule engine as a fact.")
    private: bool = Field(
        default=False, description="A private channel: only nodes that declare it see it."
    )
    managed: Literal["remaining_steps"] | None = Field(
        default=None,
        description="A managed value the graph fills in for every node ('remaining_steps').",
    )
    metadata: dict[str, JsonValue] = Field(default_factory=dict, description="Not hashed.")

    @field_validator("default")
    @classmethod
    def _hashable_default(cls, value: Any) -> Any:
        return _check_hashable_json(value)


class StateSchemaIR(_IRModel):
    """The state model: where to import it from and the channels it declares."""

    ref: str = Field(description="'module:qualname' of the pydantic model.")
    fields: tuple[FieldIR, ...]

    @field_validator("fields")
    @classmethod
    def _sorted(cls, fields: tuple[FieldIR, ...]) -> tuple[FieldIR, ...]:
        return tuple(sorted(fields, key=lambda f: f.name))


class _TransientMeta(type):
    """Makes ``isinstance(exc, Transient)`` the default retry test: what a retry may cure."""

    def __instancecheck__(cls, exc: object) -> bool:
        if isinstance(exc, ConnectionError | TimeoutError):
            # A node's timeout_s raises TimeoutError: retrying a timed-out attempt is what a
            # retry policy on a node with a timeout is for (LangGraph has no node timeouts).
            return True
        status = _http_status(exc)
        if status is not None:
            return 500 <= status < 600  # a server's failure may pass; a refusal will not
        return isinstance(exc, Exception) and not isinstance(exc, _PROGRAMMING_ERRORS)


_PROGRAMMING_ERRORS: Final = (
    ValueError,
    TypeError,
    ArithmeticError,
    ImportError,
    LookupError,
    NameError,
    SyntaxError,
    RuntimeError,
    ReferenceError,
    StopIteration,
    StopAsyncIteration,
    OSError,
)


def _http_status(exc: object) -> int | None:
    """The status of an HTTP error response (httpx, requests), if ``exc`` is one; those
    libraries are looked up among the loaded modules only, never imported for this."""
    import sys

    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.HTTPStatusError):
        return int(exc.response.status_code)
    requests = sys.modules.get("requests")
    if requests is not None and isinstance(exc, requests.HTTPError):
        response = getattr(exc, "response", None)
        return None if response is None else int(response.status_code)
    return None


class Transient(Exception, metaclass=_TransientMeta):
    """The exceptions :class:`RetryPolicyIR` retries by default, as LangGraph's
    ``default_retry_on`` does: every ``Exception`` but programming errors (``ValueError``,
    ``TypeError``, ``ArithmeticError``, ``ImportError``, ``LookupError``, ``NameError``,
    ``SyntaxError``, ``RuntimeError``, ``ReferenceError``, ``StopIteration``,
    ``StopAsyncIteration``, and ``OSError`` other than a ``ConnectionError`` or a
    ``TimeoutError``, which a node's ``timeout_s`` raises), and of HTTP
    errors (httpx, requests) only a server's 5xx. Never raised: a test, named in IR."""


class RetryPolicyIR(_IRModel):
    """How often and how patiently to retry a failing node (see ``stargraph.RetryPolicy``).

    By default (``retry_on`` left out) only what a retry may cure is retried:
    :data:`DEFAULT_RETRY_ON`, as LangGraph does; a programming error (a ``ValueError``, a
    ``KeyError``...) fails the node at once. ``retry_on=(Exception,)`` retries everything.
    """

    DEFAULT_RETRY_ON: ClassVar[tuple[str, ...]] = ("stargraph.ir._models:Transient",)
    """The default ``retry_on``: :class:`Transient` errors (not programming errors)."""

    max_attempts: int = Field(default=3, ge=1)
    initial_interval_s: float = Field(default=0.5, ge=0)
    backoff: float = Field(default=2.0, ge=1)
    max_interval_s: float = Field(default=30.0, ge=0)
    jitter: bool = True
    retry_on: tuple[str, ...] = Field(
        default=DEFAULT_RETRY_ON,
        description="'module:qualname' of exception classes that are retried; by default "
        "every Exception but programming errors (ValueError, TypeError, LookupError...).",
    )

    @field_validator("retry_on", mode="before")
    @classmethod
    def _refs_of_classes(cls, value: Any) -> Any:
        # Accept exception classes for convenience; the IR keeps their import paths, named
        # as the module is importable (a class of a script run as __main__ hashes like the
        # same class imported by the CLI, and resolves back to it in the script's process).
        if isinstance(value, list | tuple):
            return tuple(
                f"{importable_name(v.__module__)}:{v.__qualname__}" if isinstance(v, type) else v
                for v in value
            )
        return value


class RulePackIR(_IRModel):
    """A rule pack mounted on a graph or a node; its source text is hashed."""

    id: str
    version: str
    source: str = Field(description="CLIPS source text of the pack.")


class ClosureIR(_IRModel):
    """What pins a closure node's behaviour, and how another process builds it again.

    ``code`` is the digest of the closure's code and captured values (see
    ``stargraph._closures``); ``factory`` and ``args``, when given, name the module-level
    function that makes it and its JSON keyword arguments.
    """

    code: str = Field(description="'sha256:...' of the closure's code and captured values.")
    factory: str | None = Field(
        default=None, description="'module:qualname' of the factory that builds the closure."
    )
    args: dict[str, JsonValue] = Field(
        default_factory=dict, description="JSON keyword arguments the factory is called with."
    )

    @field_validator("args")
    @classmethod
    def _hashable_args(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_hashable_json(value)  # type: ignore[no-any-return]


class CachePolicyIR(_IRModel):
    """Serve a node's writes from a cache when it runs again on the same input.

    ``key`` is the ``'module:qualname'`` of a function of the node's input returning the
    cache key (JSON or text); None keys on the canonical JSON of the input. ``ttl_s`` bounds
    how old, by the run's clock, a served entry may be; None keeps entries for ever.
    """

    key: str | None = Field(default=None, description="'module:qualname' of the key function.")
    ttl_s: float | None = Field(default=None, gt=0, description="Seconds an entry is served.")

    @field_validator("key", mode="before")
    @classmethod
    def _ref_of_function(cls, value: Any) -> Any:
        if callable(value) and not isinstance(value, str):
            module = importable_name(str(getattr(value, "__module__", "?")))
            return f"{module}:{getattr(value, '__qualname__', '?')}"
        return value


class _NodeBase(_IRModel):
    id: NodeId
    writes: tuple[str, ...] | None = Field(
        default=None, description="Channels the node may write; None means any state field."
    )
    retry: RetryPolicyIR | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    blocking: bool = Field(
        default=False,
        description="Sync node doing blocking I/O: run it on a worker thread so siblings "
        "in the same step overlap with it (sync nodes of a step of several tasks run on "
        "worker threads by default; with compile(executor=...) blocking nodes go there).",
    )
    inline: bool = Field(
        default=False,
        description="Tiny pure sync node: run it on the driver's thread, in task order, "
        "instead of on a worker thread, when its step has several tasks.",
    )
    interrupt_before: bool = False
    interrupt_after: bool = False
    must_stub: bool = Field(
        default=False,
        description="In replay the body never runs; its recorded writes are served instead "
        "(LLM calls, side effects).",
    )
    rules: tuple[RulePackIR, ...] = ()
    destinations: tuple[str, ...] = Field(
        default=(),
        description="Nodes (or END) a Command returned by the node (for a subgraph node: "
        "one a child node sends to the parent) may go to: edges of the graph like any "
        "other, drawn, validated and hashed.",
    )
    metadata: dict[str, JsonValue] = Field(default_factory=dict, description="Not hashed.")

    @field_validator("writes")
    @classmethod
    def _sorted_writes(cls, writes: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if writes is None else tuple(sorted(set(writes)))

    @field_validator("destinations")
    @classmethod
    def _sorted_destinations(cls, destinations: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(destinations)))


class FunctionNodeIR(_NodeBase):
    """A node whose body is a Python callable, referenced by ``module:qualname`` or by id."""

    kind: Literal["function"] = "function"
    ref: str = Field(description="'module:qualname' or a registry id like 'ns.name'.")
    config: dict[str, JsonValue] = Field(
        default_factory=dict, description="Static configuration handed to the node via ctx."
    )
    input: str | None = Field(
        default=None,
        description="'module:qualname' (or registry id) of the node's input model: the node "
        "receives a validated instance of it - a Send's payload, or the state's fields it "
        "declares - instead of the state. None: the node receives the state.",
    )
    closure: ClosureIR | None = Field(
        default=None, description="Set when the node is a closure: its digest and factory."
    )
    cache: CachePolicyIR | None = Field(
        default=None, description="Serve the node's writes from a cache on a repeated input."
    )

    @field_validator("config")
    @classmethod
    def _hashable_config(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _check_hashable_json(value)  # type: ignore[no-any-return]


class SubgraphNodeIR(_NodeBase):
    """A node that runs a child graph (a skill) embedded in ``GraphIR.subgraphs``."""

    kind: Literal["subgraph"] = "subgraph"
    graph: GraphHash = Field(description="Hash of the child graph in GraphIR.subgraphs.")
    skill: str | None = Field(default=None, description="Name@version of the mounted skill.")
    site: str | None = Field(default=None, description="Explicit site id; derived if None.")
    inputs: dict[str, str] = Field(default_factory=dict, description="child field -> parent.")
    outputs: dict[str, str] = Field(default_factory=dict, description="child field -> parent.")
    max_steps: int = Field(default=50, ge=1)
    bubble_events: bool = True


NodeIR = Annotated[FunctionNodeIR | SubgraphNodeIR, Field(discriminator="kind")]
"""Any node variant, discriminated on ``kind``."""


class StaticEdgeIR(_IRModel):
    """``sources -> target``. Several sources form a join: the target runs once, after all."""

    kind: Literal["static"] = "static"
    sources: tuple[str, ...] = Field(min_length=1)
    target: str
    metadata: dict[str, JsonValue] = Field(default_factory=dict, description="Not hashed.")

    @field_validator("sources")
    @classmethod
    def _sorted_sources(cls, sources: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(sources)))


class ConditionalEdgeIR(_IRModel):
    """After ``source`` runs, ``router(state)`` picks the next node(s) through ``mapping``.

    The router returns a mapping key, a list of keys, ``END``, or ``Send`` objects (fan-out).
    ``mapping`` also lists every possible target, which the compiler checks statically.
    """

    kind: Literal["conditional"] = "conditional"
    source: str
    router: str = Field(description="'module:qualname' or registry id of the router.")
    mapping: dict[str, str] = Field(description="Router result -> node id (or END).")
    closure: ClosureIR | None = Field(
        default=None, description="Set when the router is a closure: its digest and factory."
    )
    metadata: dict[str, JsonValue] = Field(default_factory=dict, description="Not hashed.")


EdgeIR = Annotated[StaticEdgeIR | ConditionalEdgeIR, Field(discriminator="kind")]
"""Any edge variant, discriminated on ``kind``."""


def _edge_key(edge: StaticEdgeIR | ConditionalEdgeIR) -> tuple[str, ...]:
    if isinstance(edge, StaticEdgeIR):
        return ("static", *edge.sources, "->", edge.target)
    return ("conditional", edge.source, edge.router)


# What the hash leaves out: cosmetic metadata at every level, and the embedded child IRs,
# which enter the hash through their own hashes (the node's ``graph`` field) - Merkle style.
_HASH_EXCLUDE: Final[dict[str, Any]] = {
    "metadata": True,
    "subgraphs": True,
    "nodes": {"__all__": {"metadata"}},
    "edges": {"__all__": {"metadata"}},
    "state": {"fields": {"__all__": {"metadata"}}},
}


class GraphIR(_IRModel):
    """A whole graph: state schema, nodes, edges, entry, rule packs and child graphs.

    ``graph_hash`` covers everything behavioural and nothing cosmetic (``metadata``).
    """

    ir_version: Literal["1"] = IR_VERSION
    name: str
    state: StateSchemaIR
    nodes: tuple[NodeIR, ...]
    edges: tuple[EdgeIR, ...] = ()
    entry: tuple[str, ...] = Field(default=(), description="Nodes that run in the first step.")
    rule_packs: tuple[RulePackIR, ...] = ()
    subgraphs: dict[str, GraphIR] = Field(
        default_factory=dict, description="Child graphs keyed by their graph_hash."
    )
    outputs: tuple[str, ...] | None = Field(
        default=None, description="Declared output channels; None means every state field."
    )
    input_model: str | None = Field(
        default=None, description="'module:qualname' of the model a run's input must fit."
    )
    output_model: str | None = Field(
        default=None, description="'module:qualname' of the model a run hands back."
    )
    metadata: dict[str, JsonValue] = Field(default_factory=dict, description="Not hashed.")

    @field_validator("nodes")
    @classmethod
    def _sorted_nodes(cls, nodes: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted(nodes, key=lambda n: str(n.id)))

    @field_validator("edges")
    @classmethod
    def _sorted_edges(cls, edges: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted(edges, key=_edge_key))

    @field_validator("entry")
    @classmethod
    def _sorted_entry(cls, entry: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(set(entry)))

    @field_validator("rule_packs")
    @classmethod
    def _sorted_packs(cls, packs: tuple[RulePackIR, ...]) -> tuple[RulePackIR, ...]:
        return tuple(sorted(packs, key=lambda p: (p.id, p.version)))

    @field_validator("outputs")
    @classmethod
    def _sorted_outputs(cls, outputs: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if outputs is None else tuple(sorted(set(outputs)))

    @cached_property
    def graph_hash(self) -> GraphHash:
        """``"sha256:<hex>"`` over the canonical JSON of the behavioural content."""
        # Fields left at their defaults are left out, so adding a field with a default in a
        # later stargraph does not change the hash of every existing graph. The variant tags
        # and the version are put back: they are behaviour even when they are defaults.
        view = self.model_dump(mode="json", exclude=_HASH_EXCLUDE, exclude_defaults=True)
        view["ir_version"] = self.ir_version
        view["nodes"] = [
            {**dumped, "kind": node.kind}
            for dumped, node in zip(view.get("nodes", []), self.nodes, strict=True)
        ]
        for dumped, node in zip(view["nodes"], self.nodes, strict=True):
            if node.retry is not None:
                _retry_view(dumped.setdefault("retry", {}), node.retry.retry_on)
        view["edges"] = [
            {**dumped, "kind": edge.kind}
            for dumped, edge in zip(view.get("edges", []), self.edges, strict=True)
        ]
        # Child IRs are represented by their hashes only; the key of each entry is checked
        # against the child's own hash by the compiler, so the chain cannot be forged.
        view["subgraphs"] = sorted(self.subgraphs)
        return GraphHash(content_hash(view))

    def node(self, node_id: str) -> FunctionNodeIR | SubgraphNodeIR:
        """The node with this id; :class:`~stargraph.errors.UnknownNodeError` (a
        ``LookupError``) naming the ids there are if there is none."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        known = sorted(node.id for node in self.nodes)
        raise UnknownNodeError.at(
            "/nodes",
            f"graph {self.name!r} has no node {node_id!r}",
            f"use one of {known}",
            subject=f"graph {self.name!r}",
        )

    def to_json(self, *, indent: bool = False) -> str:
        """Serialise to JSON (sorted keys, so equal IRs give equal text)."""
        option = orjson.OPT_SORT_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
        return orjson.dumps(self.model_dump(mode="json"), option=option).decode()

    @classmethod
    def from_json(cls, text: str | bytes, *, source: str = "<ir>") -> GraphIR:
        """Parse and validate an IR document; every problem becomes one :class:`IRError`."""
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise IRError.at(
                source,
                f"not valid JSON: {exc}",
                "fix the JSON syntax",
                subject=f"IR document {source}",
            ) from exc
        return cls.from_data(data, source=source)

    @classmethod
    def from_data(cls, data: Any, *, source: str = "<ir>") -> GraphIR:
        """Validate already-parsed JSON data as IR, translating errors into :class:`IRError`."""
        if isinstance(data, dict) and "ir_version" in data and data["ir_version"] != IR_VERSION:
            raise IRError.at(
                f"{source}#/ir_version",
                f"IR version {data['ir_version']!r} is not supported "
                f"(this stargraph reads version {IR_VERSION!r})",
                "re-export the graph with this stargraph version, or upgrade stargraph",
                subject=f"IR document {source}",
            )
        try:
            return cls.model_validate(data)
        except IRError as exc:
            raise IRError(
                [Problem(f"{source}#{p.pointer}", p.message, p.hint) for p in exc.problems],
                subject=f"IR document {source}",
            ) from exc


def ended_implicitly(ir: GraphIR) -> list[str]:
    """The nodes with no way out - no edge, router, join or ``Command`` destination leaves
    them: a run ends after them, as if an edge led to ``END`` (the IR holds no such edge,
    so the graph's hash is what it would be without the rule)."""
    leaving: set[str] = set()
    for edge in ir.edges:
        if isinstance(edge, StaticEdgeIR):
            leaving.update(edge.sources)
        else:
            leaving.add(edge.source)
    return [node.id for node in ir.nodes if node.id not in leaving and not node.destinations]


_FIRST_RETRY_ON: Final = ("builtins:Exception",)
"""The default ``retry_on`` of the first IR: graphs that name it hash as they always did."""


def _retry_view(view: dict[str, Any], retry_on: tuple[str, ...]) -> None:
    """The hashed ``retry_on`` of a node: left out when it is ``Exception`` (the first
    default, so those graphs keep their hash and meaning), put in when it is today's default
    (a graph that retried everything and one that does not must not share a hash)."""
    if retry_on == _FIRST_RETRY_ON:
        view.pop("retry_on", None)
    elif "retry_on" not in view:
        view["retry_on"] = list(retry_on)


def _problem_from_pydantic(prefix: str, err: Any) -> Problem:
    loc = [str(part) for part in err["loc"]]
    # pydantic puts the discriminator tag into the location ('nodes', 0, 'function', 'ref');
    # strip it so the pointer addresses the JSON document the user wrote.
    loc = [p for p in loc if p not in {"function", "subgraph", "static", "conditional"}]
    pointer = f"{prefix}/" + "/".join(loc)
    if err["type"] == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag")
        expected = err.get("ctx", {}).get("expected_tags")
        return Problem(pointer, f"unknown kind {tag!r}", f"use one of the known kinds: {expected}")
    if err["type"] == "union_tag_not_found":
        return Problem(pointer, "missing 'kind'", "add a 'kind' field naming the variant")
    if err["type"] == "missing":
        return Problem(pointer, "required field is missing", "add it")
    if err["type"] == "extra_forbidden":
        return Problem(pointer, "unknown field", "remove it or check its spelling")
    return Problem(pointer, err["msg"], "correct the value")
