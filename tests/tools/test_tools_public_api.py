"""The curated surface of ``stargraph.tools`` (STYLE 3) and its runnable docstrings (STYLE 10)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stargraph.tools


def test_tools_all_is_sorted_and_pinned() -> None:
    assert stargraph.tools.__all__ == sorted(stargraph.tools.__all__)
    assert stargraph.tools.__all__ == [
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


def test_every_public_name_is_documented() -> None:
    for name in stargraph.tools.__all__:
        obj = getattr(stargraph.tools, name)
        if callable(obj) and not name.isupper():
            assert obj.__doc__, f"stargraph.tools.{name} has no docstring"


MODULES = sorted(
    info.name for info in pkgutil.iter_modules(stargraph.tools.__path__, prefix="stargraph.tools.")
)


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name: str) -> None:
    module = importlib.import_module(module_name)
    failures, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert failures == 0
