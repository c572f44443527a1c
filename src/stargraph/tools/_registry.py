"""``ToolRegistry``: every tool an agent may use, built once and frozen.

Load order is built-ins, then the global directory, then the agent directory. A tool in a
later scope replaces the tool of the same *name* (any version) from an earlier scope, and the
override is logged; two tools with one name in the *same* scope are an error naming both
sources, because which one wins would depend on file-system order.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NoReturn

from stargraph.errors import RegistryError, ToolArgumentError, ToolSpecError
from stargraph.tools._canonical import canonical_json, sha256_hex
from stargraph.tools._layers import LayerReport, SkippedFile, load_layers
from stargraph.tools._manifest import load_manifest
from stargraph.tools._result import ToolFailure
from stargraph.tools._spec import tool_id_from_llm_name
from stargraph.tools._tool import Tool

if TYPE_CHECKING:
    from stargraph.tools._mcp import McpServer

__all__ = ["LoadReport", "SkippedManifest", "ToolRegistry", "matches_allowlist"]

logger = logging.getLogger("stargraph.tools")


@dataclass(frozen=True, slots=True)
class SkippedManifest(SkippedFile):
    """A manifest left out by a non-strict build, with every reason."""


@dataclass(frozen=True, slots=True)
class LoadReport(LayerReport[SkippedManifest]):
    """What a build did: ids loaded, manifests skipped (non-strict), ids pruned by overrides,
    and how many manifest files were found on disk."""


@dataclass(frozen=True, slots=True)
class _Entry:
    tool: Tool
    scope: str
    source: str


class ToolRegistry:
    """Frozen mapping from tool name to :class:`Tool`. Build it with :meth:`build`."""

    __slots__ = ("_build", "_by_llm_name", "_by_name", "digest", "mcp_servers", "report")

    def __init__(
        self,
        entries: Mapping[str, _Entry],
        report: LoadReport,
        *,
        mcp_servers: tuple[McpServer, ...] = (),
        build: Mapping[str, Any] | None = None,
    ) -> None:
        self._by_name: Mapping[str, _Entry] = MappingProxyType(dict(sorted(entries.items())))
        self._by_llm_name: Mapping[str, Tool] = MappingProxyType(
            {e.tool.spec.llm_name: e.tool for e in self._by_name.values()}
        )
        self.report = report
        #: The MCP servers whose tools are registered (closed with the arbiter).
        self.mcp_servers = mcp_servers
        self._build = dict(build or {})
        #: sha256 over every spec: a new registry version has a new digest.
        self.digest = sha256_hex(
            canonical_json([e.tool.spec.spec_hash for e in self._by_name.values()])
        )

    # ----------------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        *,
        builtins: Iterable[Tool] = (),
        global_dir: str | os.PathLike[str] | None = None,
        agent_dir: str | os.PathLike[str] | None = None,
        strict: bool = True,
        mcp: Iterable[McpServer] = (),
    ) -> ToolRegistry:
        """Load built-ins, then ``global_dir``, then ``agent_dir`` (``*.json`` manifests).

        ``mcp`` servers add their tools to the built-ins' scope (``mcp.<server>.<tool>``):
        each server is listed now, started if its listing is not pinned.

        ``strict`` (the default) raises one :class:`ToolSpecError` listing every bad manifest;
        ``strict=False`` skips them and lists them in :attr:`report`. A name clash within one
        scope always raises :class:`RegistryError` naming both sources.
        """
        builtins = tuple(builtins)
        servers = tuple(mcp)
        given = [(t, getattr(t, "source", repr(t))) for t in builtins]
        given += [(t, t.source) for server in servers for t in server.tools()]
        layered = load_layers(
            given,
            [("global", global_dir), ("agent", agent_dir)],
            load=load_manifest,
            name_of=lambda tool: tool.spec.name,
            label_of=lambda tool: tool.spec.id,
            invalid=ToolSpecError,
            noun="tool",
            file_noun="tool manifest",
            subject="tool registry",
            strict=strict,
            logger=logger,
        )
        entries = {
            name: _Entry(placed.item, placed.scope, placed.source)
            for name, placed in layered.placed.items()
        }
        report = LoadReport(
            loaded=tuple(sorted(e.tool.spec.id for e in entries.values())),
            skipped=tuple(SkippedManifest(path, reasons) for path, reasons in layered.skipped),
            pruned=tuple(old.item.spec.id for old in layered.replaced),
            total_on_disk=layered.total_on_disk,
        )
        build = {
            "builtins": builtins,
            "global_dir": global_dir,
            "agent_dir": agent_dir,
            "strict": strict,
        }
        return cls(entries, report, mcp_servers=servers, build=build)

    def refreshed(self) -> ToolRegistry:
        """This registry, or a new one when an MCP server said its tools changed (a
        ``tools/list_changed`` notification): built from the same sources, servers listed
        again. The arbiter asks between steps, never inside one."""
        if not any(server.changed for server in self.mcp_servers):
            return self
        return type(self).build(mcp=self.mcp_servers, **self._build)

    def close(self) -> None:
        """Stop the MCP servers whose tools are registered (the arbiter's ``close``)."""
        for server in self.mcp_servers:
            server.close()

    def register(self, *_: Any, **__: Any) -> NoReturn:
        """Always raises: the registry is frozen once built."""
        raise RegistryError.at(
            "tool registry",
            "the registry is frozen after build",
            "build a new registry with ToolRegistry.build(...) including the tool",
            subject="tool registry",
        )

    # ----------------------------------------------------------------------- lookup

    def resolve(self, ref: str, *, node: str | None = None) -> Tool:
        """The tool for ``ref``: ``ns.name``, ``ns.name@version`` or an LLM function name.

        Raises :class:`ToolArgumentError` (code ``unknown_tool``) naming the tool and the
        closest registered names.
        """
        asked = ref
        by_llm = self._by_llm_name.get(ref)
        if by_llm is not None:
            return by_llm
        converted = tool_id_from_llm_name(ref)
        if converted is not None:
            ref = converted
        name, _, version = ref.partition("@")
        entry = self._by_name.get(name)
        if entry is not None and (not version or entry.tool.spec.version == version):
            return entry.tool
        if entry is not None:
            reason = f"version {version!r} is not loaded (loaded: {entry.tool.spec.id})"
        else:
            close = difflib.get_close_matches(name, list(self._by_name), n=3)
            reason = "no such tool" + (f"; did you mean {close}?" if close else "")
        hint = "call one of the tools offered in this step"
        # Named as asked, not as converted: the run state and the commit log record the
        # name the caller used, so an unknown tool reads the same everywhere.
        message = f"unknown tool {asked!r}: {reason} (fix: {hint})"
        failure = ToolFailure(code="unknown_tool", tool=asked, message=message, hint=hint)
        raise ToolArgumentError(message, node=node, failure=failure)

    def __contains__(self, ref: object) -> bool:
        if not isinstance(ref, str):
            return False
        name, _, version = ref.partition("@")
        entry = self._by_name.get(name)
        return entry is not None and (not version or entry.tool.spec.version == version)

    def __iter__(self) -> Iterator[Tool]:
        return (entry.tool for entry in self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"ToolRegistry({len(self)} tools, digest={self.digest[:12]})"

    @property
    def ids(self) -> tuple[str, ...]:
        """Every loaded tool id, sorted."""
        return tuple(entry.tool.spec.id for entry in self._by_name.values())

    def source_of(self, ref: str) -> str:
        """Where the tool came from (``module:qualname`` or manifest path)."""
        return self._by_name[self.resolve(ref).spec.name].source

    def llm_tools(self, allowed: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` parameter for ``allowed`` (every tool when ``None``)."""
        if allowed is None:
            return [tool.spec.llm_view() for tool in self]
        return [t.spec.llm_view() for t in self if matches_allowlist(t.spec.id, allowed)]


def matches_allowlist(tool_id: str, allowed: Iterable[str]) -> bool:
    """Whether ``tool_id`` is covered by an allowlist entry.

    An entry is an exact id (``ns.name@1.0.0``), a name matching any version (``ns.name``) or
    a namespace wildcard (``ns.*`` covers ``ns.a`` and ``ns.a.b``).
    """
    name = tool_id.partition("@")[0]
    for entry in allowed:
        if entry in (tool_id, name):
            return True
        if entry.endswith(".*") and name.startswith(entry[:-1]):
            return True
    return False
