"""Built-in example tools, named as in the Choir seed so SkillSpec files that
list ``choir.fs.read`` resolve: ``choir.fs.read``, ``choir.fs.write``, ``choir.fs.search``
(workspace-bound), ``choir.exec`` (shell with timeout, in a bubblewrap sandbox) and
``choir.http.fetch``.

They use only the public tool API, like any third-party tool would.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from typing import Annotated, Any, Literal

from pydantic import Field

from stargraph.errors import ToolArgumentError, ToolError, ToolTimeoutError
from stargraph.tools._result import ToolFailure, ToolOutput
from stargraph.tools._sandbox import (
    INSTALL_HINT,
    SANDBOX_ENV,
    find_bwrap,
    sandbox_argv,
    sandbox_problem,
)
from stargraph.tools._tool import PythonTool, ToolContext, tool

__all__ = ["builtin_tools", "exec_tool", "fs_read", "fs_search", "fs_write", "http_fetch"]

logger = logging.getLogger("stargraph.tools")

_OUTPUT_LIMIT = 64_000
_SEARCH_FILE_LIMIT = 2_000_000
# Bounds on the free strings a model writes. They are in the schema the model is offered, so
# a server that constrains tool arguments with a grammar (llama.cpp does, with no token limit
# of its own) cannot let a runaway string fill the model's whole context.
_PATH_MAX = 1024
_URL_MAX = 2048
_PATTERN_MAX = 1000
_COMMAND_MAX = 8000


@tool(id="choir.fs.read@1.0.0", side_effect="read", locks=("file:{path}:S",), timeout_s=10)
def fs_read(
    ctx: ToolContext,
    path: Annotated[
        str, Field(max_length=_PATH_MAX, description="File path relative to the workspace root.")
    ],
    head: Annotated[int | None, Field(ge=1, description="Only the first N lines.")] = None,
    tail: Annotated[int | None, Field(ge=1, description="Only the last N lines.")] = None,
) -> ToolOutput:
    """Read a text file in the workspace, optionally only its first or last lines."""
    data = ctx.workspace.read_bytes(path, tool=ctx.tool).decode("utf-8", errors="replace")
    # Universal newlines, as a text-mode read gives them.
    text = data.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.splitlines(keepends=True)
    if head is not None:
        lines = lines[:head]
    if tail is not None:
        lines = lines[-tail:]
    content = "".join(lines)
    return ToolOutput(summary=f"read {len(lines)} lines from {path}", payload=content)


@tool(id="choir.fs.write@1.0.0", side_effect="write", locks=("file:{path}:X",), timeout_s=10)
def fs_write(
    ctx: ToolContext,
    path: Annotated[
        str, Field(max_length=_PATH_MAX, description="File path relative to the workspace root.")
    ],
    content: Annotated[str, Field(description="Text to write.")],
    mode: Annotated[
        Literal["overwrite", "append", "replace", "insert"],
        Field(
            description="overwrite or append the file; replace lines start_line..end_line "
            "with content; insert content before line start_line."
        ),
    ] = "overwrite",
    *,
    start_line: Annotated[
        int | None, Field(ge=1, description="First line (1-based) to replace or insert at.")
    ] = None,
    end_line: Annotated[
        int | None, Field(ge=1, description="Last line (1-based, inclusive) to replace.")
    ] = None,
) -> ToolOutput:
    """Write content to a file in the workspace: overwrite, append, or patch it by lines
    (replace a line range, insert at a line)."""
    if mode in ("overwrite", "append"):
        if start_line is not None or end_line is not None:
            raise ToolArgumentError(
                f"tool {ctx.tool!r}: mode {mode!r} writes the whole file and takes no "
                "start_line or end_line; drop them, or use mode 'replace' or 'insert'"
            )
        ctx.workspace.write_bytes(path, content.encode(), append=mode == "append", tool=ctx.tool)
        return ToolOutput(summary=f"{mode} {len(content.encode())} bytes to {path}")
    lines = ctx.workspace.read_bytes(path, tool=ctx.tool).splitlines(keepends=True)
    first, last = _line_range(ctx.tool, path, mode, len(lines), start=start_line, end=end_line)
    patch = content.encode()
    if patch and not patch.endswith((b"\n", b"\r")):
        patch += b"\n"  # the patch is whole lines: the line after it stays a line of its own
    if mode == "insert" and first > len(lines) and lines and not lines[-1].endswith((b"\n", b"\r")):
        lines[-1] += b"\n"  # inserting after an unterminated last line must not join the two
    lines[first - 1 : last] = [patch]
    ctx.workspace.write_bytes(path, b"".join(lines), tool=ctx.tool)
    count = len(patch.splitlines())
    if mode == "insert":
        return ToolOutput(summary=f"insert {count} lines at line {first} of {path}")
    return ToolOutput(summary=f"replace lines {first}-{last} of {path} with {count} lines")


def _line_range(
    tool: str, path: str, mode: str, total: int, *, start: int | None, end: int | None
) -> tuple[int, int]:
    """The 1-based ``(first, last)`` lines a patch replaces (``last = first - 1`` inserts
    before ``first``), or a :class:`~stargraph.errors.ToolArgumentError` saying which
    argument is wrong for a file of ``total`` lines."""
    where = f"tool {tool!r}: {path} has {total} lines"
    if start is None:
        raise ToolArgumentError(f"tool {tool!r}: mode {mode!r} needs start_line; pass it")
    if mode == "insert":
        if end is not None:
            raise ToolArgumentError(
                f"tool {tool!r}: mode 'insert' takes no end_line (it inserts before "
                "start_line); drop it, or use mode 'replace'"
            )
        if start > total + 1:
            raise ToolArgumentError(
                f"{where}; insert start_line={start} must be at most {total + 1} (the end)"
            )
        return start, start - 1
    if end is None:
        raise ToolArgumentError(f"tool {tool!r}: mode 'replace' needs end_line; pass it")
    if not start <= end <= total:
        raise ToolArgumentError(
            f"{where}; replace needs start_line <= end_line <= {total}, got "
            f"start_line={start}, end_line={end}"
        )
    return start, end


@tool(id="choir.fs.search@1.0.0", side_effect="read", locks=("file:{path}:S",), timeout_s=30)
def fs_search(
    ctx: ToolContext,
    pattern: Annotated[
        str, Field(max_length=_PATTERN_MAX, description="Python regular expression to look for.")
    ],
    path: Annotated[
        str, Field(max_length=_PATH_MAX, description="Directory or file to search.")
    ] = ".",
    max_results: Annotated[int, Field(ge=1, le=10_000)] = 100,
) -> ToolOutput:
    """Search files under a workspace path for a regular expression; return matching lines."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolArgumentError(f"tool {ctx.tool!r}: pattern is not a valid regex: {exc}") from exc
    hits: list[dict[str, Any]] = []
    # read_tree skips what the tools may not read: symlinks leading out, hard-linked files.
    for rel, data in ctx.workspace.read_tree(path, max_bytes=_SEARCH_FILE_LIMIT, tool=ctx.tool):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary files are not searchable text
        for number, line in enumerate(text.splitlines(), start=1):
            if regex.search(line):
                hits.append({"path": rel, "line": number, "text": line[:500]})
                if len(hits) >= max_results:
                    return ToolOutput(summary=f"{len(hits)}+ matches (truncated)", payload=hits)
    return ToolOutput(summary=f"{len(hits)} matches", payload=hits)


def _exec_tool(*, network: bool, unsandboxed: bool) -> PythonTool:
    """``choir.exec`` sandboxed by bubblewrap (see ``_sandbox``), or not with ``unsandboxed``."""
    where = (
        "WITHOUT a sandbox: it can read and write whatever the agent can"
        if unsandboxed
        else "in a sandbox: only the workspace is writable, the agent's processes and files "
        "outside it are not visible" + ("" if network else ", and there is no network")
    )

    @tool(
        id="choir.exec@1.0.0",
        description=f"Run a shell command in the workspace root ({where}); return its exit code "
        "and output.",
        side_effect="write",
        locks=("workspace:X",),
        timeout_s=60,
        network=network or unsandboxed,
    )
    def exec_tool(
        ctx: ToolContext,
        command: Annotated[
            str,
            Field(max_length=_COMMAND_MAX, description="Shell command, run in the workspace root."),
        ],
    ) -> ToolOutput:
        shell = ["/bin/sh", "-c", command]
        if unsandboxed:
            # The user's explicit choice; said in every result and in the log, not hidden.
            logger.warning("tool %s runs a command without a sandbox (unsandboxed)", ctx.tool)
            argv = shell
            # Minimal environment: the agent's API keys must not reach the command directly
            # (they are still in its parent's /proc entry, which only the sandbox hides).
            env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}
        else:
            bwrap = find_bwrap()
            problem = sandbox_problem(bwrap)
            if problem is not None or bwrap is None:
                raise _no_sandbox(ctx.tool, problem or "bubblewrap is missing")
            argv = sandbox_argv(bwrap, ctx.workspace.root, shell, network=network)
            env = dict(SANDBOX_ENV)
        proc = subprocess.Popen(
            argv,
            cwd=ctx.workspace.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=ctx.remaining())
        except subprocess.TimeoutExpired:
            # bwrap's command dies with it (--die-with-parent, and its PID namespace ends).
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise ToolTimeoutError(
                f"tool {ctx.tool!r}: command ran longer than {ctx.timeout_s}s and was killed"
            ) from None
        payload = {
            "exit_code": proc.returncode,
            "stdout": out.decode(errors="replace")[-_OUTPUT_LIMIT:],
            "stderr": err.decode(errors="replace")[-_OUTPUT_LIMIT:],
            "sandbox": "none" if unsandboxed else "bwrap",
        }
        note = " (unsandboxed)" if unsandboxed else ""
        return ToolOutput(summary=f"exit code {proc.returncode}{note}", payload=payload)

    return exec_tool


def _no_sandbox(tool_id: str, problem: str) -> ToolError:
    message = f"tool {tool_id!r} refused to run: {problem} (fix: {INSTALL_HINT})"
    failure = ToolFailure(
        code="tool_failed",
        tool=tool_id,
        message=message,
        hint=INSTALL_HINT,
        details={"sandbox": "unavailable"},
    )
    return ToolError(message, failure=failure)


exec_tool = _exec_tool(network=False, unsandboxed=False)


@tool(id="choir.http.fetch@1.0.0", side_effect="read", network=True, timeout_s=30)
def http_fetch(
    ctx: ToolContext,
    url: Annotated[str, Field(max_length=_URL_MAX, description="http:// or https:// URL.")],
    method: Literal["GET", "HEAD"] = "GET",
    max_bytes: Annotated[int, Field(ge=1, le=10_000_000)] = 1_000_000,
) -> ToolOutput:
    """Fetch a URL over HTTP(S) and return status, content type and (truncated) body text."""
    if not url.startswith(("http://", "https://")):
        raise ToolArgumentError(f"tool {ctx.tool!r}: url must start with http:// or https://")
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=max(ctx.remaining(), 0.01)) as response:
            status, headers, body = response.status, response.headers, response.read(max_bytes)
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, exc.headers, exc.read(max_bytes)
    payload = {
        "status": status,
        "content_type": headers.get("Content-Type", ""),
        "body": body.decode(errors="replace"),
    }
    return ToolOutput(summary=f"HTTP {status} from {url} ({len(body)} bytes)", payload=payload)


def builtin_tools(
    *, exec_network: bool = False, exec_unsandboxed: bool = False
) -> tuple[PythonTool, ...]:
    """The five built-in tools, for ``ToolRegistry.build(builtins=builtin_tools())``.

    ``choir.exec`` runs each command in a bubblewrap sandbox without network, and refuses to
    run where no sandbox can be made. ``exec_network=True`` gives the sandbox the network;
    ``exec_unsandboxed=True`` runs commands without any sandbox (every result then says
    ``"sandbox": "none"``). Either changes the tool's spec, so the registry digest tells the
    configurations apart.
    """
    shell = (
        exec_tool
        if not (exec_network or exec_unsandboxed)
        else _exec_tool(network=exec_network, unsandboxed=exec_unsandboxed)
    )
    return (fs_read, fs_write, fs_search, shell, http_fetch)
