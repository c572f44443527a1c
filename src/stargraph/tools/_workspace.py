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

Confinement is by file descriptor, not by path string. A lookup opens the root, then each
directory below it relative to the one before (``openat`` with ``O_NOFOLLOW``), so the kernel
never follows a symlink on the tools' behalf: a symlink met on the way is read and followed
here, against the root, and refused if it leads out. :meth:`Workspace.open` opens the last
component relative to its parent's descriptor the same way and checks the hard-link count on
the open file, so swapping a directory for a symlink (or adding a hard link) between the check
and the use cannot make a tool touch anything outside: the check and the use are one walk.
:meth:`Workspace.resolve` still returns a path, for display and for tools that need one; a
path handed to ``open()`` later is looked up again by the kernel, so file tools use
:meth:`~Workspace.open`, :meth:`~Workspace.read_bytes`, :meth:`~Workspace.write_bytes` and
:meth:`~Workspace.read_tree` instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from stargraph.errors import ToolArgumentError, ToolNotAllowedError
from stargraph.tools._result import FieldProblem, ToolFailure

__all__ = ["Workspace"]

# O_PATH: a directory on the way needs only search permission, as a path lookup does.
_DIR: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# The kernel's own limit on symlinks followed in one lookup (MAXSYMLINKS); it also bounds the
# retries when a racing writer keeps changing a component under the walk.
_MAX_HOPS: Final = 40
_SYMLINK_OUT: Final = "it resolves outside the workspace through a symlink"


class _Escape(Exception):
    """Internal signal: the walk met a symlink leading out (turned into a typed refusal)."""


@dataclass(slots=True)
class _Walk:
    """Where a walk stopped: open descriptors of the root and each directory below it."""

    fds: list[int]
    parts: list[str] = field(default_factory=list)
    # The last component (inside fds[-1]) and its lstat; name None means the root itself.
    name: str | None = None
    info: os.stat_result | None = None
    # When a directory on the way is missing: it and the components below it, and why.
    missing: list[str] | None = None
    error: OSError | None = None

    @property
    def canonical(self) -> list[str]:
        tail = self.missing if self.missing is not None else []
        return [*self.parts, *([self.name] if self.name is not None else []), *tail]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


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
        cannot look it up (e.g. a component longer than the file system allows). The path is
        right when returned; to open the file, use :meth:`open`, which cannot be raced.
        """
        return self.root.joinpath(*self._checked(path, tool, arg))

    def relative(self, path: str, *, tool: str = "", arg: str = "path") -> str:
        """The canonical workspace-relative POSIX form of ``path`` (``"."`` for the root).

        Used as the lock key, so ``a/./b`` and ``a/b`` (and a symlink to it) lock the same file.
        """
        return "/".join(self._checked(path, tool, arg)) or "."

    def open(
        self,
        path: str,
        flags: int = os.O_RDONLY,
        mode: int = 0o666,
        *,
        tool: str = "",
        arg: str = "path",
        parents: bool = False,
    ) -> int:
        """Open ``path`` inside the workspace and return the file descriptor (close it).

        ``flags`` and ``mode`` are those of :func:`os.open`; ``O_NOFOLLOW`` and ``O_CLOEXEC``
        are always added, and ``O_TRUNC`` is applied only after the hard-link check, so a
        refused file is left as it was. ``parents=True`` creates missing directories on the
        way (as ``mkdir -p``). Refusals are those of :meth:`resolve`; a missing file or a
        directory opened for writing raise the usual :class:`OSError`.
        """
        truncate = bool(flags & os.O_TRUNC)
        flags = (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(_MAX_HOPS):
            walk = self._walk(path, tool, arg, parents=parents)
            try:
                if walk.missing is not None:
                    error = walk.error or FileNotFoundError(errno.ENOENT, "No such file")
                    raise type(error)(error.errno, error.strerror, path)
                try:
                    fd = os.open(walk.name or ".", flags, mode, dir_fd=walk.fds[-1])
                except OSError as exc:
                    if exc.errno == errno.ELOOP:
                        continue  # turned into a symlink since the walk: walk it again
                    raise type(exc)(exc.errno, exc.strerror, path) from None
            finally:
                walk.close()
            try:
                self._check_links(os.fstat(fd), path, tool, arg)
            except ToolNotAllowedError:
                os.close(fd)
                raise
            if truncate:
                os.ftruncate(fd, 0)
            return fd
        raise _unusable(path, tool, arg, OSError(errno.ELOOP, os.strerror(errno.ELOOP)))

    def read_bytes(self, path: str, *, tool: str = "", arg: str = "path") -> bytes:
        """The contents of the file ``path``, opened with :meth:`open`."""
        # O_NONBLOCK: a FIFO planted in the workspace must not hang the tool on open.
        with os.fdopen(self.open(path, os.O_RDONLY | os.O_NONBLOCK, tool=tool, arg=arg), "rb") as f:
            return f.read()

    def write_bytes(
        self, path: str, data: bytes, *, append: bool = False, tool: str = "", arg: str = "path"
    ) -> None:
        """Write ``data`` to the file ``path`` (replacing it, or appended with ``append``),
        creating it and its missing parent directories; opened with :meth:`open`."""
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        with os.fdopen(self.open(path, flags, tool=tool, arg=arg, parents=True), "wb") as f:
            f.write(data)

    def read_tree(
        self, path: str, *, max_bytes: int | None = None, tool: str = "", arg: str = "path"
    ) -> Iterator[tuple[str, bytes]]:
        """``(relative path, contents)`` of every regular file at or under ``path``, sorted.

        Directory symlinks are not descended; a file symlink is read when it stays inside.
        Files the tools may not read (several hard links, a symlink leading out) and files
        larger than ``max_bytes``, unreadable or vanished are skipped, not raised: a search
        goes on past them. ``path`` itself is checked (and refused) as by :meth:`resolve`.
        """
        walk = self._walk(path, tool, arg)
        try:
            names = _tree(walk)
        finally:
            walk.close()
        return self._read_each(names, max_bytes, tool, arg)

    def _read_each(
        self, names: list[tuple[str, ...]], max_bytes: int | None, tool: str, arg: str
    ) -> Iterator[tuple[str, bytes]]:
        for parts in names:
            rel = "/".join(parts)
            try:
                fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK, tool=tool, arg=arg)
            except (ToolNotAllowedError, ToolArgumentError, OSError):
                continue
            with os.fdopen(fd, "rb") as handle:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    continue
                if max_bytes is not None and info.st_size > max_bytes:
                    continue
                try:
                    data = handle.read()
                except OSError:
                    continue
            yield rel, data

    # ----------------------------------------------------------------------- the walk

    def _checked(self, path: str, tool: str, arg: str) -> list[str]:
        """The canonical components of ``path``, refused as :meth:`resolve` says."""
        parts = _components(path.replace("\\", "/"))
        info: os.stat_result | None
        if len(parts) == 1 and _escape_reason(path) is None:
            # The common case, a name right under the root: an lstat by path is the same
            # lookup the walk would make (the root is symlink-free and the name's own link
            # is not followed), at a third of the system calls; this runs on every call.
            try:
                info = os.lstat(os.path.join(self.root, parts[0]))
            except FileNotFoundError:
                return parts
            except OSError as exc:
                raise _unusable(path, tool, arg, exc) from None
            if not stat.S_ISLNK(info.st_mode):
                self._check_links(info, path, tool, arg)
                return parts
        walk = self._walk(path, tool, arg)
        walk.close()
        self._check_links(walk.info, path, tool, arg)
        return walk.canonical

    def _check_links(self, info: os.stat_result | None, path: str, tool: str, arg: str) -> None:
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise self._refused(path, tool, arg, _links_reason(info.st_nlink))

    def _walk(self, path: str, tool: str, arg: str, *, parents: bool = False) -> _Walk:
        reason = _escape_reason(path)
        if reason is not None:
            raise self._refused(path, tool, arg, reason)
        try:
            walk = _Walk([os.open(self.root, _DIR)])
        except OSError as exc:
            raise _unusable(path, tool, arg, exc) from None
        try:
            self._descend(walk, _components(path.replace("\\", "/"))[::-1], parents)
        except _Escape:
            walk.close()
            raise self._refused(path, tool, arg, _SYMLINK_OUT) from None
        except OSError as exc:
            walk.close()
            raise _unusable(path, tool, arg, exc) from None
        return walk

    def _descend(self, walk: _Walk, pending: list[str], parents: bool) -> None:
        """Open each directory of ``pending`` (reversed components) below the last one open.

        Every open is relative to the previous directory's descriptor and refuses to follow
        a symlink; a symlink is read and its target pushed onto ``pending`` instead, so the
        walk never leaves the root's descriptor tree by the kernel's doing.
        """
        hops = 0
        while pending:
            part = pending.pop()
            if part == "..":  # only a symlink's target climbs, and only along our own stack
                if not walk.parts:
                    raise _Escape
                os.close(walk.fds.pop())
                walk.parts.pop()
                continue
            here = walk.fds[-1]
            if not pending:
                try:
                    info: os.stat_result | None = os.stat(part, dir_fd=here, follow_symlinks=False)
                except FileNotFoundError:
                    info = None
                if info is not None and stat.S_ISLNK(info.st_mode):
                    hops = self._follow(walk, part, pending, hops)
                    continue
                walk.name, walk.info = part, info
                return
            try:
                fd = os.open(part, _DIR, dir_fd=here)
            except FileNotFoundError as exc:
                if not parents:
                    walk.missing, walk.error = [part, *pending[::-1]], exc
                    return
                hops = _hop(hops)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=here)
                pending.append(part)
                continue
            except NotADirectoryError as exc:
                try:
                    kind = os.stat(part, dir_fd=here, follow_symlinks=False).st_mode
                except FileNotFoundError:  # gone since the open: look again
                    hops = _hop(hops)
                    pending.append(part)
                    continue
                if stat.S_ISLNK(kind):
                    hops = self._follow(walk, part, pending, hops)
                    continue
                if stat.S_ISDIR(kind):  # a directory since the open: look again
                    hops = _hop(hops)
                    pending.append(part)
                    continue
                walk.missing, walk.error = [part, *pending[::-1]], exc
                return
            walk.fds.append(fd)
            walk.parts.append(part)

    def _follow(self, walk: _Walk, part: str, pending: list[str], hops: int) -> int:
        hops = _hop(hops)
        try:
            target = os.readlink(part, dir_fd=walk.fds[-1])
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.EINVAL):
                raise
            pending.append(part)  # no longer a symlink: look at it again
            return hops
        if target.startswith("/"):
            inside = self._inside(target)
            if inside is None:
                raise _Escape
            while len(walk.fds) > 1:
                os.close(walk.fds.pop())
            walk.parts.clear()
            target = inside
        pending.extend(_components(target)[::-1])
        return hops

    def _inside(self, target: str) -> str | None:
        """``target`` (absolute) relative to the root, or ``None`` when it lies outside."""
        root = str(self.root).rstrip(os.sep)
        for candidate in (target, os.path.realpath(target)):
            if candidate == root or candidate.startswith(root + os.sep):
                return candidate[len(root) :]
        return None

    def _refused(self, path: str, tool: str, arg: str, reason: str) -> ToolNotAllowedError:
        hint = "pass a relative path inside the workspace without '..' or symlinks leaving it"
        message = (
            f"tool {tool!r} refused {arg}={path!r}: {reason}; the workspace root is the only "
            f"place file tools may touch (fix: {hint})"
        )
        failure = ToolFailure(
            code="path_escape", tool=tool, message=message, hint=hint, details={"arg": arg}
        )
        return ToolNotAllowedError(message, failure=failure)


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


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _hop(hops: int) -> int:
    if hops >= _MAX_HOPS:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    return hops + 1


def _links_reason(links: int) -> str:
    return (
        f"it is a file with {links} hard links, and another name of it may lie "
        "outside the workspace (copy the file in instead of linking it)"
    )


def _tree(walk: _Walk) -> list[tuple[str, ...]]:
    """The sorted names of the files at or under where ``walk`` stopped (unread, unchecked)."""
    base = tuple(walk.canonical)
    if walk.missing is not None or (walk.name is not None and walk.info is None):
        return []
    if walk.info is not None and not stat.S_ISDIR(walk.info.st_mode):
        return [base]
    try:
        top = os.open(walk.name or ".", _LIST, dir_fd=walk.fds[-1])
    except OSError:  # replaced since the walk, or unreadable: nothing to search
        return []
    found: list[tuple[str, ...]] = []
    stack = [(top, base)]
    while stack:
        fd, prefix = stack.pop()
        try:
            with os.scandir(fd) as entries:
                listed = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            for name, is_dir in listed:
                if not is_dir:
                    found.append((*prefix, name))
                    continue
                with contextlib.suppress(OSError):  # unreadable or replaced: skip it
                    stack.append((os.open(name, _LIST, dir_fd=fd), (*prefix, name)))
        except OSError:
            pass
        finally:
            os.close(fd)
    return sorted(found)


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
