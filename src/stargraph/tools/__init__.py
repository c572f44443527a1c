"""Tools: the only way an agent affects the world, through one audited path.

``ToolSpec`` (two views) -> ``@tool`` / manifests -> ``ToolRegistry`` (frozen) -> ``Arbiter``
(validate, allowlist, paths, policies, locks, execute, commit, release) -> ``ToolResult``.

>>> import tempfile
>>> from stargraph.tools import Arbiter, ToolCall, ToolRegistry, tool
>>> @tool(id="demo.add@1.0.0")
... def add(a: int, b: int) -> int:
...     '''Add two integers.'''
...     return a + b
>>> with Arbiter(ToolRegistry.build(builtins=[add]), workspace=tempfile.mkdtemp()) as arbiter:
...     arbiter.dispatch(ToolCall(tool="demo.add", args={"a": 1, "b": 2})).summary
'3'

How a ReAct ``act`` node calls the arbiter (one shared ``Arbiter`` per agent)::

    offered = registry.llm_tools(allowed=state_allowlist)      # request.tools for the model
    for tc in response.message.tool_calls:                     # structured channel only
        try:
            call = ToolCall.from_openai(tc, lane="core", node="act", allowed=state_allowlist)
            result = arbiter.dispatch(call)                    # or: await arbiter.adispatch(call)
        except ToolError as exc:                               # refused or failed: tell the model
            result = ToolResult.from_error(exc, call_id=tc.id)
        messages.append(result.to_tool_message("core"))        # honours exposure / prompt_mask
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stargraph import _lazy

if TYPE_CHECKING:
    from stargraph.tools._arbiter import Arbiter, PolicyHook, ToolCall
    from stargraph.tools._artifacts import (
        ArtifactStore,
        DirectoryArtifactStore,
        InMemoryArtifactStore,
    )
    from stargraph.tools._builtins import builtin_tools
    from stargraph.tools._canonical import GENESIS_HASH, canonical_json, content_ref, sha256_hex
    from stargraph.tools._commit import (
        CommitEntry,
        CommitHead,
        CommitLog,
        CommitRecord,
        InMemoryCommitLog,
        SqliteCommitLog,
        seal,
        verify_rows,
    )
    from stargraph.tools._host import (
        HostHandlers,
        HostRequest,
        HostTool,
        ToolHost,
        host_tool,
    )
    from stargraph.tools._langchain import from_langchain
    from stargraph.tools._locks import Lease, LockManager, LockRequest
    from stargraph.tools._manifest import load_manifest
    from stargraph.tools._mcp import McpListing, McpServer
    from stargraph.tools._registry import (
        LoadReport,
        SkippedManifest,
        ToolRegistry,
        matches_allowlist,
    )
    from stargraph.tools._result import (
        FieldProblem,
        ToolFailure,
        ToolOutput,
        ToolResult,
        failure_of,
    )
    from stargraph.tools._schema import ArgumentModel, ValidatedArgs, model_from_json_schema
    from stargraph.tools._spec import (
        LockTemplate,
        ToolId,
        ToolSpec,
        llm_name_for,
        parse_lock_template,
        tool_id_from_llm_name,
    )
    from stargraph.tools._tool import (
        AsyncPythonTool,
        PythonTool,
        Secrets,
        SubprocessTool,
        Tool,
        ToolContext,
        secret_env_name,
        tool,
    )
    from stargraph.tools._workspace import Workspace

__all__ = [
    "Arbiter",
    "ArgumentModel",
    "ArtifactStore",
    "AsyncPythonTool",
    "CommitEntry",
    "CommitHead",
    "CommitLog",
    "CommitRecord",
    "DirectoryArtifactStore",
    "FieldProblem",
    "GENESIS_HASH",
    "HostHandlers",
    "HostRequest",
    "HostTool",
    "InMemoryArtifactStore",
    "InMemoryCommitLog",
    "Lease",
    "LoadReport",
    "LockManager",
    "LockRequest",
    "LockTemplate",
    "McpListing",
    "McpServer",
    "PolicyHook",
    "PythonTool",
    "Secrets",
    "SkippedManifest",
    "SqliteCommitLog",
    "SubprocessTool",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolFailure",
    "ToolHost",
    "ToolId",
    "ToolOutput",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ValidatedArgs",
    "Workspace",
    "builtin_tools",
    "canonical_json",
    "content_ref",
    "failure_of",
    "from_langchain",
    "host_tool",
    "llm_name_for",
    "load_manifest",
    "matches_allowlist",
    "model_from_json_schema",
    "parse_lock_template",
    "seal",
    "secret_env_name",
    "sha256_hex",
    "tool",
    "tool_id_from_llm_name",
    "verify_rows",
]


# Each name is imported at its first read: a program that only reads results (a ToolResult,
# a ToolSpec) does not import the arbiter, the manifests or SQLite; the built-in tools, which
# pull in subprocess and urllib, only when a registry asks for them.
__getattr__, __dir__ = _lazy.exports(
    __name__,
    {
        "Arbiter": "._arbiter",
        "ArgumentModel": "._schema",
        "ArtifactStore": "._artifacts",
        "AsyncPythonTool": "._tool",
        "CommitEntry": "._commit",
        "CommitHead": "._commit",
        "CommitLog": "._commit",
        "CommitRecord": "._commit",
        "DirectoryArtifactStore": "._artifacts",
        "FieldProblem": "._result",
        "GENESIS_HASH": "._canonical",
        "HostHandlers": "._host",
        "HostRequest": "._host",
        "HostTool": "._host",
        "InMemoryArtifactStore": "._artifacts",
        "InMemoryCommitLog": "._commit",
        "Lease": "._locks",
        "LoadReport": "._registry",
        "LockManager": "._locks",
        "LockRequest": "._locks",
        "LockTemplate": "._spec",
        "McpListing": "._mcp",
        "McpServer": "._mcp",
        "PolicyHook": "._arbiter",
        "PythonTool": "._tool",
        "Secrets": "._tool",
        "SkippedManifest": "._registry",
        "SqliteCommitLog": "._commit",
        "SubprocessTool": "._tool",
        "Tool": "._tool",
        "ToolCall": "._arbiter",
        "ToolContext": "._tool",
        "ToolFailure": "._result",
        "ToolHost": "._host",
        "ToolId": "._spec",
        "ToolOutput": "._result",
        "ToolRegistry": "._registry",
        "ToolResult": "._result",
        "ToolSpec": "._spec",
        "ValidatedArgs": "._schema",
        "Workspace": "._workspace",
        "builtin_tools": "._builtins",
        "canonical_json": "._canonical",
        "content_ref": "._canonical",
        "failure_of": "._result",
        "from_langchain": "._langchain",
        "host_tool": "._host",
        "llm_name_for": "._spec",
        "load_manifest": "._manifest",
        "matches_allowlist": "._registry",
        "model_from_json_schema": "._schema",
        "parse_lock_template": "._spec",
        "seal": "._commit",
        "secret_env_name": "._tool",
        "sha256_hex": "._canonical",
        "tool": "._tool",
        "tool_id_from_llm_name": "._spec",
        "verify_rows": "._commit",
    },
)
