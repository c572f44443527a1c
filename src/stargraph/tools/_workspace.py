"""The workspace root and path confinement.

Every path a file tool touches is resolved here. A path is refused when it is absolute, has a
``..`` component, or resolves (following symlinks) outside the root. ``..`` is refused even when
it would stay inside: a path that climbs is never what a well-behaved model means, and refusing
it keeps the rule easy to state.

A regular file with more than one hard link is refused too, for reading as well as writing. A
hard link is a second name for the same file, and the other name may be outside the workspace
(``ln /etc/shadow-copy ws/notes.txt``): writing would change that outside file, and reading
would disclose it, exactly what a symlink leaving the root would do. Unlike a symlink, a hard
link does not say where its other names are, and finding them would mean scanning the whole
file system on every call, so the rule is the simple one: a file reachable through the
workspace must have only the name it has there. Tools that write create their files fresh
(one link); put files into a workspace by copying them, not with ``ln``.

A path the operating system cannot look up (a component longer than the file system allows,
an unreadable directory) is an argument error the model can correct, not a crash.

Known limit: the check and the later ``open`` are two steps, so a process racing to swap a
directory for a symlink (or to add a hard link) in between is not stopped; the workspace is
assumed not to be shared with a hostile writer.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from stargraph.errors import ToolArgumentError, ToolNotAllowedError
from stargraph.tools._result import FieldProblem, ToolFailure

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
        and path when it would leave the workspace or names a file with several hard links,
        and :class:`ToolArgumentError` (code ``invalid_arguments``) when the operating system
        cannot look it up (e.g. a component longer than the file system allows).
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
            try:
                candidate, links = _realpath_under(root, path)
            except OSError as exc:
                raise _unusable(path, tool, arg, exc) from None
            if candidate != root and not candidate.startswith(root.rstrip(os.sep) + os.sep):
                reason = "it resolves outside the workspace through a symlink"
            elif links > 1:
                reason = (
                    f"it is a file with {links} hard links, and another name of it may lie "
                    "outside the workspace (copy the file in instead of linking it)"
                )
            else:
                return candidate
        hint = "pass a relative path inside the workspace without '..' or symlinks leaving it"
        message = (
            f"tool {tool!r} refused {arg}={path!r}: {reason}; the workspace root is the only "
            f"place file tools may touch (fix: {hint})"
        )
        failure = ToolFailure(
            code="path_escape", tool=tool, message=message, hint=hint, details={"arg": arg}
        )
        raise ToolNotAllowedError(message, failure=failure)

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


def _unusable(path: str, tool: str, arg: str, exc: OSError) -> ToolArgumentError:
    """The typed error for a path the OS refuses to look up (too long, unreadable ...)."""
    why = exc.strerror or type(exc).__name__
    shown = path if len(path) <= 120 else path[:117] + "..."
    hint = "use shorter names (at most 255 bytes per component) and a readable directory"
    problem = f"the operating system cannot look it up: {why}"
    message = f"tool {tool!r} refused {arg}={shown!r}: {problem} (fix: {hint})"
    failure = ToolFailure(
        code="invalid_arguments",
        tool=tool,
        message=message,
        hint=hint,
        fields=(FieldProblem(field=arg, message=problem),),
    )
    return ToolArgumentError(message, failure=failure)


def _realpath_under(root: str, path: str) -> tuple[str, int]:
    """``os.path.realpath(root/path)`` for a ``..``-free relative path under a resolved root,
    and the hard-link count of the regular file it names (``0`` for anything else).

    Walks only the components below ``root`` (``realpath`` would re-check every directory of
    the root itself) and falls back to ``realpath`` at the first symlink. Runs on every call
    of a file tool, hence the hand-written walk; the link count comes from the same ``lstat``.
    Raises ``OSError`` when a component cannot be looked up (``ENAMETOOLONG``, ``EACCES``).
    """
    current = root.rstrip(os.sep) or os.sep
    parts = [part for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    info = None
    for index, part in enumerate(parts):
        candidate = os.path.join(current, part)
        try:
            info = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            # Nothing below a missing component exists, so no symlink can follow.
            return os.path.join(candidate, *parts[index + 1 :]), 0
        if stat.S_ISLNK(info.st_mode):
            resolved = os.path.realpath(os.path.join(candidate, *parts[index + 1 :]))
            return resolved, _file_links(resolved)
        current = candidate
    if info is None or not stat.S_ISREG(info.st_mode):
        return current, 0
    return current, info.st_nlink


def _file_links(path: str) -> int:
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    return info.st_nlink if stat.S_ISREG(info.st_mode) else 0
