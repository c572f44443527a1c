"""Where ``SqliteStore`` keeps the journal of a step that is running: an append-only file a run.

A recorded call must be saved before the node goes on, so that a crash before its step
commits does not make it again. As a row of the database, each call cost a transaction of
its own (about 30 us in WAL mode) and a delete in the step's commit (about 25 us more); a
ReAct agent records two calls a step. Appended to a file, it costs one ``write`` (a few us),
and the commit of the step one more, of a frame saying that the step's entries are dead; the
file is rewritten with only its live entries when it has grown to :data:`COMPACT_AT` bytes.
Like a commit with ``synchronous="NORMAL"``, an appended call survives a crash of the
process (it is in the operating system's cache once ``write`` returns), not a power loss.

The files are ``<database>-calls/<sha256 of the run id>``, beside the database's ``-wal`` and
``-shm`` files; a run's file goes when the run is done, and the folder when it is empty. A
file is a sequence of frames, each ``<length, crc, step, kind>`` then, for an entry, its
payload as the database would store it (``checkpoint._codec``). The CRC-32 covers the step,
the kind and the payload: a frame cut short by a power loss ends the file (it is dropped
when the file is next opened to append), and a damaged frame before others raises
``CorruptCheckpointError`` instead of decoding into other data. Only the run's owner (the
holder of its lease) appends, so one process at a time writes a file.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from stargraph.errors import CheckpointError, CorruptCheckpointError

__all__ = ["JournalFiles"]

_HEAD: Final = struct.Struct("<IIqB")
"""A frame's head: payload length, CRC-32 of the rest of the frame, step, kind."""
_CHECKED: Final = struct.Struct("<qB")
"""The part of the head the CRC covers, with the payload: step and kind."""


COMPACT_AT: Final = 1 << 18
"""A run's file is rewritten with only its live entries once it holds this many bytes (256
KiB: a few hundred calls of an agent; in between, a committed step's entries stay in it,
dead, behind the frame that says the step committed)."""

_ENTRY, _REPLACE, _COMMITTED = 0, 1, 2
"""A frame's kind: an entry, an entry that replaces the one at its position, the commit of
its step (which makes the entries of that step before it dead)."""


@dataclass
class _Open:
    """A run's journal file as this store holds it open."""

    fd: int
    steps: set[int] = field(default_factory=set)
    """The steps this store appended entries of that have not committed since."""
    size: int = 0
    """The bytes this store appended since it opened or compacted the file."""


def _frames(data: bytes, where: str, run_id: str) -> tuple[list[tuple[int, int, bytes]], int]:
    """The whole frames of a journal file, ``(step, kind, payload)`` in the order they were
    written, and the length they span (less than the file's after a frame cut short)."""
    frames: list[tuple[int, int, bytes]] = []
    at, size = 0, len(data)
    while at + _HEAD.size <= size:
        length, crc, step, flag = _HEAD.unpack_from(data, at)
        end = at + _HEAD.size + length
        if end > size:
            break  # cut short by a crash: the last frame
        payload = data[at + _HEAD.size : end]
        if zlib.crc32(payload, zlib.crc32(_CHECKED.pack(step, flag))) != crc:
            if end == size:
                break  # the last frame, written in part before a power loss
            raise CorruptCheckpointError(
                f"run {run_id!r}: the journal file {where} is damaged at byte {at} (its "
                "checksum does not match); delete the file to make the step's calls again "
                "on resume",
                run_id=run_id,
            )
        frames.append((step, flag, payload))
        at = end
    return frames, at


class JournalFiles:
    """The journal files of one store's runs (see the module docstring). Thread safe."""

    def __init__(self, folder: Path, fail: Callable[[OSError, Path], CheckpointError]) -> None:
        self.folder = folder
        self._fail = fail
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # A forked child shares its parent's runs: it never empties a file on first use.
        self._forked = False

    def path(self, run_id: str) -> Path:
        """The journal file of ``run_id`` (named by a hash: a run id may hold any text)."""
        name = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.folder / name

    # ----------------------------------------------------------------- writing

    def append(self, run_id: str, step: int, payload: bytes, *, replace: bool, new: bool) -> None:
        """Append one entry of ``step``. ``new``: the run was created by this store, so no
        file of it can hold anything yet (one left by an earlier database of the same name
        is emptied)."""
        held = self._held(run_id, new)
        frame = _frame(step, _REPLACE if replace else _ENTRY, payload)
        try:
            os.write(held.fd, frame)
        except OSError as exc:
            raise self._fail(exc, self.path(run_id)) from exc
        with self._lock:  # parallel tasks of one step append from their threads
            held.steps.add(step)
            held.size += len(frame)

    def _held(self, run_id: str, new: bool) -> _Open:
        """The run's file, opened to append on first use."""
        if os.getpid() != self._pid:
            self._after_fork()
        held = self._open.get(run_id)
        if held is not None:
            return held
        path = self.path(run_id)
        try:
            self.folder.mkdir(exist_ok=True)
            if new and not self._forked:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
            else:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                self._cut_torn_tail(fd, path, run_id)
        except OSError as exc:
            raise self._fail(exc, path) from exc
        with self._lock:
            held = self._open.setdefault(run_id, _Open(fd, size=os.fstat(fd).st_size))
        if held.fd != fd:  # another thread opened it meanwhile
            os.close(fd)
        return held

    @staticmethod
    def _cut_torn_tail(fd: int, path: Path, run_id: str) -> None:
        """Drop a last frame cut short by a crash, so that what is appended next reads."""
        data = path.read_bytes()
        _, whole = _frames(data, repr(str(path)), run_id)
        if whole < len(data):
            os.ftruncate(fd, whole)

    def committed(self, run_id: str, step: int, *, new: bool) -> None:
        """Step ``step`` of the run committed: its entries are dead. A frame saying so is
        appended (a ``write``, where emptying the file each step cost an ``ftruncate``, three
        times as long on ext4); the file is emptied once it holds :data:`COMPACT_AT` bytes.
        ``new``: this store wrote all the file holds, so it knows whether the step has
        entries there (an agent's observe step has none: nothing to write)."""
        held = self._open.get(run_id)
        if new and (held is None or step not in held.steps):
            return
        if held is None:
            path = self.path(run_id)
            if not path.exists():
                return
            held = self._held(run_id, new=False)
        try:
            os.write(held.fd, _frame(step, _COMMITTED, b""))
        except OSError as exc:
            raise self._fail(exc, self.path(run_id)) from exc
        held.steps.discard(step)
        held.size += _HEAD.size
        if held.size >= COMPACT_AT:
            self._compact(run_id, held)

    def _compact(self, run_id: str, held: _Open) -> None:
        """Rewrite the run's file with only its live entries. Each way is atomic: the
        common case (none live) empties the file; otherwise a new file replaces it, and this
        store appends to that one from then on."""
        path = self.path(run_id)
        try:
            live = _live(_frames(path.read_bytes(), repr(str(path)), run_id)[0])
            if not live:
                os.ftruncate(held.fd, 0)
                held.size = 0
                return
            data = b"".join(_frame(*f) for f in live)
            fresh = path.with_name(path.name + ".new")
            fresh.write_bytes(data)
            os.replace(fresh, path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise self._fail(exc, path) from exc
        os.close(held.fd)
        held.fd, held.size = fd, len(data)

    def holds(self, run_id: str) -> bool:
        """Whether this store has the run's file open (it appended to it)."""
        return run_id in self._open

    def finished(self, run_id: str) -> None:
        """The run is done: nothing of it will be resumed, so its file goes (and the folder,
        when that was the last one)."""
        self.forget(run_id)
        try:
            self.path(run_id).unlink(missing_ok=True)
            self.folder.rmdir()
        except OSError:
            pass  # the folder holds other runs' files (or was never made)

    def forget(self, run_id: str) -> None:
        """Close the run's file: another store may write it from now on (a resume, an
        interrupt's answer)."""
        with self._lock:
            held = self._open.pop(run_id, None)
        if held is not None:
            os.close(held.fd)

    def close(self) -> None:
        """Close every file this store holds open."""
        with self._lock:
            held, self._open = list(self._open.values()), {}
        if os.getpid() == self._pid:
            for h in held:
                os.close(h.fd)

    def _after_fork(self) -> None:
        # A forked child closes its copies of the parent's descriptors, not the parent's.
        with self._lock:
            held, self._open = list(self._open.values()), {}
            self._pid = os.getpid()
            self._forked = True
        for h in held:
            os.close(h.fd)

    # ----------------------------------------------------------------- reading

    def entries(self, run_id: str, step: int) -> list[tuple[bool, bytes]]:
        """The live entries of ``step`` in the order they were written, each as
        ``(replace, payload)``."""
        path = self.path(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._fail(exc, path) from exc
        frames = _live(_frames(data, repr(str(path)), run_id)[0])
        return [(kind == _REPLACE, payload) for at, kind, payload in frames if at == step]


def _live(frames: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """The entry frames that no later commit frame of their step made dead."""
    live: list[tuple[int, int, bytes]] = []
    for frame in frames:
        if frame[1] == _COMMITTED:
            live = [f for f in live if f[0] != frame[0]]
        else:
            live.append(frame)
    return live


def _frame(step: int, flag: int, payload: bytes) -> bytes:
    """One frame as its file holds it."""
    crc = zlib.crc32(payload, zlib.crc32(_CHECKED.pack(step, flag)))
    return _HEAD.pack(len(payload), crc, step, flag) + payload
