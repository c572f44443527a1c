"""The workspace root and path confinement (row B12).

Every path a file tool touches is resolved here. A path is refused when it is absolute, has a
``..`` component, or resolves (following symlinks) outside the root. ``..`` is refused even when
it would stay inside: a path that climbs is never what a well-behaved model means, and refusing
it keeps the rule easy to state.

Known limit: the check and the later ``open`` are two steps, so a process racing to swap a
directory for a symlink in between is not stopped; the workspace is assumed not to be shared
with a hostile writer.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from stargraph.errors import ToolNotAllowedError
from stargraph.tools._result import ToolFailure

__all__ = ["Workspace"]


@dataclass(frozen=True, slots=True)
class Workspace:
    """A directory the file tools are confined to. ``root`` is stored fully resolved."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> Workspace:
        """A workspace rooted at ``root`` (created if missing, then resolved)."""
        path = Path(root)
        path.mkdir(parents=True, exist_ok=True)
        return cls(path.resolve(strict=True))

    def resolve(self, path: str, *, tool: str = "", arg: str = "path") -> Path:
        """The absolute, symlink-free path for a workspace-relative ``path``.

        Raises :class:`ToolNotAllowedError` (code ``path_escape``) naming the tool, argument
        and path when it would leave the workspace.
        """
        return Path(self._resolve(path, tool, arg))

    def relative(self, path: str, *, tool: str = "", arg: str = "path") -> str:
        """The canonical workspace-relative POSIX form of ``path`` (``"."`` for the root).

        Used as the lock key, so ``a/./b`` and ``a/b`` (and a symlink to it) lock the same file.
        """
        resolved = self._resolve(path, tool, arg)
        root = str(self.root)
        if resolved == root:
            return "."
        return resolved[len(root.rstrip(os.sep)) + 1 :].replace(os.sep, "/")

    def _resolve(self, path: str, tool: str, arg: str) -> str:
        reason = self._escape_reason(path)
        if reason is None:
            root = str(self.root)
            candidate = _realpath_under(root, path)
            if candidate == root or candidate.startswith(root.rstrip(os.sep) + os.sep):
                return candidate
            reason = "it resolves outside the workspace through a symlink"
        hint = "pass a relative path inside the workspace without '..' or symlinks leaving it"
        message = (
            f"tool {tool!r} refused {arg}={path!r}: {reason}; the workspace root is the only "
            f"place file tools may touch (fix: {hint})"
        )
        error = ToolNotAllowedError(message)
        failure = ToolFailure(
            code="path_escape", tool=tool, message=message, hint=hint, details={"arg": arg}
        )
        setattr(error, "failure", failure)  # noqa: B010 -- errors.py classes take no extra fields
        raise error

    @staticmethod
    def _escape_reason(path: str) -> str | None:
        if not isinstance(path, str) or not path:
            return "it is empty"
        if "\x00" in path:
            return "it contains a NUL byte"
        if path.startswith(("/", "\\")) or os.path.isabs(path) or path[1:3] in (":/", ":\\"):
            return "it is absolute"
        if ".." in path.replace("\\", "/").split("/"):
            return "it contains '..'"
        return None


def _realpath_under(root: str, path: str) -> str:
    """``os.path.realpath(root/path)`` for a ``..``-free relative path under a resolved root.

    Walks only the components below ``root`` (``realpath`` would re-check every directory of
    the root itself) and falls back to ``realpath`` at the first symlink. Runs on every call
    of a file tool, hence the hand-written walk.
    """
    current = root.rstrip(os.sep) or os.sep
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    for index, part in enumerate(parts):
        candidate = os.path.join(current, part)
        try:
            mode = os.lstat(candidate).st_mode
        except (FileNotFoundError, NotADirectoryError):
            # Nothing below a missing component exists, so no symlink can follow.
            return os.path.join(candidate, *parts[index + 1 :])
        if stat.S_ISLNK(mode):
            return os.path.realpath(os.path.join(candidate, *parts[index + 1 :]))
        current = candidate
    return current
