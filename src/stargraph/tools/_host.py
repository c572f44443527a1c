"""Host-delegated tools: the arbiter's "execute (local or delegated)" step.

Some tools do not run in the agent's process: the seed's Choir delegates browsing
(Playwright) and memory (Postgres) to its host daemon with the ``EXECUTE_HOST_TOOL`` verb.
Here such a tool is a :class:`HostTool` (``executor="host"``): it has a spec and an argument
model but no body. The arbiter runs it like any other tool -- validate, allowlist, paths,
policies, acquire the whole lockset, execute, append to the commit log, release -- and its
execute step hands a :class:`HostRequest` to the :class:`ToolHost` given to
``Arbiter(host=...)``. Locks are held for the whole delegated call, the timeout is enforced
by the arbiter as for a local body, and the outcome is committed exactly as a local one.

Only host-executed tools see the host: a local tool's :class:`ToolContext` has
``host=None``. An arbiter without a host refuses a host tool before locking anything
(``host_unavailable``).

>>> from pydantic import BaseModel
>>> class EchoArgs(BaseModel):
...     text: str
>>> echo = host_tool(id="demo.echo@1.0.0", args_model=EchoArgs, description="Echo via host.")
>>> echo.spec.executor
'host'
>>> host = HostHandlers({"demo.echo": lambda request: request.args["text"].upper()})
>>> import tempfile
>>> from stargraph.tools import Arbiter, ToolCall, ToolRegistry
>>> with Arbiter(ToolRegistry.build(builtins=[echo]), workspace=tempfile.mkdtemp(),
...              host=host) as arbiter:
...     arbiter.dispatch(ToolCall(tool="demo.echo", args={"text": "hi"})).summary
'HI'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from pydantic import BaseModel

from stargraph.errors import Problem, ToolError, ToolSpecError
from stargraph.tools._result import Exposure
from stargraph.tools._schema import ArgumentModel, ValidatedArgs
from stargraph.tools._spec import SideEffect, ToolSpec
from stargraph.tools._tool import HostRequest, SpecTool, ToolContext, ToolHost

__all__ = ["HostHandler", "HostHandlers", "HostRequest", "HostTool", "ToolHost", "host_tool"]


HostHandler = Callable[[HostRequest], object]
"""A function serving one host-executed tool."""


class HostHandlers:
    """A :class:`ToolHost` routing each request to the handler registered for its tool name.

    Handlers are keyed by namespaced name (``choir.web.browse``), so one handler serves
    every version of a tool. Combine hosts with ``|``.
    """

    __slots__ = ("_handlers",)

    def __init__(self, handlers: Mapping[str, HostHandler] | None = None) -> None:
        self._handlers = dict(handlers or {})

    def __or__(self, other: HostHandlers | Mapping[str, HostHandler]) -> HostHandlers:
        more = other._handlers if isinstance(other, HostHandlers) else dict(other)
        clash = sorted(set(self._handlers) & set(more))
        if clash:
            raise ToolSpecError(
                [Problem(f"host/{name}", "two host handlers for one tool") for name in clash],
                subject="tool host",
            )
        return HostHandlers({**self._handlers, **more})

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._handlers))

    def __repr__(self) -> str:
        return f"HostHandlers({sorted(self._handlers)})"

    def execute_host_tool(self, request: HostRequest) -> object:
        """Call the handler registered for ``request.name``."""
        handler = self._handlers.get(request.name)
        if handler is None:
            raise ToolError(
                f"the tool host has no handler for {request.tool!r} (it serves "
                f"{sorted(self._handlers) or 'nothing'}); register one with "
                f"HostHandlers({{{request.name!r}: handler}})",
                node=request.node,
            )
        return handler(request)


class HostTool(SpecTool):
    """A tool executed by the host: spec and argument model, no body of its own.

    Only the arbiter runs it; its execute step delegates to the arbiter's :class:`ToolHost`
    (given to this call through ``ctx.host``).
    """

    __slots__ = ()

    def __init__(self, spec: ToolSpec, arguments: ArgumentModel, *, source: str) -> None:
        if spec.executor != "host":
            raise ToolSpecError(
                [Problem(f"{source}#/executor", "a host tool needs executor 'host'")],
                subject=f"tool {spec.id}",
            )
        super().__init__(spec, arguments, source=source)

    def execute(self, ctx: ToolContext, args: ValidatedArgs) -> object:
        """Hand the call to the host (the arbiter refuses it earlier when it has none)."""
        host = ctx.host
        if host is None:
            raise ToolError(
                f"tool {self.spec.id!r} is executed by the host, and this call has none "
                "(fix: pass Arbiter(host=...))",
                node=ctx.node,
            )
        request = HostRequest(
            tool=self.spec.id,
            name=self.spec.name,
            args=args.json,
            call_id=ctx.call_id,
            lane=ctx.lane,
            node=ctx.node,
            timeout_s=self.spec.timeout_s,
        )
        return host.execute_host_tool(request)


def host_tool(
    *,
    id: str,
    args_model: type[BaseModel],
    description: str | None = None,
    side_effect: SideEffect = "none",
    locks: tuple[str, ...] | list[str] = (),
    timeout_s: float = 30.0,
    idempotent: bool = False,
    network: bool = False,
    exposure: Exposure = "both",
    prompt_mask: bool = False,
) -> HostTool:
    """A :class:`HostTool` whose arguments are ``args_model`` (validated in the agent, before
    anything is locked or delegated). ``description`` defaults to the model's docstring.

    Secrets are not forwarded to the host: a host holds its own credentials.
    """
    arguments = ArgumentModel(args_model)
    text = description or (args_model.__doc__ or "").strip()
    where = f"{args_model.__qualname__} ({id})"
    if not text:
        raise ToolSpecError(
            [Problem(f"{id}#/description", "the tool has no description")],
            subject=f"tool {where}",
        )
    spec = ToolSpec(
        id=id,
        description=text,
        input_schema=arguments.json_schema,
        side_effect=side_effect,
        locks=tuple(locks),
        timeout_s=timeout_s,
        idempotent=idempotent,
        network=network,
        exposure=exposure,
        prompt_mask=prompt_mask,
        executor="host",
    )
    return HostTool(spec, arguments, source=f"{args_model.__module__}:{args_model.__qualname__}")
