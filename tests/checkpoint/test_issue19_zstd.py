"""Step rows of 1.5 KiB or more are stored as zstd frames; rows compressed with zlib before
still read back, and a frame that does not decode is named by run and step."""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import zstandard

from stargraph.checkpoint import SqliteStore, StepRecord, WriteRecord, _codec
from stargraph.checkpoint._codec import PACK_FROM, ZSTD, crc, decode, encode, unpack
from stargraph.errors import CorruptCheckpointError
from tests.checkpoint.test_compact_records import GRAPH  # a 1.8 KiB note a step

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _big_step(step: int, text: str = "") -> StepRecord:
    """A step whose JSON is well over ``PACK_FROM`` and compresses well."""
    writes = {"note": (text or f"step {step} ") + "abc" * PACK_FROM}
    return StepRecord(step=step, writes=(WriteRecord(node="jot", writes=writes),))


def _rows(path: Path) -> list[tuple[int, bytes]]:
    with sqlite3.connect(path) as conn:
        found = conn.execute("SELECT step, payload FROM steps ORDER BY step").fetchall()
    return [(step, bytes(payload)) for step, payload in found]


def _zlib_32k(text: bytes) -> bytes:
    """A row as the first compressing version wrote it (``zlib.compress``, level 1)."""
    return zlib.compress(text, 1)


def _zlib_4k(text: bytes) -> bytes:
    """A row as the version before this one wrote it (level 1, a 4 KiB window)."""
    packer = zlib.compressobj(1, zlib.DEFLATED, 12, 4)
    return packer.compress(text) + packer.flush()


def test_issue19_large_step_rows_are_zstd_frames_without_a_checksum(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    with SqliteStore(path) as store:
        GRAPH.compile(store=store, snapshot_every=4).invoke({}, run_id="n")
    packed = [payload for _, payload in _rows(path) if payload[:1] != b"{"]
    assert packed, "steps of ~2 KiB are stored compressed"
    for payload in packed:
        assert payload[:4] == ZSTD_MAGIC
        frame = zstandard.get_frame_parameters(payload)
        # The row's CRC-32 covers the frame; the content size lets the reader size its output.
        assert not frame.has_checksum
        assert frame.content_size == len(unpack(payload))


def test_issue19_encode_packs_with_zstd_and_decode_reads_it_back() -> None:
    step = _big_step(3)
    plain = encode(step, run_id="r", step=3)
    packed = encode(step, run_id="r", step=3, pack=True)
    assert packed[:1] == ZSTD
    assert len(packed) * 10 < len(plain) * 9
    assert unpack(packed) == plain
    assert decode(StepRecord, packed, run_id="r", step=3, table="steps", crc=crc(packed)) == step


def test_issue19_zlib_rows_of_both_windows_read_back_beside_zstd_ones(tmp_path: Path) -> None:
    """A file holding rows of every encoding (zlib ``x`` and ``H``, zstd, plain JSON) reads
    back as it was written."""
    path = tmp_path / "n.db"
    with SqliteStore(path) as store:
        GRAPH.compile(store=store, snapshot_every=4).invoke({}, run_id="n")
        before = store.get_steps("n")
    olds: list[Callable[[bytes], bytes]] = [_zlib_32k, _zlib_4k]
    with sqlite3.connect(path) as conn:
        packed = [(step, raw) for step, raw in _rows(path) if raw[:1] == ZSTD]
        assert len(packed) >= 3
        for (step, raw), old in zip(packed, olds, strict=False):
            rewritten = old(unpack(raw))
            conn.execute(
                "UPDATE steps SET payload = ?, crc = ? WHERE step = ?",
                (rewritten, zlib.crc32(rewritten), step),
            )
    assert {raw[:1] for _, raw in _rows(path)} == {b"x", b"H", ZSTD, b"{"}
    with SqliteStore(path) as store:
        assert store.get_steps("n") == before


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda frame: frame[:-5], id="truncated"),
        pytest.param(lambda frame: ZSTD_MAGIC + b"\xff" * 12, id="bad-header"),
        pytest.param(
            lambda frame: zstandard.ZstdCompressor(write_content_size=False).compress(
                unpack(frame)
            ),
            id="no-content-size",
        ),
        pytest.param(
            # single segment, an 8-byte content size of 2**50 bytes, then an empty raw block
            lambda frame: ZSTD_MAGIC + b"\xe0" + (2**50).to_bytes(8, "little") + b"\x01\x00\x00",
            id="absurd-content-size",
        ),
    ],
)
def test_issue19_a_zstd_frame_that_does_not_decode_names_run_and_step(
    tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    """The CRC was written for the damaged bytes (a deliberate edit, or damage before the
    checksum was taken): the frame itself fails, and says where."""
    path = tmp_path / "n.db"
    with SqliteStore(path) as store:
        GRAPH.compile(store=store, snapshot_every=4).invoke({}, run_id="n")
    step, frame = next((s, p) for s, p in _rows(path) if p[:1] == ZSTD)
    damaged = damage(frame)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE steps SET payload = ?, crc = ? WHERE step = ?",
            (damaged, zlib.crc32(damaged), step),
        )
    with (
        SqliteStore(path) as store,
        pytest.raises(CorruptCheckpointError, match=rf"run 'n' step {step}: the steps row") as err,
    ):
        store.get_steps("n")
    assert (err.value.run_id, err.value.step) == ("n", step)


def test_issue19_a_damaged_zstd_row_fails_its_checksum(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    with SqliteStore(path) as store:
        GRAPH.compile(store=store, snapshot_every=4).invoke({}, run_id="n")
    step, frame = next((s, p) for s, p in _rows(path) if p[:1] == ZSTD)
    damaged = frame[:20] + bytes([frame[20] ^ 0x01]) + frame[21:]
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE steps SET payload = ? WHERE step = ?", (damaged, step))
    with (
        SqliteStore(path) as store,
        pytest.raises(CorruptCheckpointError, match=rf"run 'n' step {step}: .*checksum"),
    ):
        store.get_steps("n")


def _round_trips_on_four_threads(steps: list[StepRecord]) -> dict[int, object]:
    """Encode and decode ``steps`` on four threads, the first four rows at once; the
    compressor each thread used, by thread."""
    contexts: dict[int, object] = {}
    start = threading.Barrier(4, timeout=30)

    def round_trip(step: StepRecord) -> StepRecord:
        if step.step < 4:
            start.wait()
        payload = encode(step, run_id="t", step=step.step, pack=True)
        assert contexts.setdefault(threading.get_ident(), _codec._packer()) is _codec._packer()
        return decode(
            StepRecord, payload, run_id="t", step=step.step, table="steps", crc=crc(payload)
        )

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(round_trip, steps)) == steps
    return contexts


def test_issue19_threads_compress_and_decompress_at_once() -> None:
    """A zstd context may not serve two threads at once: rows encoded and decoded on many
    threads together all come back whole, and each thread compresses with its own context."""
    steps = [_big_step(i, text=f"thread row {i} " * (i % 7 + 1)) for i in range(64)]
    for _ in range(5):
        contexts = _round_trips_on_four_threads(steps)
        assert len({id(context) for context in contexts.values()}) == len(contexts) == 4
