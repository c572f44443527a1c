"""The ``Tool`` protocol and its two implementations.

* :class:`PythonTool` -- a typed Python function wrapped by ``@tool``; its argument schema is
  derived from the signature (or from an explicit pydantic model).
* :class:`SubprocessTool` -- an external tool: a JSON manifest with both views plus an
  executable that reads the arguments as JSON on stdin and writes its result as JSON on stdout.

Both are only ever run by the arbiter when a graph or an agent calls them. A ``PythonTool``
is also callable as the plain function it wraps, so its own tests can call it directly; such a
call is ordinary Python (no argument validation, locks or commit log), and the graph's path
to the body stays the arbiter's.
"""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, get_type_hints, runtime_checkable

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, create_model

from stargraph._typed import TypedModel
from stargraph.errors import Problem, ToolError, ToolSpecError, ToolTimeoutError
from stargraph.tools._artifacts import ArtifactStore
from stargraph.tools._result import Exposure, ToolOutput
from stargraph.tools._schema import ArgumentModel, ValidatedArgs
from stargraph.tools._spec import SideEffect, ToolSpec
from stargraph.tools._workspace import Workspace

__all__ = [
    "AsyncPythonTool",
    "HostRequest",
    "PythonTool",
    "Secrets",
    "SpecTool",
    "SubprocessTool",
    "Tool",
    "ToolContext",
    "ToolHost",
    "is_async_tool",
    "secret_env_name",
    "tool",
]


class Secrets(Mapping[str, str]):
    """Read-only secret values whose ``repr`` never shows a value (safe to log by accident)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._values = dict(values or {})

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Secrets({sorted(self._values)})"

    def subset(self, names: tuple[str, ...]) -> Secrets:
        """Only ``names``; a declared secret missing from the store is simply absent."""
        return Secrets({n: self._values[n] for n in names if n in self._values})


def secret_env_name(resource: str) -> str:
    """Environment variable carrying secret ``resource`` to a subprocess tool.

    >>> secret_env_name("git_identity")
    'STARGRAPH_SECRET_GIT_IDENTITY'
    """
    return "STARGRAPH_SECRET_" + resource.upper()


class HostRequest(TypedModel):
    """One delegated execution, as the host receives it (JSON-serialisable, so a host may sit
    behind an RPC boundary). ``args`` are the validated, normalised arguments."""

    typed_error = ToolError

    model_config = ConfigDict(frozen=True)

    tool: str = Field(description="Canonical tool id, e.g. 'choir.web.browse@1.0.0'.")
    name: str = Field(description="The namespaced name the host routes on: 'choir.web.browse'.")
    args: dict[str, JsonValue] = Field(description="Validated, normalised arguments.")
    call_id: str | None = Field(None, description="The model's tool_call id.")
    lane: str = Field("core", description="Calling lane.")
    node: str | None = Field(None, description="Calling graph node.")
    timeout_s: float = Field(description="The tool's timeout; the arbiter enforces it.")


@runtime_checkable
class ToolHost(Protocol):
    """What executes host-delegated tools: the agent's host daemon, or a stand-in for it."""

    def execute_host_tool(self, request: HostRequest) -> object:
        """Run ``request``; return what a local body would (``ToolOutput``, JSON, ``None``)
        or raise (a :class:`~stargraph.errors.ToolError` keeps its class)."""
        ...


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What one execution may use besides its arguments; built by the arbiter per call.

    ``secrets`` holds only the tool's declared ``secret_resources``. ``cancelled`` is set
    when the call timed out: a long-running Python body should check it, because a thread
    cannot be stopped from outside (and the call's locks stay held until the body returns).
    ``host`` is the arbiter's tool host, given only to host-executed tools. ``artifacts`` is
    the arbiter's artifact store, where a body may put binary output (an MCP tool's images)
    and return only its reference.
    """

    tool: str
    call_id: str | None
    lane: str
    node: str | None
    workspace: Workspace
    timeout_s: float
    deadline: float
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    host: ToolHost | None = field(default=None, repr=False)
    artifacts: ArtifactStore | None = field(default=None, repr=False)

    def remaining(self) -> float:
        """Seconds left before the call's timeout (never negative)."""
        return max(0.0, self.deadline - time.monotonic())


@runtime_checkable
class Tool(Protocol):
    """One tool: its spec, its argument validator and its body.

    ``execute`` receives validated arguments and may be ``async def``; it returns a
    :class:`ToolOutput`, any JSON-able value, or ``None``. Only the arbiter calls it.
    """

    @property
    def spec(self) -> ToolSpec:
        """The tool's two views."""
        ...

    @property
    def arguments(self) -> ArgumentModel:
        """How arguments are validated."""
        ...

    def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Run the body (only the arbiter calls this)."""
        ...


class PythonTool:
    """A Python function as a tool. Built by :func:`tool`; calling it calls the function."""

    __slots__ = ("_ctx_param", "_fields", "_fn", "_model_param", "arguments", "source", "spec")

    def __init__(
        self,
        spec: ToolSpec,
        arguments: ArgumentModel,
        fn: Callable[..., Any],
        *,
        ctx_param: str | None = None,
        model_param: str | None = None,
    ) -> None:
        self.spec = spec
        self.arguments = arguments
        self.source = f"{fn.__module__}:{fn.__qualname__}"
        self._fn = fn
        self._ctx_param = ctx_param
        self._model_param = model_param
        # The argument model's field names, read once: pydantic's ``model_fields`` is a
        # Python descriptor calling a classmethod at each read, and every call needs them.
        self._fields = (arguments.model, tuple(arguments.model.model_fields))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.id!r}, source={self.source!r})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function as written (a ``ToolContext`` parameter, if any, is
        the caller's to pass): what unit tests of a tool's body want, outside the arbiter."""
        return self._fn(*args, **kwargs)

    def _kwargs(self, ctx: ToolContext, args: ValidatedArgs) -> dict[str, Any]:
        if self._model_param is not None:
            kwargs: dict[str, Any] = {self._model_param: args.model}
        else:
            model = args.model
            known, names = self._fields
            if type(model) is not known:
                names = tuple(type(model).model_fields)
            kwargs = {name: getattr(model, name) for name in names}
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        return kwargs

    def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Call the function with typed arguments (and the context, if it asks for one)."""
        return self._fn(**self._kwargs(ctx, args))


class AsyncPythonTool(PythonTool):
    """A ``async def`` function as a tool; the arbiter awaits it under a timeout."""

    __slots__ = ()

    async def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Await the coroutine function with typed arguments."""
        result: Awaitable[object] = self._fn(**self._kwargs(ctx, args))
        return await result


def tool(
    *,
    id: str,
    description: str | None = None,
    side_effect: SideEffect = "none",
    locks: tuple[str, ...] | list[str] = (),
    timeout_s: float = 30.0,
    idempotent: bool = False,
    secret_resources: tuple[str, ...] | list[str] = (),
    network: bool = False,
    exposure: Exposure = "both",
    prompt_mask: bool = False,
    args_model: type[BaseModel] | None = None,
) -> Callable[[Callable[..., Any]], PythonTool]:
    """Turn a typed function into a :class:`PythonTool`.

    The argument schema comes from the signature (every parameter but a ``ToolContext`` one
    must be annotated) or, with ``args_model``, from that model (the function then takes one
    parameter of that type). ``description`` defaults to the docstring.

    >>> @tool(id="demo.add@1.0.0")
    ... def add(a: int, b: int = 1) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> add.spec.input_schema["required"]
    ['a']
    >>> add(2, b=3)
    5
    """

    def decorate(fn: Callable[..., Any]) -> PythonTool:
        arguments, ctx_param, model_param = _arguments_from_function(fn, id, args_model)
        text = description or inspect.getdoc(fn)
        if not text:
            problem = Problem(f"{id}#/description", "the tool has no description")
            raise ToolSpecError([problem], subject=f"tool {fn.__qualname__}")
        try:
            spec = ToolSpec(
                id=id,
                description=text.strip(),
                input_schema=arguments.json_schema,
                side_effect=side_effect,
                locks=tuple(locks),
                timeout_s=timeout_s,
                idempotent=idempotent,
                secret_resources=tuple(secret_resources),
                network=network,
                exposure=exposure,
                prompt_mask=prompt_mask,
            )
        except ToolSpecError as exc:
            # Re-home each problem on the function, which is what the author can find.
            where = f"{fn.__qualname__} ({id})"
            problems = [
                Problem(f"{where}#/{p.pointer.partition('#/')[2]}", p.message, p.hint)
                for p in exc.problems
            ]
            raise ToolSpecError(problems, subject=f"tool {where}") from None
        cls = AsyncPythonTool if inspect.iscoroutinefunction(fn) else PythonTool
        return cls(spec, arguments, fn, ctx_param=ctx_param, model_param=model_param)

    return decorate


def _arguments_from_function(
    fn: Callable[..., Any], tool_id: str, args_model: type[BaseModel] | None
) -> tuple[ArgumentModel, str | None, str | None]:
    where = f"{fn.__qualname__} ({tool_id})"
    try:
        hints = get_type_hints(fn, include_extras=True)
    except NameError as exc:
        raise ToolSpecError(
            [Problem(where, f"cannot resolve an annotation: {exc}", "import the type")],
            subject=f"tool {where}",
        ) from exc
    problems: list[Problem] = []
    ctx_param: str | None = None
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        hint = hints.get(name, inspect.Parameter.empty)
        if hint is ToolContext:
            ctx_param = name
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            problems.append(Problem(f"{where}#/{name}", "*args/**kwargs cannot be tool arguments"))
        elif param.kind is inspect.Parameter.POSITIONAL_ONLY:
            problems.append(
                Problem(f"{where}#/{name}", "positional-only parameters are not allowed")
            )
        elif hint is inspect.Parameter.empty:
            problems.append(
                Problem(f"{where}#/{name}", "parameter has no type annotation", "annotate it")
            )
        else:
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[name] = (hint, default)
    if problems:
        raise ToolSpecError(problems, subject=f"tool {where}")
    if args_model is not None:
        if len(fields) != 1:
            raise ToolSpecError(
                [Problem(where, "with args_model the function takes exactly one argument")],
                subject=f"tool {where}",
            )
        (model_param,) = fields
        return ArgumentModel(args_model), ctx_param, model_param
    name = (
        "".join(part.capitalize() for part in tool_id.split("@", maxsplit=1)[0].split(".")) + "Args"
    )
    model = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
    return ArgumentModel(model), ctx_param, None


# --------------------------------------------------------------------------- external tools


class _ExternalOutput(BaseModel):
    """The optional envelope an external tool may print: ``{status, summary, payload}``."""

    # Built at the first external tool's output, not at import.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    status: str = "success"
    summary: str
    payload: Any = Field(None)


class SpecTool:
    """A tool made of a spec and an argument model whose body is not Python code of this
    process (a subprocess, the host); ``source`` says where it was declared."""

    __slots__ = ("arguments", "source", "spec")

    def __init__(self, spec: ToolSpec, arguments: ArgumentModel, *, source: str) -> None:
        self.spec = spec
        self.arguments = arguments
        self.source = source

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec.id!r}, source={self.source!r})"


class SubprocessTool(SpecTool):
    """An external tool: manifest plus executable speaking JSON on stdin/stdout.

    The child gets the validated arguments as one JSON object on stdin, the workspace root as
    its working directory, and a minimal environment: ``PATH``, ``LANG`` and only its declared
    secrets as ``STARGRAPH_SECRET_<NAME>`` (the parent's environment, which may hold API keys,
    is not inherited). On timeout its whole process group is killed.

    It prints one JSON value. An object with a ``summary`` key is read as
    ``{status, summary, payload}`` (``status`` ``"error"`` makes the call fail); any other
    value is the payload.
    """

    __slots__ = ()

    def __init__(self, spec: ToolSpec, arguments: ArgumentModel, *, source: str) -> None:
        if spec.executor != "subprocess" or spec.exec_path is None:
            raise ToolSpecError(
                [Problem(f"{source}#/runtime/exec_path", "a subprocess tool needs exec_path")],
                subject=f"tool manifest {source}",
            )
        super().__init__(spec, arguments, source=source)

    def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Run the executable once; raise on timeout, non-zero exit or unreadable output."""
        env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
        env.update({secret_env_name(name): value for name, value in ctx.secrets.items()})
        assert self.spec.exec_path is not None  # checked in __init__
        proc = subprocess.Popen(
            [self.spec.exec_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ctx.workspace.root,
            env=env,
            start_new_session=True,  # own process group, so a timeout kills grandchildren too
        )
        try:
            out, err = proc.communicate(orjson.dumps(args.json), timeout=ctx.remaining())
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ToolTimeoutError(
                f"tool {self.spec.id!r} ({self.spec.exec_path}) ran longer than "
                f"{self.spec.timeout_s}s and was killed (fix: raise timeout_ms in its manifest)"
            ) from None
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip()[-500:]
            raise ToolError(
                f"tool {self.spec.id!r} ({self.spec.exec_path}) exited with status "
                f"{proc.returncode}: {tail or '<no stderr>'}"
            )
        return _parse_external_output(self.spec, out)


def _parse_external_output(spec: ToolSpec, out: bytes) -> object:
    if not out.strip():
        return None
    try:
        value = orjson.loads(out)
    except orjson.JSONDecodeError as exc:
        raise ToolError(
            f"tool {spec.id!r} ({spec.exec_path}) printed invalid JSON on stdout: {exc} "
            "(fix: print exactly one JSON value)"
        ) from None
    if isinstance(value, dict) and "summary" in value:
        try:
            envelope = _ExternalOutput.model_validate(value)
        except ValidationError as exc:
            raise ToolError(
                f"tool {spec.id!r} printed a malformed result envelope: {exc}"
            ) from None
        if envelope.status == "error":
            raise ToolError(f"tool {spec.id!r} reported an error: {envelope.summary}")
        return ToolOutput(summary=envelope.summary, payload=envelope.payload)
    return value


def is_async_tool(candidate: Tool) -> bool:
    """Whether the arbiter must await ``candidate.execute``."""
    return inspect.iscoroutinefunction(candidate.execute)
