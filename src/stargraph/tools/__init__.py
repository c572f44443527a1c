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

from stargraph.tools._arbiter import Arbiter, PolicyHook, ToolCall
from stargraph.tools._artifacts import ArtifactStore, DirectoryArtifactStore, InMemoryArtifactStore
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
from stargraph.tools._locks import Lease, LockManager, LockRequest
from stargraph.tools._manifest import load_manifest
from stargraph.tools._registry import LoadReport, SkippedManifest, ToolRegistry, matches_allowlist
from stargraph.tools._result import FieldProblem, ToolFailure, ToolOutput, ToolResult, failure_of
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

if TYPE_CHECKING:
    from stargraph.tools._builtins import builtin_tools

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


def __getattr__(name: str) -> object:
    # The built-in tools build their argument models and pull in subprocess and urllib when
    # imported: only a registry that asks for them pays that.
    if name == "builtin_tools":
        from stargraph.tools._builtins import builtin_tools

        return builtin_tools
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
