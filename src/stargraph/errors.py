"""The one exception tree of stargraph.

Every error the library raises on purpose is a subclass of :class:`StargraphError`. The tree
splits errors a user can fix before running (compile-time) from errors met while running
(run-time), and both from the refusals of helpers used on their own, outside any graph
(usage); each class also subclasses the built-in it resembles, so ``except ValueError``
keeps working for callers who do not know stargraph::

    StargraphError
    ├── CompileError (ValueError)            problems found before anything runs
    │   ├── IRError                          malformed IR JSON, unknown kind, wrong ir_version
    │   │   └── UnknownNodeError (LookupError)   a node id the graph does not have
    │   ├── UnreferenceableNodeError         a callable the IR cannot name (lambda, closure)
    │   ├── UndeclaredOutputError            a subgraph/skill writes outside its declared outputs
    │   ├── SkillValidationError             a Skill / SkillSpec / SKILL.md that is invalid
    │   ├── ToolSpecError                    a tool manifest or ToolSpec that is invalid
    │   ├── RegistryError                    a registry clash or a write to a frozen registry
    │   │   └── PluginLoadError              an installed plugin that fails to import or register
    │   ├── InvalidProposalError             a proposal that cannot be stored as pending
    │   │   └── ExecutableProposalError      a proposal carrying executable code
    │   ├── RuleCompileError                 a rule pack that does not load
    │   ├── AgentConfigError                 an agent profile, spawn parameters or pool setting
    │   └── UntrustedRefError (ImportError)  an IR ref outside the trusted modules
    ├── RunError (RuntimeError)              problems met while a run executes
    │   ├── NodeError                        a node raised; the original is ``__cause__``
    │   │   └── MissingServiceError (KeyError)  a node asked for a service it was not given
    │   ├── InvalidInputError (ValueError)   the run's input does not fit the state model
    │   ├── InvalidWriteError                a node wrote something the state cannot take
    │   ├── InvalidPayloadError (ValueError) a Send payload that does not fit the node's input
    │   ├── StepLimitExceeded                the run hit its step limit
    │   ├── NodeTimeoutError (TimeoutError)  a node exceeded its timeout
    │   ├── AttemptAbandonedError            a timed-out attempt's thread used its journal
    │   ├── EngineError                      an untyped exception escaped the engine
    │   ├── RunCancelledError                the run was cancelled; it stopped at a step boundary
    │   ├── RuleRuntimeError                 a rule decision could not be taken
    │   │   └── RuleBudgetError              a decision overran its time or memory budget
    │   ├── CheckpointError                  stored runs: missing, finished, corrupt, mismatched
    │   │   ├── RunNotFoundError (LookupError)
    │   │   ├── RunNotResumableError
    │   │   ├── GraphHashMismatch
    │   │   ├── CodeHashMismatch
    │   │   ├── CorruptCheckpointError
    │   │   │   └── CommitLogCorruptError    a tool commit-log row or head anchor that is damaged
    │   │   ├── ArtifactNotFoundError (LookupError)   no stored tool artifact with that ref
    │   │   ├── RunBusyError                 another live owner holds the run's lease
    │   │   ├── LeaseLostError               this process's lease on a run was taken over
    │   │   ├── ThreadNotFoundError (LookupError)   no thread with that id in the store
    │   │   ├── ThreadBusyError              a thread's last turn has not finished yet
    │   │   └── StoreUnavailableError        disk full, read-only, I/O error, connection lost
    │   ├── ToolError                        the tool dispatch pipeline refused or failed a call
    │   │   ├── ToolArgumentError
    │   │   ├── ToolNotAllowedError (PermissionError)
    │   │   ├── LockTimeoutError (TimeoutError)
    │   │   ├── ToolTimeoutError (TimeoutError)
    │   │   └── McpServerError               an MCP server would not start, crashed, or changed
    │   ├── LLMError                         the chat model failed after retries
    │   │   └── ChatDataError (ValueError)   a chat message/request/response of the wrong shape
    │   ├── ProposalError                    deciding a stored proposal
    │   │   ├── ProposalNotFoundError (LookupError)
    │   │   └── ProposalStateError (ValueError)
    │   ├── LaneTransitionError              an event a lane state machine does not allow
    │   ├── SessionError                     a session event its state forbids, or no session
    │   ├── RemoteContextError               a remote node used an orchestrator-only ctx part
    │   ├── RayUnavailableError              Ray missing, unconnected, or not on loopback
    │   ├── LaneBusyError                    a lane already runs a skill (one active per lane)
    │   ├── WaitTimeoutError (TimeoutError)  waiting for a skill run or a lane outlasted the wait
    │   ├── ServiceNotStartedError           a local server used before start() / after close()
    │   ├── LifecycleError                   an illegal agent transition or unmet writeback
    │   │   └── AgentQueueFullError          a task refused: its agent type's queue is full
    │   └── ReplayError                      replay could not reproduce the recorded run
    │       ├── ReplayMissError (LookupError)
    │       ├── ReplayDivergenceError
    │       └── CassetteError                a cassette file that is truncated, edited, foreign
    └── UsageError                           a helper used on its own refused the call
        ├── GraphvizNotFoundError (FileNotFoundError)   no ``dot`` to render a picture
        ├── StoreError (ValueError)          a document/vector store refused its input
        └── ApiError                         ``stargraph serve`` refused a request (HTTP status)

``LaneBusy`` is the old name of :class:`LaneBusyError`: it still imports, with a
``DeprecationWarning``.

Warnings have their own small tree: ``StargraphWarning(UserWarning)`` and
``CodeHashWarning`` (node source changed since a run was checkpointed), ``UnknownKeyWarning``
(a SKILL.md key stargraph does not know), ``WritebackWarning`` and ``OrphanWarning`` (the agent
writeback contract), ``ReplayEffectsWarning`` (a replay runs node bodies again).

Messages name every culprit (node, step, key, file, JSON pointer ...) and say how to fix
the problem; ``tests/test_errors.py`` and the feature tests pin them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypedDict, Unpack

__all__ = [
    "AgentConfigError",
    "AgentQueueFullError",
    "ApiError",
    "ArtifactNotFoundError",
    "AttemptAbandonedError",
    "CassetteError",
    "ChatDataError",
    "CheckpointError",
    "CodeHashMismatch",
    "CodeHashWarning",
    "CommitLogCorruptError",
    "CompileError",
    "CorruptCheckpointError",
    "EngineError",
    "ExecutableProposalError",
    "GraphHashMismatch",
    "GraphvizNotFoundError",
    "IRError",
    "InvalidInputError",
    "InvalidPayloadError",
    "InvalidProposalError",
    "InvalidWriteError",
    "LLMError",
    "LaneBusyError",
    "LaneTransitionError",
    "LeaseLostError",
    "LifecycleError",
    "LockTimeoutError",
    "McpServerError",
    "MissingServiceError",
    "NodeError",
    "NodeTimeoutError",
    "OrphanWarning",
    "PluginLoadError",
    "Problem",
    "ProposalError",
    "ProposalNotFoundError",
    "ProposalStateError",
    "RayUnavailableError",
    "RegistryError",
    "RemoteContextError",
    "ReplayDivergenceError",
    "ReplayEffectsWarning",
    "ReplayError",
    "ReplayMissError",
    "RuleBudgetError",
    "RuleCompileError",
    "RuleRuntimeError",
    "RunBusyError",
    "RunCancelledError",
    "RunError",
    "RunNotFoundError",
    "RunNotResumableError",
    "ServiceNotStartedError",
    "SessionError",
    "SkillValidationError",
    "StargraphError",
    "StargraphWarning",
    "StepLimitExceeded",
    "StoreError",
    "StoreUnavailableError",
    "ThreadBusyError",
    "ThreadNotFoundError",
    "ToolArgumentError",
    "ToolError",
    "ToolNotAllowedError",
    "ToolSpecError",
    "ToolTimeoutError",
    "UndeclaredOutputError",
    "UnknownKeyWarning",
    "UnknownNodeError",
    "UnreferenceableNodeError",
    "UntrustedRefError",
    "UsageError",
    "WaitTimeoutError",
    "WritebackWarning",
]


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem found by a validator: where it is, what is wrong, and how to fix it.

    ``pointer`` is a JSON pointer into the IR (``/nodes/2/ref``) or a file path with a
    pointer (``skills/x.json#/states/a``) so the user can jump straight to the culprit.
    """

    pointer: str
    message: str
    hint: str = ""

    def render(self) -> str:
        """One line: ``<pointer>: <message> (fix: <hint>)``."""
        text = f"{self.pointer}: {self.message}"
        return f"{text} (fix: {self.hint})" if self.hint else text


def _problems_message(problems: tuple[Problem, ...], subject: str) -> str:
    """``<subject> is invalid: <problem>``, or ``<subject> has N problems:`` and one line each."""
    if len(problems) == 1:
        return f"{subject} is invalid: {problems[0].render()}"
    lines = "\n".join(f"  - {p.render()}" for p in problems)
    return f"{subject} has {len(problems)} problems:\n{lines}"


class StargraphError(Exception):
    """Root of every error stargraph raises on purpose."""


class _Validation(Protocol):
    """What :meth:`CompileError.from_validation` reads of a pydantic ``ValidationError``
    (named structurally so that this bottom module does not import pydantic)."""

    def errors(self, *, include_url: bool = ...) -> Any: ...


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _validation_hint(error: Mapping[str, Any], default: str) -> str:
    kind = error.get("type")
    if kind == "missing":
        return "add it"
    if kind == "extra_forbidden":
        return "remove it or check its spelling"
    if kind == "frozen_instance":
        return "the model is frozen: make a changed copy with model_copy(update={...})"
    if kind == "literal_error":
        return f"use one of {error.get('ctx', {}).get('expected', 'the allowed values')}"
    return default


def _under(pointer: str, prefix: str) -> bool:
    return pointer == prefix or pointer.startswith(prefix + "/")


def problems_of_validation(
    exc: _Validation, *, where: str = "", hint: str = "pass a value of the documented type"
) -> list[Problem]:
    """The problems of a pydantic ``ValidationError``, one per error, each at ``where`` plus
    the JSON pointer of its field; see :meth:`CompileError.from_validation`."""
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        path = "/" + "/".join(str(part) for part in error["loc"])
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, _ProblemsError):
            # Pointers of a nested model's own error are relative to that model, but a field
            # validator may already point from the model that owns the field (under the
            # field's own path); ones that already name a file (``x.json#/...``) are kept.
            field = path.rstrip("/")
            problems.extend(
                p
                if "#" in p.pointer
                else Problem(
                    where + (p.pointer if _under(p.pointer, field) else field + p.pointer),
                    p.message,
                    p.hint,
                )
                for p in cause.problems
            )
            continue
        message = str(cause) if isinstance(cause, StargraphError) else error["msg"]
        if "input" in error and error.get("type") != "missing":  # missing: input is the parent
            message += f" (got {_shown(error['input'])})"
        problems.append(Problem(where + path, message, _validation_hint(error, hint)))
    return problems


# --------------------------------------------------------------------------- compile time


class _ProblemsError(StargraphError):
    """An error carrying every problem found (``problems``) with ``subject``, the thing that
    has them; its message renders them all. A string is one problem without a pointer."""

    def __init__(self, problems: Iterable[Problem] | str, *, subject: str) -> None:
        if isinstance(problems, str):
            problems = [Problem("", problems)]
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.subject = subject
        super().__init__(_problems_message(self.problems, subject))

    @classmethod
    def from_validation(
        cls,
        exc: _Validation,
        *,
        subject: str,
        where: str = "",
        hint: str = "pass a value of the documented type",
    ) -> Self:
        """Every problem of a pydantic ``ValidationError`` as one error of this class.

        Each problem's pointer is ``where`` (a file and ``#``, or nothing) followed by the
        JSON pointer of the field, its message quotes the value given, and its hint says what
        to do (``hint`` when pydantic's error type suggests nothing better). A typed error a
        validator raised (its ``ValueError`` side is how it crossed pydantic) keeps its own
        problems, under the field it was raised for, rather than being quoted as one string.
        """
        return cls(problems_of_validation(exc, where=where, hint=hint), subject=subject)


class CompileError(_ProblemsError, ValueError):
    """Problems found before anything runs; carries *every* problem found, not just the first.

    ``problems`` keeps the structured list so tools (the CLI, an editor) can show each one.
    """

    def __init__(self, problems: Iterable[Problem] | str, *, subject: str = "graph") -> None:
        super().__init__(problems, subject=subject)

    @classmethod
    def at(cls, pointer: str, message: str, hint: str = "", *, subject: str | None = None) -> Self:
        """The error for one problem: ``message`` at ``pointer``, fixed by ``hint``.

        ``subject`` names what is invalid (``"graph"``, ``"skill 'x'"``); left out, the
        class's own default is used. Shorthand for ``cls([Problem(pointer, message, hint)],
        subject=subject)``, the form most validators raise.
        """
        problems = [Problem(pointer, message, hint)]
        return cls(problems) if subject is None else cls(problems, subject=subject)


class IRError(CompileError):
    """The IR document itself is malformed: bad JSON, unknown node ``kind``, wrong version."""


class UnknownNodeError(IRError, LookupError):
    """A node id the graph (its IR) does not have; the message lists the ids it has."""


class UnreferenceableNodeError(CompileError):
    """A node callable has no importable ``module:qualname`` and no registry id."""


class UndeclaredOutputError(CompileError):
    """A subgraph or skill writes (statically) to a channel outside its declared outputs."""


class SkillValidationError(CompileError):
    """A ``Skill``, Choir SkillSpec or SKILL.md file failed validation."""


class ToolSpecError(CompileError):
    """A ``ToolSpec`` or tool manifest failed validation or could not be loaded."""


class RegistryError(CompileError):
    """A registry clash within one scope, or a write to a frozen registry."""


class PluginLoadError(RegistryError):
    """An installed plugin failed to import, to register with the plugin manager, or in one of
    its ``register_*`` hooks, or registered a name another plugin has. Each problem names the
    entry point (group, name, value) and its distribution (name, version) and says how to
    upgrade, uninstall or skip it; ``plugins`` lists the entry-point names at fault."""

    def __init__(
        self,
        problems: Iterable[Problem] | str,
        *,
        subject: str = "plugin setup",
        plugins: Iterable[str] = (),
    ) -> None:
        self.plugins: tuple[str, ...] = tuple(plugins)
        super().__init__(problems, subject=subject)


class InvalidProposalError(CompileError):
    """A proposal that cannot be accepted as pending: every problem, each with its JSON
    pointer into the proposal."""


class ExecutableProposalError(InvalidProposalError):
    """A proposal carrying executable code (a source body, an ``exec_path``, a script)."""


class RuleCompileError(CompileError):
    """A rule pack failed to load: syntax error, unknown template, bad ``goto`` target, a
    construct or function outside the rule-pack allowlist."""


class AgentConfigError(CompileError):
    """Agent data that is invalid: a capability profile, spawn parameters, a task's needs, a
    pool strategy. Each problem names the field (a JSON pointer) and the value given."""


class UntrustedRefError(CompileError, ImportError):
    """An IR ref names a module outside the ones trusted with
    :func:`stargraph.refs.trusted_modules`; nothing was imported. An ``ImportError`` too, so
    code that reports unimportable refs reports this one the same way."""


# --------------------------------------------------------------------------- run time


class _RunAt(TypedDict, total=False):
    """Where in a run an error was met: the keywords every :class:`RunError` takes."""

    run_id: str | None
    step: int | None
    node: str | None


class RunError(StargraphError, RuntimeError):
    """A problem met while a run executes. ``run_id``, ``step`` and ``node`` locate it."""

    def __init__(self, message: str, **at: Unpack[_RunAt]) -> None:
        unknown = at.keys() - _RunAt.__optional_keys__
        if unknown:  # what an explicit keyword list would refuse, for untyped callers
            raise TypeError(f"{type(self).__name__}() got unexpected keywords {sorted(unknown)}")
        self.run_id: str | None = at.get("run_id")
        self.step: int | None = at.get("step")
        self.node: str | None = at.get("node")
        super().__init__(message)


class NodeError(RunError):
    """A node raised. The original exception is chained as ``__cause__``."""


class MissingServiceError(NodeError, KeyError):
    """A node asked ``ctx.services`` for a key its graph was not given; ``service`` is the
    key. The message says how to give it on the path that ran the node. A ``KeyError`` too,
    which is what a plain mapping would have raised."""

    def __init__(self, message: str, *, service: str, **at: Unpack[_RunAt]) -> None:
        self.service = service
        super().__init__(message, **at)

    # KeyError's own __str__ would show the message as a quoted repr.
    __str__ = Exception.__str__


class InvalidInputError(RunError, ValueError):
    """The input given to ``invoke``/``stream`` (or a resume response) does not validate."""


class InvalidWriteError(RunError):
    """A node returned a non-mapping, an unknown key, a badly typed value, or two parallel
    nodes wrote one reducer-less channel in the same step."""


class InvalidPayloadError(RunError, ValueError):
    """A task's input does not fit: a ``Send`` payload value its state field refuses, or an
    input that does not fit the input model its node declares (``with_node(..., input=Model)``:
    a ``Send`` payload, or the state a node with an input model was reached with). ``node``
    and ``step`` locate it; ``field`` names the first field
    at fault (a dotted path, ``""`` for the payload as a whole)."""

    def __init__(self, message: str, *, field: str = "", **at: Unpack[_RunAt]) -> None:
        self.field = field
        super().__init__(message, **at)


class StepLimitExceeded(RunError):
    """The run took more supersteps than its ``max_steps`` allows."""


class NodeTimeoutError(RunError, TimeoutError):
    """A node ran longer than its ``timeout_s``."""


class AttemptAbandonedError(RunError):
    """Raised *inside* the thread of an abandoned attempt: a node attempt that timed out
    (its thread cannot be stopped) made a journaled call (``ctx.once``, ``ctx.now``, a model
    or tool call through its services) after a retry had taken over. The call is refused and
    nothing is recorded, so the effect is neither repeated nor logged into another attempt's
    record. Nobody waits for that thread, so the run never sees this error."""


class EngineError(RunError):
    """An exception that is not a :class:`StargraphError` escaped the engine itself (not a
    node: those become :class:`NodeError`) - a bug, or a store or service that raised
    something untyped. The run is marked failed with it; the original is ``__cause__``."""


class RunCancelledError(RunError):
    """The run was cancelled (``CompiledGraph.cancel``, a first SIGINT or SIGTERM under
    ``stargraph.runtime.cancel_on_signals``, a cancelled nested run) and stopped at a step
    boundary: ``step`` is the last step it committed, and its store keeps it as
    ``cancelled`` with ``reason`` in ``stopped_by``. ``resume(run_id)`` continues it."""

    def __init__(self, message: str, *, reason: str = "", **at: Unpack[_RunAt]) -> None:
        self.reason = reason
        super().__init__(message, **at)


class RuleRuntimeError(RunError):
    """A rule could not be evaluated or asked for an impossible decision (``goto`` to a node
    that is not a successor, a Python callback that raised)."""


class RuleBudgetError(RuleRuntimeError):
    """A rule decision ran past its time budget or grew the rule engine past its memory limit;
    the engine stopped it (``RuleEngine(decide_timeout_s=..., memory_limit=...)``)."""


class CheckpointError(RunError):
    """Stored runs: missing, already finished, corrupt, or recorded by a different graph."""


class RunNotFoundError(CheckpointError, LookupError):
    """No run with this id is in the store."""


class RunNotResumableError(CheckpointError):
    """The run exists but cannot be resumed (it finished, or it failed without a retry)."""


class GraphHashMismatch(CheckpointError):
    """The stored run was made by a graph with a different ``graph_hash``."""

    def __init__(self, *, run_id: str, stored: str, current: str) -> None:
        self.stored = stored
        self.current = current
        super().__init__(
            f"run {run_id!r} was recorded by graph {stored} but this graph is {current}; "
            "resume it with the graph that made it, or pass migration=... to "
            "resume() to accept the new graph explicitly",
            run_id=run_id,
        )


class CodeHashMismatch(CheckpointError):
    """Node source code changed since the run was checkpointed (``code_hash`` differs)."""


class CorruptCheckpointError(CheckpointError):
    """A stored checkpoint row cannot be decoded."""


class CommitLogCorruptError(CorruptCheckpointError):
    """A row of a tool commit log is not a sealed record (wrong SQL type, undecodable), or
    the log's head cannot be read; the message names the table, the row's ``seq`` and the
    file."""


class ArtifactNotFoundError(CheckpointError, LookupError):
    """An artifact store holds nothing under this ref (or the text is no ``sha256:<hex>``
    ref at all). A ``LookupError``, as the store's ``get`` is a lookup."""


class RunBusyError(CheckpointError):
    """Another live owner (host, pid, since when) holds the run's lease: it is being run or
    resumed elsewhere. Raised before any node runs; ``owner`` describes the holder."""

    def __init__(self, message: str, *, run_id: str | None = None, owner: str = "") -> None:
        self.owner = owner
        super().__init__(message, run_id=run_id)


class LeaseLostError(CheckpointError):
    """This process's (or worker's) lease on the run was taken over; it must not write the
    run any more."""


class ThreadNotFoundError(CheckpointError, LookupError):
    """No run of the store belongs to a thread with this id."""


class ThreadBusyError(CheckpointError):
    """A new turn of a thread cannot start: its last turn (``run_id``) is still running, is
    interrupted, failed or was cancelled (resume it first), or another caller started the
    same turn at the same moment."""


class StoreUnavailableError(CheckpointError):
    """The checkpoint store cannot take a write or cannot be reached: the disk is full, the
    database file or its folder is read-only, an I/O error, a lost or refused connection.
    The write was not applied (or, for a connection lost mid-commit, may have been: the
    store's fences make a retry safe); what was committed before is intact. Fix the cause,
    then resume the run."""


class ToolError(RunError):
    """The tool dispatch pipeline refused or failed a call.

    ``failure`` is the structured account of it the ReAct loop shows the model (a
    ``stargraph.tools.ToolFailure``: code, tool, message, hint, failed fields); ``None`` when
    whoever raised the error gave none, and ``stargraph.tools.failure_of`` then derives one
    from the error's class and message.
    """

    def __init__(self, message: str, *, failure: object = None, **at: Unpack[_RunAt]) -> None:
        # Typed ``object`` because this module sits below the tools package; readers take
        # it through ``failure_of``, which checks it.
        self.failure = failure
        super().__init__(message, **at)


class ToolArgumentError(ToolError):
    """Tool arguments failed schema validation; nothing was locked or run."""


class ToolNotAllowedError(ToolError, PermissionError):
    """A tool call was refused by the allowlist or an ``authorize_action`` policy."""


class LockTimeoutError(ToolError, TimeoutError):
    """A tool's lockset could not be acquired within ``lock_timeout``."""


class ToolTimeoutError(ToolError, TimeoutError):
    """A tool ran longer than its ``timeout_s``; its locks are released once its body has
    stopped."""


class McpServerError(ToolError):
    """An MCP server (``stargraph.tools.McpServer``) could not be started or reached, exited
    during a call, crashed again after its one restart, or now lists tools whose descriptions
    or schemas differ from the pinned listing. The message names the server, its command or
    URL and what it printed last."""


class LLMError(RunError):
    """The chat model failed after the retry policy gave up."""


class ChatDataError(_ProblemsError, LLMError, ValueError):
    """A chat message, request or response built from data of the wrong shape (a role that
    does not exist, content that is not text, a malformed reply); ``problems`` names each
    field, the value given and the fix. Nothing was sent to a model."""

    def __init__(self, problems: Iterable[Problem] | str, *, subject: str = "chat data") -> None:
        super().__init__(problems, subject=subject)


class ProposalError(RunError):
    """Deciding a stored proposal failed."""


class ProposalNotFoundError(ProposalError, LookupError):
    """No proposal with that id."""


class ProposalStateError(ProposalError, ValueError):
    """The proposal was already decided (or cannot be applied to that registry)."""


class LaneTransitionError(RunError):
    """An event the lane state machine does not allow in its current state."""


class SessionError(RunError):
    """A session lifecycle event its state does not allow (``heartbeat`` of a stopped
    session), a skill started in a session that is not running, or a session id the session
    store does not hold."""


class RemoteContextError(RunError):
    """A node running on the executor given to ``compile(executor=...)`` used a part of its
    ``ctx`` that only the orchestrating process has (``once``, ``record_call``,
    ``interrupt``, ``services``). Remote nodes must be pure functions of state and config."""


class RayUnavailableError(RunError):
    """Ray is not installed, not connected, or not listening where it was asked to."""


class LaneBusyError(RunError):
    """A skill was started on a lane that already runs one (one active skill per lane).

    Formerly ``LaneBusy``; that name still imports, with a ``DeprecationWarning``."""


class WaitTimeoutError(RunError, TimeoutError):
    """Waiting for a skill run or a lane's runs to end took longer than the caller's
    ``timeout``. The run itself goes on: wait again, or cancel it."""


class ServiceNotStartedError(RunError):
    """A local server (``ScriptedOpenAIServer``, an example service fake) was asked for its
    address before ``start()`` or after ``close()``: use it in a ``with`` block."""


class LifecycleError(RunError):
    """An agent lifecycle transition the lifecycle machine does not allow (``TERMINATED ->
    BUSY``), or one refused because the agent's writeback contract is not met (``block``)."""


class AgentQueueFullError(LifecycleError):
    """A task submitted for an agent type whose every slot is taken and whose queue holds
    ``limits.queue_depth`` tasks already. Names the type and both limits."""

    # Defaults only so that unpickling (which passes the message alone, then restores the
    # attributes) works: a process pool sends errors back pickled.
    def __init__(self, message: str, *, agent_type: str = "", queue_depth: int = 0) -> None:
        super().__init__(message)
        self.agent_type = agent_type
        """The profile whose queue is full."""
        self.queue_depth = queue_depth
        """The limit that was reached."""


class ReplayError(RunError):
    """Replay could not reproduce the recorded run."""


class ReplayMissError(ReplayError, LookupError):
    """A call made during replay has no recorded call to be served from."""


class ReplayDivergenceError(ReplayError):
    """The replayed run did not do what the recorded one did: another call or request, other
    writes, other scheduled nodes.

    For a diverging call, ``call_index`` is its number within the node's attempt and
    ``fingerprint`` / ``recorded_fingerprint`` are the content hashes of the request made and
    of the one recorded (``None`` when the divergence is not about one call).
    """

    def __init__(
        self,
        message: str,
        *,
        call_index: int | None = None,
        fingerprint: str | None = None,
        recorded_fingerprint: str | None = None,
        **at: Unpack[_RunAt],
    ) -> None:
        self.call_index = call_index
        self.fingerprint = fingerprint
        self.recorded_fingerprint = recorded_fingerprint
        super().__init__(message, **at)


class CassetteError(ReplayError):
    """A cassette file is truncated, was edited by hand, or belongs to another graph."""


# --------------------------------------------------------------------------- usage


class UsageError(StargraphError):
    """A helper used on its own, outside compiling or running a graph, refused the call: it
    was given input it cannot take, or a program it needs is missing."""


class GraphvizNotFoundError(UsageError, FileNotFoundError):
    """Graphviz's ``dot`` program is not installed, so PNG/SVG cannot be produced.

    Mermaid and DOT *text* need no Graphviz; only rendering images does.
    """


class StoreError(UsageError, ValueError):
    """A document or vector store was given data it cannot take (a vector of the wrong
    length, a bad id) or an embedder it cannot use."""


class ApiError(UsageError):
    """``stargraph serve`` refused a request: a body that does not fit, an unknown thread,
    assistant or run, a busy thread, a missing token. ``status`` is the HTTP status the
    server answers with (and that :mod:`stargraph.client` read back); the message names the
    culprit and the fix."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        self.status = status
        super().__init__(message)


# --------------------------------------------------------------------------- warnings


class StargraphWarning(UserWarning):
    """Root of the warnings stargraph issues."""


class CodeHashWarning(StargraphWarning):
    """A resumed run was checkpointed by different node source code (``code_hash``)."""


class ReplayEffectsWarning(StargraphWarning):
    """A replay left to its default ``stub`` runs node bodies again: what they do outside
    the record (files, services reached without a tool) happens again."""


class UnknownKeyWarning(StargraphWarning):
    """A SKILL.md frontmatter has keys stargraph does not know (they are kept in ``extra``)."""


class WritebackWarning(StargraphWarning):
    """An agent terminated without its full writeback (``warn`` mode)."""


class OrphanWarning(StargraphWarning):
    """The orphan scan found a terminated agent with no thought record."""


_DEPRECATED: dict[str, tuple[str, type[StargraphError]]] = {
    "LaneBusy": ("LaneBusyError", LaneBusyError),
}


def __getattr__(name: str) -> type[StargraphError]:
    """Old names of renamed errors: still importable, with a ``DeprecationWarning`` that
    names the new one (``LaneBusy`` is ``LaneBusyError``)."""
    if name in _DEPRECATED:
        new, cls = _DEPRECATED[name]
        warnings.warn(
            f"stargraph.errors.{name} is deprecated; use stargraph.errors.{new} (the same "
            "class under its new name)",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
