"""How the SQL stores encode records: JSON without default-valued fields, step rows from
1.5 KiB zstd-compressed when that saves a tenth, a CRC-32 beside every payload.

``SqliteStore`` and ``PostgresStore`` write the same bytes, so a payload moves between them
unchanged. Payloads are the records' JSON with default-valued fields left out (they come back
on decoding), which keeps a step of a plain chain under a hundred bytes. A compressed payload
is a zstd frame at level 1 (it starts with ``(``, the first byte of the frame's magic
number); rows written before are zlib streams (``x`` or ``H``) and still read back; JSON text
starts with ``{``. The CRC detects damage, not deliberate edits: a damaged row raises
``CorruptCheckpointError`` naming run and step instead of decoding into other data.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from typing import Final, TypeVar

import pydantic_core
import zstandard
from pydantic import BaseModel, ValidationError

from stargraph._typed import validate_json_raw
from stargraph.errors import CheckpointError, CorruptCheckpointError

__all__ = [
    "PACK_FROM",
    "PACKED",
    "ZLIB",
    "ZSTD",
    "crc",
    "decode",
    "encode",
    "encode_extra",
    "unpack",
    "why",
]

PACK_FROM: Final = 1536
"""Step payloads from this many bytes are stored zstd-compressed when that saves a tenth.

Measured on a 200-call ReAct run (rows of 0.4 to 3.2 KiB; instructions of the whole run,
file bytes): from 1.5 KiB on, the short rows (an observation step's) stay plain and the long
ones shrink by half. From 1 KiB on cost 2% more instructions for a sixth fewer bytes; from
2 KiB on saved 3.5% of them for a quarter more bytes."""

ZSTD: Final = b"("
"""The first byte of a zstd frame (its magic number ``0xFD2FB528``, written little-endian):
how rows are compressed now."""

ZLIB: Final = (b"x", b"H")
"""The first byte of a zlib stream, how rows were compressed before (its window size: ``x``
32 KiB, ``H`` 4 KiB)."""

PACKED: Final = (ZSTD, *ZLIB)
"""The first bytes of a compressed payload; JSON text starts with ``{``."""

# zstd contexts are reused (setting one up costs about as much as compressing a 2 KiB row),
# and one may not be used by two threads at once: each thread gets its own pair.
_contexts = threading.local()

_RecordT = TypeVar("_RecordT", bound=BaseModel)


def encode(record: BaseModel, *, run_id: str, step: int, pack: bool = False) -> bytes:
    """``record`` as stored (``pack``: compressed when large and worth it)."""
    # pydantic's serializer writes the same JSON as orjson, a little faster, and also takes
    # integers beyond 64 bits, which the in-memory store accepts too. Called directly, it
    # gives the bytes of model_dump_json(exclude_defaults=True).encode() without that
    # method's keyword plumbing and the decode/encode round trip (a third of its cost on a
    # small step; every step of a durable run pays it).
    try:
        payload = type(record).__pydantic_serializer__.to_json(record, exclude_defaults=True)
        if pack and len(payload) >= PACK_FROM:
            # An agent's step repeats what it read (a tool result is in the call's record,
            # in the state write and in the next request's delta): zstd level 1 takes that
            # out for a few us per KiB-sized row. Shorter rows (a plain chain's) stay plain.
            # It makes a 2 KiB row about as small as zlib level 1 did (3% larger) in a third
            # of the time, and reads it back in half. Negative levels are faster still but
            # leave the literals unencoded: hex digests in tool results then stay twice as
            # large. The frame keeps its content size (the decompressor sizes its output
            # from it) but no checksum of its own: the row's CRC-32 covers it.
            packed = _packer().compress(payload)
            if len(packed) * 10 < len(payload) * 9:
                return packed
        return payload
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"run {run_id!r} step {step}: cannot store {type(record).__name__} as JSON "
            f"({exc}); node writes and journal values must be JSON data",
            run_id=run_id,
            step=step,
        ) from exc


def _packer() -> zstandard.ZstdCompressor:
    """This thread's zstd compressor (level 1, no frame checksum)."""
    try:
        packer: zstandard.ZstdCompressor = _contexts.packer
    except AttributeError:
        packer = _contexts.packer = zstandard.ZstdCompressor(level=1, write_checksum=False)
    return packer


def unpack(payload: bytes) -> bytes:
    """A compressed payload's JSON: a zstd frame, or a zlib stream written before."""
    if payload[:1] != ZSTD:
        return zlib.decompress(payload)
    try:
        unpacker: zstandard.ZstdDecompressor = _contexts.unpacker
    except AttributeError:
        unpacker = _contexts.unpacker = zstandard.ZstdDecompressor()
    try:
        return unpacker.decompress(payload)
    except MemoryError as exc:
        # The output is allocated from the size the frame states: a damaged size field can
        # ask for more memory than there is.
        claimed = zstandard.frame_content_size(payload)
        raise zstandard.ZstdError(f"the zstd frame claims {claimed:,} bytes") from exc


def encode_extra(
    error: str | None,
    stopped_by: str | None,
    interrupt: object,
    *,
    run_id: str,
    stop_reason: str | None = None,
) -> bytes | None:
    """The runs row's ``extra`` column: the status fields that are set, or ``None``."""
    if error is None and stopped_by is None and interrupt is None and stop_reason is None:
        return None
    extra = {
        "error": error,
        "stopped_by": stopped_by,
        "stop_reason": stop_reason,
        "interrupt": interrupt,
    }
    try:
        return pydantic_core.to_json({k: v for k, v in extra.items() if v is not None})
    except (pydantic_core.PydanticSerializationError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"run {run_id!r}: cannot store the interrupt payload as JSON ({exc}); "
            "pass JSON data to ctx.interrupt()",
            run_id=run_id,
        ) from exc


def why(exc: Exception) -> str:
    """One line saying why a row did not decode (the first validation error's place)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the row"
        return f"{where}: {first['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


crc: Final[Callable[[bytes], int]] = zlib.crc32
"""The checksum stored next to a payload (CRC-32: ~1 GB/s, so ~0.1 us for a small step;
it detects damage, not deliberate edits). zlib's function itself: every step commit and
journal row calls it, and a wrapper would add a Python frame to each."""


def decode(
    model: type[_RecordT],
    payload: object,
    *,
    run_id: str,
    step: int,
    table: str,
    crc: object = None,
) -> _RecordT:
    """A stored payload back as ``model``, checked against its ``crc`` (``None``: rows
    written before checksums) and its step; ``CorruptCheckpointError`` when it is not."""
    if crc is not None and isinstance(payload, bytes) and zlib.crc32(payload) != crc:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the {table} row fails its checksum (CRC-32 "
            f"{zlib.crc32(payload)} stored as {crc}); the checkpoint was damaged after it was "
            "written; fork the run from an earlier step",
            run_id=run_id,
            step=step,
        )
    try:
        if not isinstance(payload, bytes | str):
            raise TypeError(f"payload is {type(payload).__name__}, not JSON text")
        if isinstance(payload, bytes) and payload[:1] in PACKED:
            payload = unpack(payload)
        record = validate_json_raw(model, payload)
    except (ValidationError, TypeError, zlib.error, zstandard.ZstdError) as exc:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the {table} row cannot be decoded as a "
            f"{model.__name__} ({why(exc)}); the checkpoint file is damaged "
            "or was written by an incompatible version; fork the run from an earlier step",
            run_id=run_id,
            step=step,
        ) from exc
    if getattr(record, "step", step) != step:
        raise CorruptCheckpointError(
            f"run {run_id!r} step {step}: the {table} row holds step "
            f"{getattr(record, 'step', None)}; the checkpoint file is damaged",
            run_id=run_id,
            step=step,
        )
    return record
