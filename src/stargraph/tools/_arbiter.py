"""The arbiter: the one path by which a tool runs.

``Arbiter.dispatch(call)`` runs, in this order and nowhere else:

1. resolve the tool and check the calling node/state's **allowlist** (before the
   arguments: a forbidden tool is refused as forbidden, whatever it was sent);
2. **validate** the arguments (strict JSON Schema semantics);
3. confine **workspace paths** (arguments used in ``file:{...}`` locks) to the root;
4. ask the ``authorize_action`` **policy hooks** (any ``False`` denies, fail-closed on error);
5. **acquire** the whole lockset, all or nothing;
6. **execute** under the tool's timeout (sync bodies on a worker thread, async bodies awaited)
   -- locally, or **delegated** to the ``ToolHost`` for a host-executed tool (``HostTool``),
   with the same locks, timeout and commit log;
7. **append** the outcome to the hash-chained commit log (plus an audit record for
   ``side_effect="external"``);
8. **release** the locks (also after exceptions and timeouts; a timed-out body that is still
   running on its worker thread keeps them until it returns, and its real end is appended
   to the commit log then as ``late_success``/``late_error``);
9. **return** a :class:`ToolResult`, or raise a typed :class:`~stargraph.errors.ToolError`.

Steps 1-4 run before anything is locked or executed, so a refused call never reaches the
body; refusals are still appended to the commit log (status ``invalid``/``denied``) and
logged, because an audit trail that omits refused attempts hides exactly the interesting
events. Every raised ``ToolError`` carries a :class:`ToolFailure` (``failure_of(exc)``), which
``ToolResult.from_error`` turns into what the model sees.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, NoReturn, Protocol

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from pydantic_core import to_jsonable_python

from stargraph._typed import TypedModel
from stargraph.errors import (
    ToolArgumentError,
    ToolError,
    ToolNotAllowedError,
    ToolTimeoutError,
)
from stargraph.llm._messages import ToolCall as LlmToolCall
from stargraph.tools._artifacts import ArtifactStore, InMemoryArtifactStore
from stargraph.tools._canonical import canonical_json, sha256_hex
from stargraph.tools._command import command_payload, is_command
from stargraph.tools._commit import CommitEntry, CommitLog, InMemoryCommitLog
from stargraph.tools._locks import Lease, LockManager, LockRequest
from stargraph.tools._registry import ToolRegistry, matches_allowlist
from stargraph.tools._result import (
    FailureCode,
    FieldProblem,
    ToolFailure,
    ToolOutput,
    ToolResult,
    ToolStatus,
    built,
    failure_of,
)
from stargraph.tools._schema import ValidatedArgs
from stargraph.tools._spec import LockTemplate, ToolSpec
from stargraph.tools._tool import (
    PythonTool,
    Secrets,
    Tool,
    ToolContext,
    is_async_tool,
)
from stargraph.tools._workers import Job, WorkerPool, alarm_available, call_with_alarm
from stargraph.tools._workspace import Workspace

if TYPE_CHECKING:
    from stargraph.runtime._protocols import Journal
    from stargraph.tools._host import ToolHost
    from stargraph.tools._recorded import JournaledArbiter

__all__ = ["Arbiter", "PolicyHook", "ToolCall"]

logger = logging.getLogger("stargraph.tools")

_SUMMARY_LIMIT: Final = 280
_GRACE_S: Final = 0.05  # past timeout_s, so a body enforcing its own deadline reports first
_MIN_SECRET_LEN: Final = 4  # shorter values would redact ordinary words; refuse to pretend
# Commit-log status of the real end of a body the caller stopped waiting for at its timeout.
_LateStatus = Literal["late_success", "late_error"]
_NO_SECRETS: Final = Secrets()
# The fields a successful call's result and its commit entry set (the others: defaults).
# Tuples, not unions: Python 3.11 builds ``str | bytes`` anew at every isinstance call.
_TEXT: Final = (str, bytes)
_SUCCESS_SET: Final = set(ToolResult.model_fields) - {"error"}
_ENTRY_SET: Final = set(CommitEntry.model_fields)
_NORMALISED: Final = {"tool", "args"}
_FLAT: Final = frozenset({str, int, float, bool, type(None)})
_CALL_SET: Final = {"tool", "args", "call_id", "lane", "node", "state", "allowed", "raw_arguments"}
_OUTPUTS: Final = (ToolResult, ToolOutput)


class ToolCall(TypedModel):
    """One structured tool call as the model proposed it, plus who is calling.

    ``allowed`` is the allowlist of the calling node or skill state (ids, names or ``ns.*``).
    ``None`` means every registered tool only for a call from host code (no ``state``); a
    call from a skill state (``state`` set) with no allowlist admits no tool, since a state
    defines exactly the tools it may call. Build it from an OpenAI tool call with
    :meth:`from_openai`.
    """

    typed_error = ToolArgumentError

    model_config = ConfigDict(frozen=True)

    tool: str = Field(description="Tool id, namespaced name, or LLM function name.")
    args: dict[str, JsonValue] = Field(default_factory=dict, description="Arguments.")
    call_id: str | None = Field(None, description="The model's tool_call id.")
    lane: str = Field("core", description="Calling lane: 'edge' or 'core'.")
    node: str | None = Field(None, description="Calling graph node.")
    state: str | None = Field(None, description="Calling skill state, if any.")
    allowed: tuple[str, ...] | None = Field(
        None, description="Allowlist; None = any tool for host code, none in a skill state."
    )
    raw_arguments: str | None = Field(
        None, description="The model's argument text when it is not a JSON object."
    )

    def __init__(self, **data: Any) -> None:
        """Validate ``data``; a bad field raises :class:`ToolArgumentError` naming each field
        and the value given (never a bare pydantic error)."""
        try:
            BaseModel.__init__(self, **data)
        except ValidationError as exc:
            raise _bad_call(exc, data) from None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Left out when unset, so a dumped call (the request a journal fingerprints) reads as
        # it did before the field existed.
        data = handler(self)
        if self.raw_arguments is None and isinstance(data, dict):
            data.pop("raw_arguments", None)
        return data

    def journal_request(self) -> dict[str, Any]:
        """``model_dump(mode="json")``: the request a journal records for this call."""
        dumped: dict[str, Any] = self.model_dump(mode="json")
        return dumped

    @classmethod
    def from_openai(
        cls,
        tool_call: Any,
        *,
        lane: str = "core",
        node: str | None = None,
        state: str | None = None,
        allowed: Sequence[str] | None = None,
        strict: bool = True,
    ) -> ToolCall:
        """From a ``tool_calls`` entry of the structured channel: the OpenAI wire dict, an SDK
        object, or a :class:`stargraph.llm.ToolCall` (flat ``id``/``name``/``arguments``).

        Raises :class:`ToolArgumentError` when ``function.arguments`` is not a JSON object;
        with ``strict=False`` the call keeps the text as :attr:`raw_arguments` instead, and
        the arbiter refuses it like any invalid call (logged, committed, named by its
        canonical tool id).
        """
        if isinstance(tool_call, LlmToolCall):
            data: dict[str, Any] = {"id": tool_call.id, "name": tool_call.name}
            data["arguments"] = tool_call.arguments
        else:
            data = tool_call.model_dump() if hasattr(tool_call, "model_dump") else dict(tool_call)
        # OpenAI wire shape nests name/arguments under "function"; stargraph.llm.ToolCall
        # (and several SDKs) keep them flat.
        function = data.get("function") or data
        name = str(function.get("name", ""))
        raw = function.get("arguments") or "{}"
        args, problem = _parse_arguments(raw)
        if problem and strict:
            raise _invalid_arguments(name, problem, node)
        allowed_ids = tuple(allowed) if allowed is not None else None
        call_id = data.get("id")
        if (
            cls is ToolCall
            and not problem
            and type(raw) in _TEXT  # so the arguments are JSON values orjson parsed
            # Flat ones: validation also bounds how deep nested arguments may go.
            and all(type(value) in _FLAT for value in args.values())
            and (call_id is None or type(call_id) is str)
            and type(lane) is str
            and (node is None or type(node) is str)
            and (state is None or type(state) is str)
            and (allowed_ids is None or all(type(a) is str for a in allowed_ids))
        ):
            # Every value is of its field's type already (an agent builds one per tool
            # call): the call without validating them again.
            values: dict[str, Any] = {"tool": name, "args": args, "call_id": call_id}
            values["lane"] = lane
            values.update(node=node, state=state, allowed=allowed_ids, raw_arguments=None)
            return built(ToolCall, values, _CALL_SET)
        return cls(
            tool=name,
            args=args,
            call_id=data.get("id"),
            lane=lane,
            node=node,
            state=state,
            allowed=allowed_ids,
            raw_arguments=_as_text(raw) if problem else None,
        )


def _bad_call(exc: ValidationError, data: Mapping[str, Any]) -> ToolArgumentError:
    fields = tuple(
        FieldProblem(
            field=".".join(str(part) for part in error["loc"]) or "<call>",
            message=f"{error['msg']} (got {error.get('input')!r:.80})",
            type=error["type"],
        )
        for error in exc.errors(include_url=False)
    )
    named = data.get("tool")
    tool = named if isinstance(named, str) else "<tool>"
    listed = "; ".join(f"{p.field}: {p.message}" for p in fields)
    hint = "give a tool name and the arguments as one JSON object"
    # Without a tool name to point at, the message names the model that refused the data.
    culprit = f"tool call {tool!r}" if isinstance(named, str) else "ToolCall data"
    message = f"{culprit} is invalid: {listed} (fix: {hint})"
    failure = ToolFailure(
        code="invalid_arguments", tool=tool, message=message, hint=hint, fields=fields
    )
    node = data.get("node")
    return ToolArgumentError(message, node=node if isinstance(node, str) else None, failure=failure)


def _parse_arguments(raw: Any) -> tuple[dict[str, Any], str]:
    """``(arguments, "")``, or ``({}, what is wrong)`` when ``raw`` is not a JSON object."""
    try:
        args = orjson.loads(raw) if isinstance(raw, _TEXT) else raw
    except orjson.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    if not isinstance(args, dict):
        return {}, "arguments must be a JSON object"
    return args, ""


def _as_text(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        return raw.decode(errors="replace")
    return orjson.dumps(raw, default=str).decode()


def _invalid_arguments(tool: str, problem: str, node: str | None) -> ToolArgumentError:
    message = f"tool {tool!r} got invalid arguments: {problem}"
    failure = ToolFailure(
        code="invalid_arguments",
        tool=tool,
        message=message,
        hint="send the arguments as one JSON object",
        fields=(FieldProblem(field="<arguments>", message=problem),),
    )
    return ToolArgumentError(message, node=node, failure=failure)


class PolicyHook(Protocol):
    """An ``authorize_action`` hook: ``False`` denies, ``True`` allows, ``None`` abstains.

    It sees the call with the canonical tool id and the validated, normalised arguments. Any
    ``False`` wins over any ``True`` (deny overrides); when every hook abstains the arbiter's
    ``default_allow`` decides. A hook that raises denies (fail closed). The plugin layer's
    pluggy ``authorize_action`` hook is adapted to this shape.
    """

    def __call__(self, call: ToolCall) -> bool | None:
        """Decide about ``call``."""
        ...


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the arbiter derives once per tool (the registry is frozen, so it never changes)."""

    templates: tuple[LockTemplate, ...]
    path_args: tuple[str, ...]
    is_async: bool
    secrets_wanted: tuple[str, ...]
    delegated: bool  # executor "host": the execute step goes to the arbiter's ToolHost
    inline: bool  # a sync Python body without write or external effects (see _run_sync)
    self_bounded: bool  # a sync body that waits for nothing past its deadline (see _run_sync)


class _Admitted(NamedTuple):
    """A call that passed steps 1-4 (a tuple: built at every dispatch, and a frozen
    dataclass sets each field through ``object.__setattr__``)."""

    tool: Tool
    plan: _Plan
    call: ToolCall
    args: ValidatedArgs
    args_hash: str
    locks: tuple[LockRequest, ...]
    owner: str


class _Run(NamedTuple):
    """The pipeline waits for the body's raw result. (For the locks it yields the
    :class:`_Admitted` call itself: no allocation on the way.)"""

    admitted: _Admitted
    ctx: ToolContext


class _Raised(NamedTuple):
    """An outcome that is an exception, to be thrown into the pipeline."""

    error: BaseException


_Step = _Admitted | _Run
# Sent in: what the step produced (a Lease, then the body's raw result).
_Pipeline = Generator[_Step, Any, ToolResult]


class Arbiter:
    """Validates, authorises, locks, runs, commits and releases every tool call.

    One arbiter is shared by all lanes of an agent. The defaults are in-memory; pass a
    :class:`SqliteCommitLog` and :class:`DirectoryArtifactStore` for durable audit. Secrets
    come from ``secrets`` (name -> value) and reach only tools declaring them. ``host``
    executes the host-delegated tools (``executor="host"``); without one they are refused.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        workspace: Workspace | str | os.PathLike[str],
        commit_log: CommitLog | None = None,
        artifacts: ArtifactStore | None = None,
        locks: LockManager | None = None,
        policies: Sequence[PolicyHook] = (),
        secrets: Mapping[str, str] | None = None,
        lock_timeout: float | None = 30.0,
        inline_limit: int = 4096,
        default_allow: bool = True,
        before_call: Callable[[ToolCall], None] | None = None,
        after_call: Callable[[ToolCall, ToolResult | None, ToolError | None], None] | None = None,
        host: ToolHost | None = None,
    ) -> None:
        self.registry = registry
        self.host = host
        # Observers (the plugin hooks before_tool_call / after_tool_call): told of every call
        # and its outcome, refused calls included; they cannot change either.
        self.before_call = before_call
        self.after_call = after_call
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace.at(workspace)
        self.commit_log: CommitLog = commit_log if commit_log is not None else InMemoryCommitLog()
        self.artifacts: ArtifactStore = (
            artifacts if artifacts is not None else InMemoryArtifactStore()
        )
        self.locks = locks if locks is not None else LockManager()
        self.policies = tuple(policies)
        self.lock_timeout = lock_timeout
        self.inline_limit = inline_limit
        self.default_allow = default_allow
        self._secrets = Secrets(secrets)
        # JSON-escaped forms too: a secret inside a JSON document appears escaped.
        self._needles = [
            (value, orjson.dumps(value)[1:-1], name)
            for name, value in self._secrets.items()
            if len(value) >= _MIN_SECRET_LEN
        ]
        self._workers = WorkerPool()
        self._seq = itertools.count(1)
        self._plans: dict[str, _Plan] = {}
        self._tools_position: tuple[object, object] = (None, None)

    @property
    def secrets(self) -> Secrets:
        """The secrets this arbiter hands to tools (a graph's runs mask them in what they
        store, see ``stargraph.runtime``)."""
        return self._secrets

    def _plan(self, tool: Tool) -> _Plan:
        plan = self._plans.get(tool.spec.id)
        if plan is None:
            spec = tool.spec
            is_async = is_async_tool(tool)
            plan = _Plan(
                spec.lock_templates,
                spec.path_args,
                is_async,
                spec.secret_resources,
                spec.executor == "host",
                not is_async
                and isinstance(tool, PythonTool)
                and spec.side_effect in ("none", "read"),
                not is_async and getattr(tool, "bounds_own_deadline", False) is True,
            )
            self._plans[spec.id] = plan
        return plan

    def close(self) -> None:
        """Stop idle worker threads (running bodies finish on their own) and the MCP
        servers of the registry."""
        self._workers.shutdown()
        self.registry.close()

    def __enter__(self) -> Arbiter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- dispatch

    def bind_journal(self, journal: Journal) -> JournaledArbiter:
        """This arbiter routed through a task's journal (the executor calls it): every
        dispatch is recorded, and served instead of re-run on re-execution and in replay."""
        from stargraph.tools._recorded import JournaledArbiter  # it sits above this module

        if self.registry.mcp_servers and not getattr(journal, "replay", False):
            self._refresh_tools(journal)
        return JournaledArbiter(self, journal)

    def _refresh_tools(self, journal: Journal) -> None:
        """Take the MCP servers' changed tool lists at the first task of a new step: the
        tasks of one step all see one registry, and a replay never lists a server."""
        position = (getattr(journal, "run_id", None), getattr(journal, "step", None))
        if position == self._tools_position:
            return
        self._tools_position = position
        registry = self.registry.refreshed()
        if registry is not self.registry:
            logger.info("tool registry refreshed: an MCP server changed its tools")
            self.registry = registry
            self._plans.clear()

    def dispatch(self, call: ToolCall) -> ToolResult:
        """Run ``call`` through the whole pipeline; return the result or raise a ToolError."""
        steps = self._steps(call)
        step: _Step | ToolResult = next(steps)  # the pipeline always waits for locks first
        while not isinstance(step, ToolResult):
            step = _resume(steps, _outcome(self._wait, step))
        return step

    async def adispatch(self, call: ToolCall) -> ToolResult:
        """:meth:`dispatch` for asyncio: awaits async bodies, runs sync ones in a thread."""
        steps = self._steps(call)
        step: _Step | ToolResult = next(steps)
        while not isinstance(step, ToolResult):
            step = _resume(steps, await _aoutcome(self._await(step)))
        return step

    def _steps(self, call: ToolCall) -> _Pipeline:
        if self.before_call is None and self.after_call is None:
            return self._pipeline(call)
        return self._observed(call)

    def _observed(self, call: ToolCall) -> _Pipeline:
        """:meth:`_pipeline` between the ``before_call`` and ``after_call`` observers."""
        if self.before_call is not None:
            self.before_call(call)
        try:
            result = yield from self._pipeline(call)
        except ToolError as exc:
            if self.after_call is not None:
                self.after_call(call, None, exc)
            raise
        if self.after_call is not None:
            self.after_call(call, result, None)
        return result

    def _pipeline(self, call: ToolCall) -> _Pipeline:
        """Steps 1-9 of one call, written once for :meth:`dispatch` and :meth:`adispatch`.

        It yields where the two differ, taking the locks and running the body, and is
        resumed with the outcome: the value sent in, or the exception thrown in.
        """
        try:
            admitted = self._admit(call)
            try:
                lease: Lease = yield admitted
            except ToolError as exc:
                self._refuse_lock(admitted, exc)
                raise
        except ToolError as exc:
            refused = self._scrub(exc)
            if refused is exc:
                raise
        else:
            ctx = self._context(admitted)
            try:
                raw = yield _Run(admitted, ctx)
            except BaseException as exc:
                error, original = self._fail(admitted, ctx, exc, lease)
                if error is exc:
                    raise
            else:
                return self._succeed(admitted, raw, lease)
            _raise(error, original, self._safe_cause(original))
        # Raised out here, not in the except block: there the original, unredacted error
        # would ride along as the copy's __context__.
        raise refused from None

    def _wait(self, step: _Step) -> object:
        if isinstance(step, _Run):
            return self._run_sync(step.admitted, step.ctx)
        return self.locks.acquire(step.locks, owner=step.owner, timeout=self.lock_timeout)

    async def _await(self, step: _Step) -> object:
        if isinstance(step, _Run):
            return await self._run_async(step.admitted, step.ctx)
        return await self.locks.acquire_async(
            step.locks, owner=step.owner, timeout=self.lock_timeout
        )

    # ----------------------------------------------------------------------- steps 1-4

    def _admit(self, call: ToolCall) -> _Admitted:
        node = call.node
        try:
            tool = self.registry.resolve(call.tool, node=node)
        except ToolError as exc:
            self._refuse(call, call.tool, exc, _args_hash(call.args))
            raise
        spec = tool.spec
        spec_id = spec.id
        try:
            # The allowlist first: a tool the caller may not use is refused as such whatever
            # its arguments, so the model is not told to fix arguments of a forbidden tool.
            self._check_allowlist(call, spec)
            if call.raw_arguments is not None:
                # Text that is no JSON object (from_openai(strict=False)): refused here, after
                # the tool is known, so the refusal is logged and committed under its id.
                raise _invalid_arguments(
                    spec_id, _parse_arguments(call.raw_arguments)[1], call.node
                )
            args = tool.arguments.validate(spec_id, call.args, node=node)
        except ToolError as exc:
            self._refuse(call, spec_id, exc, _args_hash(call.args))
            raise
        args_hash = _args_hash(args.json)
        # The canonical id and the validated arguments are the arbiter's own values.
        if type(call) is ToolCall:
            values = {
                "tool": spec_id,
                "args": args.json,
                "call_id": call.call_id,
                "lane": call.lane,
                "node": call.node,
                "state": call.state,
                "allowed": call.allowed,
                "raw_arguments": call.raw_arguments,
            }
            normalised = built(ToolCall, values, _NORMALISED | call.model_fields_set)
        else:  # a subclass may have more fields
            normalised = call.model_copy(update={"tool": spec_id, "args": args.json})
        plan = self._plan(tool)
        try:
            lock_values = self._confine_paths(spec, plan.path_args, args.json)
            if self.policies or not self.default_allow:  # else: nothing to ask, allowed
                self._check_policies(normalised, spec)
            if plan.delegated and self.host is None:
                raise _no_host(spec, call.node)
        except ToolError as exc:
            self._refuse(call, spec.id, exc, args_hash)
            raise
        locks = (
            tuple(
                LockRequest(template.render(lock_values), template.mode)
                for template in plan.templates
            )
            if plan.templates
            else ()
        )
        owner = f"{spec_id}#{call.call_id or next(self._seq)}"
        return _Admitted(tool, plan, normalised, args, args_hash, locks, owner)

    def _check_allowlist(self, call: ToolCall, spec: ToolSpec) -> None:
        if call.allowed is None and call.state is None:
            return  # host code calling the arbiter itself: no model proposed this call
        # Deny by default in a skill state: "each state defines exactly which tools the LLM
        # may call", so a state that lists none admits none.
        allowed = call.allowed or ()
        if matches_allowlist(spec.id, allowed):
            return
        where = f"node {call.node!r}" if call.node else "this call"
        where += f" (state {call.state!r})" if call.state else ""
        if call.allowed is None:
            hint = f"list it in the state's allowed tools: allowed=[{spec.name!r}]"
            message = f"tool {spec.id!r} is not allowed in {where}, which has no allowlist"
            message += f" (fix: {hint})"
        elif not allowed and call.state is not None:
            hint = "this state allows no tool: propose one of its transitions instead"
            message = f"tool {spec.id!r} is not allowed in {where} (fix: {hint})"
        else:
            hint = f"call one of {sorted(allowed)}"
            message = f"tool {spec.id!r} is not allowed in {where} (fix: {hint})"
        failure = ToolFailure(
            code="tool_not_allowed",
            tool=spec.id,
            message=message,
            hint=hint,
            details={
                "node": call.node,
                "state": call.state,
                "allowed_tools": sorted(allowed),
            },
        )
        raise ToolNotAllowedError(message, node=call.node, failure=failure)

    def _confine_paths(
        self, spec: ToolSpec, path_args: tuple[str, ...], args: dict[str, Any]
    ) -> dict[str, Any]:
        if not path_args:
            return args
        values = dict(args)
        for name in path_args:
            # The canonical relative path is also the lock key: aliases lock one resource.
            values[name] = self.workspace.relative(str(args.get(name, "")), tool=spec.id, arg=name)
        return values

    def _check_policies(self, call: ToolCall, spec: ToolSpec) -> None:
        allowed_by: str | None = None
        for hook in self.policies:
            hook_name = getattr(hook, "__qualname__", repr(hook))
            try:
                verdict = hook(call)
            except Exception as exc:
                # Fail closed: a policy that cannot decide must not let the call through.
                self._deny(call, spec, hook_name, f"raised {type(exc).__name__}: {exc}")
            if verdict is False:
                self._deny(call, spec, hook_name, "denied it")
            if verdict is True:
                allowed_by = hook_name
        if allowed_by is None and not self.default_allow:
            self._deny(call, spec, "default policy", "no policy hook allowed it")

    def _deny(self, call: ToolCall, spec: ToolSpec, hook: str, why: str) -> None:
        hint = "use another tool or ask the operator to change the policy"
        message = f"tool {spec.id!r} refused by authorize_action policy {hook}: {why}"
        failure = ToolFailure(
            code="policy_denied", tool=spec.id, message=message, hint=hint, details={"policy": hook}
        )
        raise ToolNotAllowedError(message, node=call.node, failure=failure)

    def _refuse(self, call: ToolCall, tool_id: str, exc: ToolError, args_hash: str) -> None:
        """Record a refused call (nothing locked, nothing run); the caller re-raises (and
        the dispatch boundary replaces an error quoting a secret by a redacted copy)."""
        failure = failure_of(self._scrub(exc))
        status = ToolResult.from_error(exc).status
        self.commit_log.append(
            CommitEntry(
                lane=call.lane,
                tool=tool_id,
                call_id=call.call_id,
                args_hash=args_hash,
                status=status,
            )
        )
        logger.warning(
            "tool call refused: %s (%s, lane %s): %s",
            tool_id,
            failure.code,
            call.lane,
            failure.message,
        )

    # ----------------------------------------------------------------------- steps 5-9

    def _refuse_lock(self, admitted: _Admitted, exc: ToolError) -> None:
        spec_id = admitted.tool.spec.id
        exc.failure = failure_of(exc).model_copy(update={"tool": spec_id})
        self._refuse(admitted.call, spec_id, exc, admitted.args_hash)

    def _context(self, admitted: _Admitted) -> ToolContext:
        spec, plan = admitted.tool.spec, admitted.plan
        call = admitted.call
        timeout_s = spec.timeout_s
        return ToolContext(
            tool=spec.id,
            call_id=call.call_id,
            lane=call.lane,
            node=call.node,
            workspace=self.workspace,
            timeout_s=timeout_s,
            deadline=time.monotonic() + timeout_s,
            secrets=self._secrets.subset(spec.secret_resources)
            if plan.secrets_wanted
            else _NO_SECRETS,
            # Only a host-executed tool reaches the host; a local body never sees it.
            host=self.host if plan.delegated else None,
            artifacts=self.artifacts,
        )

    def _run_sync(self, admitted: _Admitted, ctx: ToolContext) -> object:
        tool, args = admitted.tool, admitted.args
        if admitted.plan.inline and alarm_available():
            # On the main thread a Python body without write or external effects runs right
            # here under an interval timer: no thread hand-off, and an overrunning body is
            # really stopped (see call_with_alarm). Writers keep the worker thread: stopping
            # one halfway could leave a half-written file or an unreaped child process.
            try:
                return call_with_alarm(lambda: tool.execute(ctx, args), ctx.timeout_s)
            except TimeoutError:
                ctx.cancelled.set()
                raise
        if admitted.plan.self_bounded:
            # The body only waits for another thread's answer, each wait bounded by the
            # call's deadline, and cancels its own work when that passes (an MCP request):
            # a worker thread would add two thread wake-ups and guard nothing.
            return tool.execute(ctx, args)
        if admitted.plan.is_async:

            async def bounded() -> object:
                async with asyncio.timeout(ctx.timeout_s):
                    return await tool.execute(ctx, args)  # type: ignore[misc]

            job = self._workers.submit(lambda: asyncio.run(bounded()))
        else:
            job = self._workers.submit(lambda: tool.execute(ctx, args))
        # A little grace so a body enforcing its own deadline (subprocess kill) reports first.
        if not job.wait(ctx.timeout_s + _GRACE_S):
            ctx.cancelled.set()
            raise _Abandoned(job, TimeoutError())
        return job.result()

    async def _run_async(self, admitted: _Admitted, ctx: ToolContext) -> object:
        tool, args = admitted.tool, admitted.args
        if admitted.plan.is_async:
            # Awaited in this task: when the timeout fires the body has really stopped
            # (its coroutine was cancelled and unwound), so its locks can go.
            try:
                async with asyncio.timeout(ctx.timeout_s + _GRACE_S):
                    return await tool.execute(ctx, args)  # type: ignore[misc]
            except TimeoutError:
                ctx.cancelled.set()
                raise
        # A sync body runs on the arbiter's own workers, never the loop's default executor:
        # that pool is small and shared, and callers waiting in it starved the bodies.
        loop = asyncio.get_running_loop()
        finished = loop.create_future()

        def notify() -> None:
            # RuntimeError: the loop is gone, and nobody awaits this body any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, finished)

        job = self._workers.submit(lambda: tool.execute(ctx, args), notify)
        try:
            async with asyncio.timeout(ctx.timeout_s + _GRACE_S):
                await finished
        except BaseException as exc:  # the deadline, or the awaiting task was cancelled
            ctx.cancelled.set()
            error = exc if not isinstance(exc, TimeoutError) else TimeoutError()
            raise _Abandoned(job, error) from None
        return job.result()

    def _succeed(self, admitted: _Admitted, raw: object, lease: Lease) -> ToolResult:
        spec = admitted.tool.spec
        try:
            summary, payload = _normalise(raw)
            # Redact the whole text, then cut: cutting first could split a secret so that
            # its prefix no longer matches and reaches the model, the journal and events.
            summary = _truncate(self._redact(summary) if self._needles else summary)
            ref, inline = self._store(payload)
            # Every value was produced (and typed) by the arbiter itself.
            result = built(
                ToolResult,
                {
                    "tool": spec.id,
                    "call_id": admitted.call.call_id,
                    "status": "success",
                    "summary": summary,
                    "artifact_ref": ref,
                    "payload": inline,
                    "exposure": spec.exposure,
                    "prompt_mask": spec.prompt_mask,
                    "error": None,
                },
                _SUCCESS_SET,
            )
            self._commit(admitted, "success", ref)
        finally:
            self.locks.release(lease)
        logger.debug("tool %s (lane %s) -> success", spec.id, admitted.call.lane)
        return result

    def _fail(
        self, admitted: _Admitted, ctx: ToolContext, exc: BaseException, lease: Lease
    ) -> tuple[BaseException, BaseException]:
        """Commit the failed call, release its locks (or hand them to a body that is still
        running), and return the exception to raise and the original one."""
        spec = admitted.tool.spec
        running = None
        if isinstance(exc, _Abandoned):
            running, exc = exc.job, exc.error
        try:
            error = self._as_tool_error(spec, admitted.call, exc, running=running is not None)
            if isinstance(error, ToolError):
                status = ToolResult.from_error(error).status
            else:
                status = "error"  # cancellation or interpreter exit: still audited
            self._commit(admitted, status, None)
        finally:
            if running is None:
                self.locks.release(lease)
            else:
                self._hand_over(admitted, running, lease)
        logger.warning("tool %s (lane %s) -> %s: %s", spec.id, ctx.lane, status, error)
        return error, exc

    def _hand_over(self, admitted: _Admitted, job: Job, lease: Lease) -> None:
        """The caller stops waiting for a body that still runs (a thread cannot be killed):
        its locks stay held until the body returns, so no other call can touch the same
        resources meanwhile, and its real end is appended to the commit log then."""

        def late(finished: Job) -> None:
            self._late(admitted, finished, lease)

        if not self._workers.abandon(job, late):
            late(job)  # it finished between the deadline and now

    def _late(self, admitted: _Admitted, job: Job, lease: Lease) -> None:
        spec = admitted.tool.spec
        status: _LateStatus = "late_error" if job.failed else "late_success"
        try:
            self._commit(admitted, status, None)
        except Exception:  # a worker thread has nobody to raise to; the locks must still go
            logger.exception("tool %s: could not record the late end of its body", spec.id)
        finally:
            self.locks.release(lease)
        logger.warning(
            "tool %s (lane %s): the body abandoned at its timeout returned (%s); its locks "
            "are released now",
            spec.id,
            admitted.call.lane,
            status,
        )

    def _as_tool_error(
        self, spec: ToolSpec, call: ToolCall, exc: BaseException, *, running: bool = False
    ) -> BaseException:
        if not isinstance(exc, Exception):
            return exc
        code: FailureCode
        if isinstance(exc, TimeoutError):
            code = "tool_timeout"
            hint = "raise the tool's timeout_s or ask for less work per call"
            if running:
                after = (
                    "it was told to stop (ctx.cancelled) and keeps its locks until its body returns"
                )
            else:
                after = "it was stopped and its locks were released"
            message = f"tool {spec.id!r} ran longer than {spec.timeout_s}s; {after}"
            if isinstance(exc, ToolTimeoutError) and str(exc):
                message = str(exc)
            error: ToolError = ToolTimeoutError(self._redact(message), node=call.node)
        elif isinstance(exc, ToolError):
            if exc.failure is not None:
                # Already structured (e.g. a path escape inside a file tool): keep it, minus
                # any secret it quotes.
                return self._scrub(exc)
            # A typed error raised by the body keeps its class; the message is redacted.
            message = self._redact(str(exc))
            error = type(exc)(message, node=call.node)
            synthesised = failure_of(error)
            failure = synthesised.model_copy(update={"tool": spec.id, "message": message})
            error.failure = failure
            return error
        else:
            code = "tool_failed"
            hint = "check the arguments or the tool's environment and try again"
            detail = str(exc) if isinstance(exc, ToolError) else f"{type(exc).__name__}: {exc}"
            message = self._redact(f"tool {spec.id!r} failed: {detail}")
            error = ToolError(message, node=call.node)
        error.failure = ToolFailure(code=code, tool=spec.id, message=message, hint=hint)
        return error

    def _store(self, payload: JsonValue) -> tuple[str | None, JsonValue]:
        if payload is None:
            return None, None
        # Text (a body's usual return) is its own canonical JSON: orjson's dump of it.
        data = orjson.dumps(payload) if type(payload) is str else canonical_json(payload)
        if self._needles:
            data = self._redact_bytes(data)
        ref = self.artifacts.put(data)
        if len(data) > self.inline_limit:
            return ref, None
        return ref, orjson.loads(data) if self._needles else payload

    def _commit(
        self, admitted: _Admitted, status: ToolStatus | _LateStatus, ref: str | None
    ) -> None:
        call, spec = admitted.call, admitted.tool.spec
        entry = built(
            CommitEntry,
            {
                "kind": "call",
                "lane": call.lane,
                "tool": spec.id,
                "call_id": call.call_id,
                "args_hash": admitted.args_hash,
                "status": status,
                "artifact_ref": ref,
            },
            _ENTRY_SET,
        )
        self.commit_log.append(entry)
        if spec.side_effect == "external":
            # The audit record keeps the exact arguments (by reference) of every call that
            # touched the outside world, so "what did we send?" is always answerable.
            audit = {
                "tool": spec.id,
                "call_id": call.call_id,
                "lane": call.lane,
                "node": call.node,
                "side_effect": spec.side_effect,
                "args": call.args,
                "status": status,
                "result_ref": ref,
            }
            audit_ref = self.artifacts.put(self._redact_bytes(canonical_json(audit)))
            self.commit_log.append(
                entry.model_copy(update={"kind": "audit", "artifact_ref": audit_ref})
            )

    # ----------------------------------------------------------------------- secrets

    def _scrub(self, exc: ToolError) -> ToolError:
        """``exc`` without secrets: itself when it quotes none, else a copy of the same class
        whose message and structured failure are redacted."""
        if not self._needles:
            return exc
        message = str(exc)
        clean_message = self._redact(message)
        failure = exc.failure
        clean_failure = self._redact_failure(failure) if isinstance(failure, ToolFailure) else None
        if clean_message == message and clean_failure is failure:
            return exc
        try:
            return type(exc)(clean_message, node=exc.node, failure=clean_failure)
        except TypeError:  # a subclass with its own constructor: keep the family
            return ToolError(clean_message, node=exc.node, failure=clean_failure)

    def _redact_failure(self, failure: ToolFailure) -> ToolFailure:
        """``failure`` itself when it quotes no secret, else a redacted copy (message, hint,
        field messages and details alike)."""
        data = orjson.dumps(failure.model_dump(mode="json"))
        clean = self._redact_bytes(data)
        if clean == data:
            return failure
        return ToolFailure.model_validate_json(clean)

    def _safe_cause(self, exc: BaseException) -> BaseException | None:
        """``exc`` to chain as ``__cause__``, or ``None`` when its text holds a secret: a
        logged traceback would print the original message unredacted."""
        if self._redact(str(exc)) != str(exc):
            return None
        failure = exc.failure if isinstance(exc, ToolError) else None
        if isinstance(failure, ToolFailure) and self._redact_failure(failure) is not failure:
            return None
        return exc

    def _redact(self, text: str) -> str:
        for value, _escaped, name in self._needles:
            if value in text:
                text = text.replace(value, f"[redacted:{name}]")
        return text

    def _redact_bytes(self, data: bytes) -> bytes:
        for _value, escaped, name in self._needles:
            if escaped in data:
                data = data.replace(escaped, f"[redacted:{name}]".encode())
        return data


def _no_host(spec: ToolSpec, node: str | None) -> ToolError:
    hint = "give the arbiter a tool host: Arbiter(..., host=HostHandlers({...}))"
    message = f"tool {spec.id!r} is executed by the host, and this arbiter has none (fix: {hint})"
    failure = ToolFailure(code="host_unavailable", tool=spec.id, message=message, hint=hint)
    return ToolError(message, node=node, failure=failure)


def _args_hash(args: Mapping[str, Any]) -> str:
    try:
        return sha256_hex(canonical_json(dict(args)))
    except (TypeError, ValueError):
        # Not JSON (the call is refused for that); hash its type names only so the record
        # still links the attempt without persisting anything from it.
        return sha256_hex(repr(sorted((k, type(v).__name__) for k, v in args.items())).encode())


def _normalise(raw: object) -> tuple[str, JsonValue]:
    summary: str
    payload: JsonValue
    if isinstance(raw, str):  # the common body's return, tested first
        summary, payload = raw, raw
    elif isinstance(raw, _OUTPUTS):
        summary, payload = raw.summary, raw.payload
    elif raw is None:
        summary, payload = "ok", None
    elif is_command(raw):
        # Where the tool wants the graph to go: kept as data the dispatching node applies.
        summary, payload = command_payload(raw)
    else:
        payload = to_jsonable_python(raw)
        summary = orjson.dumps(payload).decode()
    return summary, payload


def _raise(error: BaseException, original: BaseException, cause: BaseException | None) -> NoReturn:
    """Raise ``error`` (``original`` itself when nothing replaced it) with ``cause``; called
    outside ``except`` blocks so no unredacted error rides along as ``__context__``."""
    if error is original:
        raise original
    raise error from cause


def _resume(steps: _Pipeline, outcome: object) -> _Step | ToolResult:
    """Resume ``steps`` with ``outcome``: what it waits for next, or its result. Called
    outside any ``except`` block, so an error it raises chains nothing it did not name."""
    try:
        if isinstance(outcome, _Raised):
            return steps.throw(outcome.error)
        return steps.send(outcome)
    except StopIteration as done:
        result: ToolResult = done.value
        return result


def _outcome(wait: Callable[[_Step], object], step: _Step) -> object:
    try:
        return wait(step)
    except BaseException as exc:  # thrown into the pipeline, which decides
        return _Raised(exc)


async def _aoutcome(waiting: Awaitable[object]) -> object:
    try:
        return await waiting
    except BaseException as exc:  # thrown into the pipeline, which decides
        return _Raised(exc)


def _truncate(summary: str) -> str:
    if len(summary) > _SUMMARY_LIMIT:
        return summary[: _SUMMARY_LIMIT - 1] + "…"
    return summary


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # cancelled when the awaiting task gave up
        future.set_result(None)


class _Abandoned(Exception):  # an internal signal: never escapes the arbiter
    """A sync body still runs on its worker after the caller stopped waiting (``error``:
    the deadline or the caller's cancellation). Its lease goes with it."""

    def __init__(self, job: Job, error: BaseException) -> None:
        super().__init__()
        self.job = job
        self.error = error
