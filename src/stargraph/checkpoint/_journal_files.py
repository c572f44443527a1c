"""Where ``SqliteStore`` keeps the journal of a step that is running: an append-only file a run.

A recorded call must be saved before the node goes on, so that a crash before its step
commits does not make it again. As a row of the database, each call cost a transaction of
its own (about 30 us in WAL mode) and a delete in the step's commit (about 25 us more); a
ReAct agent records two calls a step. Appended to a file, it costs one ``write`` (a few us),
and the commit of the step one more, of a frame saying that the step's entries are dead; the
file is rewritten with only its live entries when it has grown to :data:`COMPACT_AT` bytes.
Like a commit with ``synchronous="NORMAL"``, an appended call survives a crash of the
process (it is in the operating system's cache once ``write`` returns), not a power loss.

**Where.** The files are ``<database>-calls/<sha256 of the run id>``, beside the database's
``-wal`` and ``-shm`` files; a run's file goes when the run is done, and the folder when it
is empty. Being a folder, it outlives ``rm runs.db*``; so a file says whose it is.

**Whose.** A file's first frame, its header, names the database and the incarnation of the
run that wrote it: the database's random id (``meta.database_id``, made with its schema)
and the run's (``runs.incarnation``, made by ``create_run``). A file whose header names
another database (one deleted, whose folder stayed; a file copied in from elsewhere) or
another incarnation (the run was deleted and created again with the same id) is foreign: it
is never read, and the run's owner empties it before it appends. A database that creates
or migrates its schema also removes every file the folder holds, since none can be its own.

**Frames.** A frame is a head ``<length u32, step i64, kind u8, payload crc u32, head crc
u32>`` and then, for an entry, its payload as the database would store it
(``checkpoint._codec``). The head's CRC-32 covers the 17 bytes before it (the length
included), the payload's CRC-32 the payload: every byte of a file is under a checksum, so a
damaged length never moves where the next frame seems to start.

**Torn tail or damage.** A crash while a frame is written leaves a prefix of it at the end
of the file: fewer bytes than a head, or a head whose checksum matches and whose payload
runs past the end. That *torn tail* is read as a frame never written, and cut before the
next append: its call was made but its result never became durable, the same as after a
kill just before the ``write``, and the resume makes the call again (see
``docs/how-to/resume.md``). Anything else is *damage* and raises
:class:`~stargraph.errors.CorruptCheckpointError` naming the file and the byte, wherever it
is, the last frame included (a crash writes a prefix of a frame, never a whole frame with
other bytes): a checksum that does not match, a first frame that is not a header, a header
of another format, a kind this code does not know. Nothing of a damaged file is served, so
an entry is never dropped from between others nor served from another file. A file cut
short at a frame's end reads as the file a crash at that moment leaves (a prefix of its
entries): only a write of the database for every call could tell the two apart.

Only the run's owner (the holder of its lease) appends, so one process at a time writes a
file.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from stargraph.errors import CheckpointError, CorruptCheckpointError

__all__ = ["JournalFiles"]

_HEAD: Final = struct.Struct("<IqBII")
"""A frame's head: payload length, step, kind, CRC-32 of the payload, CRC-32 of the rest."""
_CHECKED: Final = struct.Struct("<IqBI")
"""The part of the head its own CRC covers: all of it but that CRC."""

MAGIC: Final = b"sgcalls\x02"
"""The start of a header's payload: the format of the file (the second: the first had no
header and left the length out of its checksum)."""

COMPACT_AT: Final = 1 << 18
"""A run's file is rewritten with only its live entries once it holds this many bytes (256
KiB: a few hundred calls of an agent; in between, a committed step's entries stay in it,
dead, behind the frame that says the step committed)."""

_ENTRY, _REPLACE, _COMMITTED, _HEADER = 0, 1, 2, 3
"""A frame's kind: an entry, an entry that replaces the one at its position, the commit of
its step (which makes the entries of that step before it dead), the file's header (its
first frame, and only that)."""

_NAME: Final = re.compile(r"[0-9a-f]{64}(\.new)?")
"""The names of the files a folder of journals holds (a run's, a compaction's new one)."""

Frame = tuple[int, int, bytes]
"""A frame as read: ``(step, kind, payload)``."""


@dataclass
class _Open:
    """A run's journal file as this store holds it open."""

    fd: int
    steps: set[int] = field(default_factory=set)
    """The steps this store appended entries of that have not committed since."""
    size: int = 0
    """The bytes this store appended since it opened or compacted the file."""


def _frame(step: int, kind: int, payload: bytes) -> bytes:
    """One frame as its file holds it."""
    head = _CHECKED.pack(len(payload), step, kind, zlib.crc32(payload))
    return b"".join((head, zlib.crc32(head).to_bytes(4, "little"), payload))


def _read(data: bytes, header: bytes | None, where: str, run_id: str) -> tuple[list[Frame], int]:
    """The frames of a journal file after its header, in the order they were written, and
    the bytes its whole frames span (less than the file's after a torn tail; 0 when it has
    no whole header). ``header`` is the payload the run's header must have (``None``: the
    database has no such run). A foreign file reads as no frames, spanning ``-1`` bytes; a
    damaged one raises ``CorruptCheckpointError`` (see the module docstring)."""
    frames: list[Frame] = []
    at, size = 0, len(data)
    while size - at >= _HEAD.size:
        length, step, kind, crc, head_crc = _HEAD.unpack_from(data, at)
        if zlib.crc32(data[at : at + _CHECKED.size]) != head_crc:
            raise _damaged(where, run_id, at, "the checksum of a frame's head does not match")
        end = at + _HEAD.size + length
        if end > size:
            break  # a torn tail: the checked head says the frame runs past the end
        payload = data[at + _HEAD.size : end]
        if zlib.crc32(payload) != crc:
            raise _damaged(where, run_id, at, "the checksum of a frame's payload does not match")
        if at == 0:
            if kind != _HEADER or not payload.startswith(MAGIC):
                raise _damaged(where, run_id, at, "it does not start with a header of this format")
            if payload != header:
                return [], -1
        elif kind not in (_ENTRY, _REPLACE, _COMMITTED):
            raise _damaged(where, run_id, at, f"a frame has the unknown kind {kind}")
        else:
            frames.append((step, kind, payload))
        at = end
    return frames, at


def _damaged(where: str, run_id: str, at: int, what: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"run {run_id!r}: the journal file {where} is damaged at byte {at} ({what}); nothing "
        "of it is read: delete the file to resume the run without it (the calls of its "
        "running step are then made again)",
        run_id=run_id,
    )


class JournalFiles:
    """The journal files of one store's runs (see the module docstring). Thread safe.

    ``incarnation(run_id)`` is the run's id as its row in the database keeps it (``None``
    when the database has no such run); :attr:`database` is set by the store to its own id
    before any file is read or written.
    """

    def __init__(
        self,
        folder: Path,
        fail: Callable[[OSError, Path], CheckpointError],
        incarnation: Callable[[str], bytes | None],
    ) -> None:
        self.folder = folder
        self.database = b""
        """The id of the database whose runs these files journal."""
        self._fail = fail
        self._incarnation = incarnation
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self._pid = os.getpid()
        # A forked child shares its parent's runs: it never empties a file on first use.
        self._forked = False

    def path(self, run_id: str) -> Path:
        """The journal file of ``run_id`` (named by a hash: a run id may hold any text)."""
        name = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()
        return self.folder / name

    def _header(self, run_id: str) -> bytes | None:
        """The header payload of the run's file, or ``None`` when the database has no such
        run (every file of that id is foreign)."""
        incarnation = self._incarnation(run_id)
        return None if incarnation is None else MAGIC + self.database + incarnation

    # ----------------------------------------------------------------- writing

    def append(self, run_id: str, step: int, payload: bytes, *, replace: bool, new: bool) -> None:
        """Append one entry of ``step``. ``new``: the run was created by this store, so no
        file of it can hold anything of it yet (whatever is there is emptied unread)."""
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
        """The run's file, opened to append on first use, its header written first."""
        if os.getpid() != self._pid:
            self._after_fork()
        held = self._open.get(run_id)
        if held is not None:
            return held
        # One thread opens the file: a second one would empty what the first appended.
        with self._lock:
            held = self._open.get(run_id)
            if held is None:
                fd = self._opened(run_id, new)
                held = self._open[run_id] = _Open(fd, size=os.fstat(fd).st_size)
        return held

    def _opened(self, run_id: str, new: bool) -> int:
        """The run's file open to append, ready for the next frame."""
        path = self.path(run_id)
        header = self._header(run_id) or MAGIC + self.database
        empty = new and not self._forked
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if empty else 0)
        try:
            self.folder.mkdir(exist_ok=True)
            fd = os.open(path, flags, 0o644)
            try:
                if empty:
                    os.write(fd, _frame(0, _HEADER, header))
                else:
                    self._adopt(fd, path, run_id, header)
            except BaseException:
                os.close(fd)
                raise
        except OSError as exc:
            raise self._fail(exc, path) from exc
        return fd

    @staticmethod
    def _adopt(fd: int, path: Path, run_id: str, header: bytes) -> None:
        """Make the file one that what is appended next reads in: cut a torn tail, and
        empty a foreign file (or one without a whole header) under a header of the run."""
        data = path.read_bytes()
        _, whole = _read(data, header, repr(str(path)), run_id)
        if whole <= 0:
            os.ftruncate(fd, 0)
            os.write(fd, _frame(0, _HEADER, header))
        elif whole < len(data):
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
        frame = _frame(step, _COMMITTED, b"")
        try:
            os.write(held.fd, frame)
        except OSError as exc:
            raise self._fail(exc, self.path(run_id)) from exc
        held.steps.discard(step)
        held.size += len(frame)
        if held.size >= COMPACT_AT:
            self._compact(run_id, held)

    def _compact(self, run_id: str, held: _Open) -> None:
        """Rewrite the run's file with only its header and live entries. Each way is
        atomic: the common case (none live) empties the file and writes the header again
        (a crash between leaves an empty file: nothing live, as before); otherwise a new
        file replaces it, and this store appends to that one from then on."""
        path = self.path(run_id)
        header = _frame(0, _HEADER, self._header(run_id) or MAGIC + self.database)
        try:
            live = _live(_read(path.read_bytes(), header[_HEAD.size :], repr(str(path)), run_id)[0])
            if not live:
                os.ftruncate(held.fd, 0)
                os.write(held.fd, header)
                held.size = len(header)
                return
            data = b"".join([header, *(_frame(*f) for f in live)])
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

    def sweep(self) -> None:
        """Remove every journal file in the folder, and the folder: the database is new (or
        new to journal identities), so none of them is of its runs."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._fail(exc, self.folder) from exc
        try:
            for name in names:
                if _NAME.fullmatch(name):
                    (self.folder / name).unlink(missing_ok=True)
            self.folder.rmdir()
        except OSError:
            pass  # the folder holds files of someone else's: they stay, and so does it

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
        ``(replace, payload)``: none from a foreign file."""
        path = self.path(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._fail(exc, path) from exc
        frames = _live(_read(data, self._header(run_id), repr(str(path)), run_id)[0])
        return [(kind == _REPLACE, payload) for at, kind, payload in frames if at == step]


def _live(frames: list[Frame]) -> list[Frame]:
    """The entry frames that no later commit frame of their step made dead."""
    live: list[Frame] = []
    for frame in frames:
        if frame[1] == _COMMITTED:
            live = [f for f in live if f[0] != frame[0]]
        else:
            live.append(frame)
    return live
