"""Issue 25 (tools): exactly-once writes under timeouts, no starvation in adispatch, redaction
before truncation and of structured failures, typed errors for unusable paths and damaged
commit-log rows, an anchored commit-log head, deadlines that hold against bodies catching
``BaseException``, and hard links that cannot reach outside the workspace."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from stargraph.errors import (
    CommitLogCorruptError,
    ToolArgumentError,
    ToolError,
    ToolNotAllowedError,
    ToolTimeoutError,
)
from stargraph.tools import (
    GENESIS_HASH,
    Arbiter,
    CommitEntry,
    CommitHead,
    InMemoryCommitLog,
    SqliteCommitLog,
    ToolCall,
    ToolContext,
    ToolResult,
    Workspace,
    builtin_tools,
    failure_of,
    seal,
    sha256_hex,
    tool,
)
from stargraph.tools._canonical import canonical_json

ArbiterFactory = Callable[..., Arbiter]  # the make_arbiter fixture (conftest.py)

SECRET = "sk-live-0123456789abcdefghijklmnopqrstuv"


def _wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` (a bound, not a guess)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


def _args_hash(args: dict[str, Any]) -> str:
    return sha256_hex(canonical_json(args))


# --------------------------------------------------------------------------- item 5


@pytest.mark.parametrize("api", ["dispatch", "adispatch"])
def test_issue25_item5_an_abandoned_writer_keeps_its_lock_until_its_body_stops(
    make_arbiter: ArbiterFactory, workspace: Path, api: str
) -> None:
    """A write body that overruns its timeout keeps its X lock until it really returns, so a
    second writer cannot interleave; the log records the timeout, the late end, the second
    write, and the file holds what the last successful record wrote."""
    entered = threading.Event()
    release = threading.Event()
    first_done = threading.Event()

    @tool(
        id="demo.put@1.0.0",
        description="Write a file.",
        side_effect="write",
        locks=("file:{path}:X",),
        timeout_s=0.2,
    )
    def put(ctx: ToolContext, path: str, content: str) -> str:
        if content == "OLD":
            entered.set()
            release.wait(30)  # stands for slow work that ignores ctx.cancelled
        ctx.workspace.resolve(path, tool=ctx.tool).write_text(content)
        if content == "OLD":
            first_done.set()
        return content

    arbiter = make_arbiter(put, lock_timeout=30.0)

    def call(content: str) -> ToolResult:
        request = ToolCall(tool="demo.put", args={"path": "f.txt", "content": content})
        if api == "dispatch":
            return arbiter.dispatch(request)
        return asyncio.run(arbiter.adispatch(request))

    with pytest.raises(ToolTimeoutError, match="keeps its locks until its body returns"):
        call("OLD")
    assert entered.is_set()
    second: dict[str, Any] = {}

    def writer() -> None:
        try:
            second["result"] = call("NEW")
        except ToolError as exc:  # pragma: no cover - reported by the assertion below
            second["error"] = exc

    thread = threading.Thread(target=writer)
    thread.start()
    # The second writer queues behind the lock the abandoned body still holds (on the old
    # code it got the lock at once and finished).
    _wait_until(lambda: arbiter.locks.waiting == 1 or not thread.is_alive(), "second writer")
    assert arbiter.locks.waiting == 1, "the second writer was not made to wait"
    release.set()
    thread.join(30)
    assert first_done.wait(30)
    assert "error" not in second
    assert second["result"].status == "success"
    assert (workspace / "f.txt").read_text() == "NEW"
    records = arbiter.commit_log.records()
    assert [r.status for r in records] == ["timeout", "late_success", "success"]
    last_success = [r for r in records if r.status == "success"][-1]
    assert last_success.args_hash == _args_hash({"path": "f.txt", "content": "NEW"})
    assert arbiter.locks.snapshot() == {}
    assert arbiter.commit_log.verify_chain() is None


def test_issue25_item5_a_late_body_that_fails_is_recorded_as_late_error(
    make_arbiter: ArbiterFactory,
) -> None:
    release = threading.Event()
    done = threading.Event()

    @tool(id="demo.flaky@1.0.0", description="Fails late.", side_effect="write", timeout_s=0.1)
    def flaky() -> None:
        try:
            release.wait(30)
            raise OSError("disk gone")
        finally:
            done.set()

    arbiter = make_arbiter(flaky)
    with pytest.raises(ToolTimeoutError):
        arbiter.dispatch(ToolCall(tool="demo.flaky"))
    release.set()
    assert done.wait(30)
    _wait_until(lambda: len(arbiter.commit_log) == 2, "the late record")
    assert [r.status for r in arbiter.commit_log.records()] == ["timeout", "late_error"]


# --------------------------------------------------------------------------- item 7


def test_issue25_item7_adispatch_lock_waiters_do_not_starve_tool_bodies(
    make_arbiter: ArbiterFactory,
) -> None:
    """12 concurrent calls on one X lock with a 1 ms body all succeed, even when the loop's
    default executor has fewer threads than there are waiters (on the old code the waiters
    occupied every executor thread and the lock holder's body could not start)."""

    @tool(
        id="demo.tick@1.0.0",
        description="Short write.",
        side_effect="write",
        locks=("file:{path}:X",),
        timeout_s=5,
    )
    def tick(path: str, n: int) -> int:
        time.sleep(0.001)
        return n

    arbiter = make_arbiter(tick, lock_timeout=60.0)

    async def main() -> list[ToolResult | BaseException]:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=4))
        calls = [
            arbiter.adispatch(ToolCall(tool="demo.tick", args={"path": "one.txt", "n": n}))
            for n in range(12)
        ]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(main())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    payloads = [r.payload for r in results if isinstance(r, ToolResult)]
    assert sorted(p for p in payloads if isinstance(p, int)) == list(range(12))
    assert len(payloads) == 12
    assert arbiter.locks.snapshot() == {}
    assert arbiter.locks.waiting == 0


def test_issue25_item7_a_cancelled_async_waiter_leaves_nothing_queued() -> None:
    from stargraph.tools import LockManager, LockRequest

    locks = LockManager()
    held = locks.acquire([LockRequest("r", "X")], owner="holder")

    async def main() -> None:
        waiter = locks.acquire_async([LockRequest("r", "X")], owner="w", timeout=30)
        task = asyncio.ensure_future(waiter)
        while locks.waiting == 0:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert locks.waiting == 0
    locks.release(held)
    assert locks.snapshot() == {}


# --------------------------------------------------------------------------- item 11


def test_issue25_item11_a_secret_across_the_summary_cut_is_redacted_first(
    make_arbiter: ArbiterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(id="demo.echo@1.0.0", description="Echo.", secret_resources=("api_key",))
    def echo(ctx: ToolContext) -> str:
        # 270 characters, then the secret straddling the 280-character summary cut.
        return "x" * 270 + ctx.secrets["api_key"] + " and more"

    arbiter = make_arbiter(echo, secrets={"api_key": SECRET})
    with caplog.at_level(logging.DEBUG, logger="stargraph"):
        result = arbiter.dispatch(ToolCall(tool="demo.echo"))
    assert len(result.summary) == 280
    assert SECRET[:8] not in result.summary  # the old code cut first: 'sk-live-' leaked
    assert result.summary.startswith("x" * 270 + "[redacted")
    dumped = result.model_dump_json()
    assert SECRET[:8] not in dumped
    assert SECRET[:8] not in caplog.text


def test_issue25_item11_structured_tool_errors_are_redacted(
    make_arbiter: ArbiterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    @tool(id="demo.open@1.0.0", description="Open.", secret_resources=("api_key",))
    def open_secret(ctx: ToolContext) -> str:
        # A path built from a secret: Workspace.resolve refuses it with a structured failure
        # that quotes the path.
        ctx.workspace.resolve(f"../{ctx.secrets['api_key']}/x", tool=ctx.tool)
        return "unreachable"

    arbiter = make_arbiter(open_secret, *builtin_tools(), secrets={"api_key": SECRET})
    failures: list[BaseException] = []
    with caplog.at_level(logging.DEBUG, logger="stargraph"):
        with pytest.raises(ToolNotAllowedError) as inside:
            arbiter.dispatch(ToolCall(tool="demo.open"))
        failures.append(inside.value)
        # The same from the refusal path: the model itself sent the secret as a path.
        with pytest.raises(ToolNotAllowedError) as refused:
            arbiter.dispatch(ToolCall(tool="choir.fs.read", args={"path": f"../{SECRET}"}))
        failures.append(refused.value)
    for exc in failures:
        assert isinstance(exc, ToolError)
        assert failure_of(exc).code == "path_escape"
        texts = [
            str(exc),
            failure_of(exc).model_dump_json(),
            ToolResult.from_error(exc).model_dump_json(),
            str(exc.__cause__),
            str(exc.__context__),
        ]
        for text in texts:
            assert SECRET not in text
        assert "[redacted:api_key]" in str(exc)
        assert "[redacted:api_key]" in failure_of(exc).message
    assert SECRET not in caplog.text


# --------------------------------------------------------------------------- item 12


@pytest.mark.parametrize(
    ("tool_name", "args"),
    [
        ("choir.fs.read", {"path": "a" * 300}),
        ("choir.fs.write", {"path": "d/" + "a" * 300, "content": "x"}),
        ("choir.fs.search", {"pattern": "x", "path": "a" * 300}),
    ],
)
def test_issue25_item12_an_overlong_path_component_is_a_tool_error(
    make_arbiter: ArbiterFactory, workspace: Path, tool_name: str, args: dict[str, Any]
) -> None:
    (workspace / "d").mkdir()
    arbiter = make_arbiter(*builtin_tools())
    with pytest.raises(ToolArgumentError) as info:
        arbiter.dispatch(ToolCall(tool=tool_name, args=args))
    failure = failure_of(info.value)
    assert failure.code == "invalid_arguments"
    assert failure.fields[0].field == "path"
    assert "cannot look it up" in str(info.value)
    assert ToolResult.from_error(info.value).status == "invalid"
    assert arbiter.commit_log.records()[-1].status == "invalid"


def test_issue25_item12_workspace_resolve_types_os_errors(workspace: Path) -> None:
    with pytest.raises(ToolArgumentError, match="File name too long"):
        Workspace.at(workspace).resolve("a" * 300, tool="t")


def _damage(path: Path, sql: str, *params: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for trigger in ("commit_log_no_update", "commit_log_no_delete", "commit_log_anchor"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute(sql, params)
    conn.close()


def _entry(n: int, status: str = "success") -> CommitEntry:
    return CommitEntry(lane="core", tool="t.x@1.0.0", args_hash=str(n), status=status)


@pytest.mark.parametrize("value", ["garbage", '{"hash": "x"}', 42, 4.5])
def test_issue25_item12_a_non_blob_row_gives_a_typed_error_not_an_unopenable_log(
    tmp_path: Path, value: object
) -> None:
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path)
    for n in range(1, 4):
        log.append(_entry(n))
    log.close()
    _damage(path, "UPDATE commit_log SET record = ? WHERE seq = 3", value)

    reopened = SqliteCommitLog(path)  # the old code raised TypeError here
    assert reopened.verify_chain() == 3
    with pytest.raises(CommitLogCorruptError, match=r"row seq=3 of table commit_log") as info:
        reopened.records()
    assert str(path) in str(info.value)
    with pytest.raises(CommitLogCorruptError, match=r"row seq=3"):
        reopened.head()
    # Auditing goes on, chained so that the damage stays visible.
    record = reopened.append(_entry(4))
    assert record.seq == 4
    assert reopened.verify_chain() == 3
    reopened.close()


def test_issue25_item12_a_text_row_in_the_middle_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path)
    for n in range(1, 4):
        log.append(_entry(n))
    (row,) = sqlite3.connect(path).execute("SELECT record FROM commit_log WHERE seq = 2")
    log.close()
    # The very same JSON, stored as TEXT: never written by a log, so damage.
    _damage(path, "UPDATE commit_log SET record = ? WHERE seq = 2", bytes(row[0]).decode())
    reopened = SqliteCommitLog(path)
    assert reopened.verify_chain() == 2
    with pytest.raises(CommitLogCorruptError, match=r"row seq=2 of table commit_log holds a STR"):
        reopened.records()
    assert reopened.head().seq == 3
    reopened.close()


# --------------------------------------------------------------------------- item 13a


def _reseal(path: Path, *, edit_seq: int, anchor: bool) -> None:
    """What an attacker with file access does: rewrite one record and re-seal every record
    after it (the chain holds no secret), optionally also the in-file anchor."""
    conn = sqlite3.connect(path, isolation_level=None)
    rows = [bytes(r) for (r,) in conn.execute("SELECT record FROM commit_log ORDER BY seq")]
    prev = GENESIS_HASH if edit_seq == 1 else orjson.loads(rows[edit_seq - 2])["hash"]
    new_rows = rows[: edit_seq - 1]
    for seq in range(edit_seq, len(rows) + 1):
        body = orjson.loads(rows[seq - 1])
        fields = {k: body[k] for k in CommitEntry.model_fields}
        if seq == edit_seq:
            fields["status"] = "denied"  # the forged fact
        record, data = seal(CommitEntry(**fields), seq=seq, prev_hash=prev)
        prev = record.hash
        new_rows.append(data)
    conn.execute("DROP TRIGGER IF EXISTS commit_log_no_update")
    for seq, data in enumerate(new_rows, start=1):
        conn.execute("UPDATE commit_log SET record = ? WHERE seq = ?", (data, seq))
    if anchor:
        conn.execute("UPDATE commit_log_head SET record = ?", (new_rows[-1],))
    conn.close()


def test_issue25_item13_tail_truncation_is_detected_by_the_anchor(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path)
    for n in range(1, 5):
        last = log.append(_entry(n))
    head = CommitHead(seq=last.seq, hash=last.hash)
    log.close()
    _damage(path, "DELETE FROM commit_log WHERE seq >= 3")
    reopened = SqliteCommitLog(path)
    assert len(reopened) == 2
    assert reopened.verify_chain() == 3  # the old code said None: a shorter chain is valid
    assert reopened.verify_chain(expected_head=head) == 3
    assert reopened.head() == CommitHead(seq=2, hash=reopened.records()[1].hash)
    # An append after the truncation does not bless it.
    reopened.append(_entry(5))
    assert reopened.verify_chain() == 3
    reopened.close()


def test_issue25_item13_a_resealed_chain_is_detected_by_an_external_head(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path)
    for n in range(1, 5):
        log.append(_entry(n))
    head = log.head()  # kept outside the file by its owner
    log.close()
    _reseal(path, edit_seq=2, anchor=True)
    reopened = SqliteCommitLog(path)
    assert reopened.records()[1].status == "denied"
    # Documented limit: the unkeyed in-file anchor was rewritten too, so the file alone
    # looks intact ...
    assert reopened.verify_chain() is None
    # ... but the head held outside the file is no longer in the log.
    assert reopened.verify_chain(expected_head=head) == 4
    assert reopened.head() != head
    reopened.close()


def test_issue25_item13_a_keyed_anchor_detects_resealing_and_truncation(tmp_path: Path) -> None:
    key = b"k" * 32
    path = tmp_path / "log.db"
    log = SqliteCommitLog(path, key=key)
    for n in range(1, 5):
        log.append(_entry(n))
    assert log.verify_chain() is None
    log.close()
    _reseal(path, edit_seq=2, anchor=True)  # the attacker cannot compute the MAC
    assert SqliteCommitLog(path).verify_chain() is None  # opened without the key: blind
    keyed = SqliteCommitLog(path, key=key)
    assert keyed.verify_chain() == 4
    keyed.append(_entry(5))  # chained to a marker, not to the forged head
    assert keyed.verify_chain() == 5  # the break stays visible
    keyed.close()
    with pytest.raises(sqlite3.OperationalError):
        # Appending behind the log's back needs its SQL function (and then its key).
        sqlite3.connect(path).execute("INSERT INTO commit_log VALUES (99, x'00')")

    other = tmp_path / "other.db"
    log = SqliteCommitLog(other, key=key)
    for n in range(1, 5):
        log.append(_entry(n))
    log.close()
    _damage(other, "DELETE FROM commit_log WHERE seq = 4")
    conn = sqlite3.connect(other, isolation_level=None)
    (third,) = conn.execute("SELECT record FROM commit_log WHERE seq = 3").fetchone()
    conn.execute("UPDATE commit_log_head SET seq = 3, record = ?", (third,))  # MAC is stale
    conn.close()
    assert SqliteCommitLog(other, key=key).verify_chain() == 3
    assert SqliteCommitLog(other, key=b"wrong key" * 4).verify_chain() == 3


def test_issue25_item13_in_memory_log_has_a_head_and_checks_it() -> None:
    log = InMemoryCommitLog()
    assert log.head() == CommitHead(seq=0, hash=GENESIS_HASH)
    for n in range(1, 4):
        log.append(_entry(n))
    head = log.head()
    assert log.verify_chain(expected_head=head) is None
    del log._rows[-1]
    assert log.verify_chain() == 3
    assert log.verify_chain(expected_head=head) == 3


# --------------------------------------------------------------------------- item 13b

RAN: dict[str, Any] = {}


@tool(id="demo.sneaky@1.0.0", description="Swallows its deadline.", timeout_s=0.2)
def sneaky() -> str:
    try:
        time.sleep(30)
    except BaseException:
        RAN["swallowed"] = True
        return "sneaky"  # the old code returned this as a success after the deadline
    return "slept"


@tool(id="demo.stubborn@1.0.0", description="Swallows in a loop.", timeout_s=0.2)
def stubborn() -> str:
    for _ in range(40):  # about 20 s of work on the old code
        try:
            time.sleep(0.5)
        except BaseException:
            RAN["swallowed"] = RAN.get("swallowed", 0) + 1
    RAN["finished"] = True
    return "late"


@tool(id="demo.nested@1.0.0", description="Swallows in nested loops.", timeout_s=0.2)
def nested() -> str:
    def inner() -> None:
        for _ in range(10):
            try:  # noqa: SIM105 -- the point: a hand-written catch-all
                time.sleep(0.2)
            except BaseException:
                pass

    for _ in range(10):  # about 20 s of work on the old code
        try:  # noqa: SIM105 -- the point: a hand-written catch-all
            inner()
        except BaseException:
            pass
    RAN["finished"] = True
    return "late"


@pytest.mark.parametrize("body", [sneaky, stubborn, nested], ids=lambda t: t.spec.id)
def test_issue25_item13_a_body_catching_base_exception_cannot_overrun_its_deadline(
    make_arbiter: ArbiterFactory, body: Any
) -> None:
    RAN.clear()
    trace, profile = sys.gettrace(), sys.getprofile()

    @tool(id="demo.quick@1.0.0", description="Quick.", timeout_s=5)
    def quick() -> str:
        return "quick"

    arbiter = make_arbiter(body, quick)
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError, match=r"ran longer than 0\.2s; it was stopped"):
        arbiter.dispatch(ToolCall(tool=body.spec.id))
    assert time.monotonic() - started < 10.0  # nominally 0.2 s, or 0.7 s for the loops
    assert "finished" not in RAN
    assert [r.status for r in arbiter.commit_log.records()] == ["timeout"]
    # The main thread is usable afterwards, timer and all.
    assert arbiter.dispatch(ToolCall(tool="demo.quick")).summary == "quick"
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL
    assert (sys.gettrace(), sys.getprofile()) == (trace, profile)


# --------------------------------------------------------------------------- item 13c


@pytest.mark.parametrize(
    ("tool_name", "args"),
    [
        ("choir.fs.read", {"path": "notes.txt"}),
        ("choir.fs.write", {"path": "notes.txt", "content": "pwned"}),
        ("choir.fs.write", {"path": "notes.txt", "content": "pwned", "mode": "append"}),
    ],
)
def test_issue25_item13_a_hard_link_cannot_reach_a_file_outside(
    make_arbiter: ArbiterFactory,
    workspace: Path,
    tmp_path: Path,
    tool_name: str,
    args: dict[str, Any],
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("root:x:0:0\n")
    os.link(outside, workspace / "notes.txt")
    arbiter = make_arbiter(*builtin_tools())
    with pytest.raises(ToolNotAllowedError, match="2 hard links") as info:
        arbiter.dispatch(ToolCall(tool=tool_name, args=args))
    assert failure_of(info.value).code == "path_escape"
    assert outside.read_text() == "root:x:0:0\n"
    assert arbiter.commit_log.records()[-1].status == "denied"


def test_issue25_item13_search_skips_hard_linked_files(
    make_arbiter: ArbiterFactory, workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("root secret\n")
    os.link(outside, workspace / "linked.txt")
    (workspace / "own.txt").write_text("root of it\n")
    (workspace / "alias.txt").symlink_to(workspace / "linked.txt")
    arbiter = make_arbiter(*builtin_tools())
    result = arbiter.dispatch(ToolCall(tool="choir.fs.search", args={"pattern": "root"}))
    assert result.payload == [{"path": "own.txt", "line": 1, "text": "root of it"}]
    with pytest.raises(ToolNotAllowedError, match="hard links"):
        arbiter.dispatch(ToolCall(tool="choir.fs.read", args={"path": "alias.txt"}))
    # A file with a single name is fine, and a fresh write creates one.
    assert arbiter.dispatch(ToolCall(tool="choir.fs.read", args={"path": "own.txt"})).payload
    arbiter.dispatch(ToolCall(tool="choir.fs.write", args={"path": "new.txt", "content": "x"}))
    assert os.stat(workspace / "new.txt").st_nlink == 1


def test_issue25_item13_a_log_written_before_anchors_is_anchored_at_first_open(
    tmp_path: Path,
) -> None:
    """Trust on first use for unkeyed logs (documented); a keyed open of such a log cannot
    vouch for its head and says so."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE commit_log (seq INTEGER PRIMARY KEY, record BLOB NOT NULL)")
    prev = GENESIS_HASH
    for seq in range(1, 4):
        record, data = seal(_entry(seq), seq=seq, prev_hash=prev)
        conn.execute("INSERT INTO commit_log VALUES (?, ?)", (seq, data))
        prev = record.hash
    conn.close()
    copy = tmp_path / "copy.db"
    copy.write_bytes(path.read_bytes())

    keyed = SqliteCommitLog(copy, key=b"k" * 32)
    assert keyed.verify_chain() == 3  # no anchor the key could have made
    keyed.close()

    log = SqliteCommitLog(path)
    assert log.verify_chain() is None
    assert log.head() == CommitHead(seq=3, hash=prev)
    assert log.append(_entry(4)).prev_hash == prev
    assert log.verify_chain() is None
    log.close()
    _damage(path, "DELETE FROM commit_log WHERE seq = 4")
    assert SqliteCommitLog(path).verify_chain() == 4
