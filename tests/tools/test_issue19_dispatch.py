"""One dispatch's lease and records: each is what the constructors make of the same values,
and the work done once per tool must not be redone per call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
from pydantic import BaseModel

from stargraph.errors import ToolError, ToolNotAllowedError
from stargraph.llm import ToolCall as LlmToolCall
from stargraph.tools import (
    GENESIS_HASH,
    Arbiter,
    CommitEntry,
    CommitLog,
    CommitRecord,
    InMemoryCommitLog,
    Lease,
    LockManager,
    LockRequest,
    SqliteCommitLog,
    ToolCall,
    ToolResult,
    canonical_json,
    llm_name_for,
    seal,
    tool,
    verify_rows,
)

ArbiterFactory = Callable[..., Arbiter]
_ENTRY_FIELDS: Final = set(CommitEntry.model_fields)


@tool(id="demo.echo@1.0.0")
def echo(text: str, times: int = 1) -> str:
    """Echo ``text``."""
    return text * times


_NAME = llm_name_for("demo.echo@1.0.0")


def _call(index: int) -> ToolCall:
    return ToolCall.from_openai(
        LlmToolCall(id=f"call_{index}", name=_NAME, arguments='{"text": "hi"}'),
        node="act",
        allowed=("demo.echo@1.0.0",),
    )


def test_issue19_an_empty_lockset_is_granted_beside_any_holder() -> None:
    """A call that locks nothing waits for no one, even with every resource held."""
    manager = LockManager()
    held = manager.acquire([LockRequest("workspace", "X")], owner="writer")
    empties: tuple[tuple[LockRequest, ...], list[LockRequest]] = ((), [])
    for empty in empties:
        lease = manager.acquire(empty, owner="a#1", timeout=0)
        assert (lease.owner, dict(lease.modes)) == ("a#1", {})
        assert manager.snapshot() == {"workspace": (("writer", "X"),)}
        manager.release(lease)
        with pytest.raises(ToolError, match="not held"):
            manager.release(lease)
    manager.release(held)
    lease = manager.acquire([LockRequest("file:a", "X")], owner="o")
    assert type(lease) is Lease
    assert dict(lease.modes) == {"file:a": "X", "workspace": "IX"}
    assert manager.snapshot() == {"file:a": (("o", "X"),), "workspace": (("o", "IX"),)}
    manager.release(lease)
    assert manager.snapshot() == {}


def test_issue19_an_empty_lockset_is_granted_beside_any_holder_async() -> None:
    manager = LockManager()
    held = manager.acquire([LockRequest("workspace", "X")], owner="writer")
    lease = asyncio.run(manager.acquire_async((), owner="a#1", timeout=0.5))
    assert dict(lease.modes) == {}
    manager.release(lease)
    manager.release(held)
    assert manager.snapshot() == {}


def test_issue19_dispatched_records_are_the_validated_ones(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(echo)
    first = arbiter.dispatch(_call(1))
    validated = ToolResult.model_validate(first.model_dump(exclude_unset=True))
    assert first == validated
    assert first.model_fields_set == validated.model_fields_set
    entry = CommitEntry(lane="core", tool="t", args_hash="h", status="success")
    assert entry == CommitEntry.model_validate(entry.model_dump())


def test_issue19_body_arguments_are_the_model_fields(
    make_arbiter: ArbiterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    arbiter = make_arbiter(echo)
    model = echo.arguments.model
    reads: list[type[BaseModel]] = []
    original = BaseModel.__dict__["model_fields"]

    class Counting:
        def __get__(self, instance: Any, owner: type[BaseModel]) -> Any:
            reads.append(owner)
            return original.__get__(instance, owner)

    monkeypatch.setattr(BaseModel, "model_fields", Counting())
    result = arbiter.dispatch(
        ToolCall(tool="demo.echo@1.0.0", args={"text": "ab", "times": 2}, call_id="c")
    )
    assert result.summary == "abab"
    assert model not in reads


_ODD_IDS = [None, "call_1", 'a,"kind":"x', 'q\\",\\"kind\\":', "é\u2028\x00", ""]


@pytest.mark.parametrize("call_id", _ODD_IDS)
@pytest.mark.parametrize("ref", [None, "sha256:" + "ab" * 32])
def test_issue19_sealed_bytes_are_the_sorted_dump(call_id: str | None, ref: str | None) -> None:
    entry = CommitEntry(
        lane="core", tool="t@1", call_id=call_id, args_hash="h", status="success", artifact_ref=ref
    )
    record, data = seal(entry, seq=3, prev_hash=GENESIS_HASH)
    assert data == orjson.dumps(record.model_dump(), option=orjson.OPT_SORT_KEYS)
    assert data == canonical_json(record.model_dump())
    assert CommitRecord.model_validate_json(data) == record
    assert verify_rows([(1, seal(entry, seq=1, prev_hash=GENESIS_HASH)[1])]) is None


def _logs(tmp_path: Path, name: str) -> tuple[CommitLog, CommitLog]:
    if name == "memory":
        return InMemoryCommitLog(), InMemoryCommitLog()
    return SqliteCommitLog(tmp_path / "a.db"), SqliteCommitLog(tmp_path / "b.db")


def _rows(log: CommitLog) -> list[bytes]:
    if isinstance(log, InMemoryCommitLog):
        return list(log._rows)
    assert isinstance(log, SqliteCommitLog)
    return [bytes(row) for (row,) in log._db.rows("SELECT record FROM commit_log ORDER BY seq")]


@pytest.mark.parametrize("name", ["memory", "sqlite"])
def test_issue19_dispatch_commits_the_bytes_of_an_appended_entry(
    make_arbiter: ArbiterFactory, tmp_path: Path, name: str
) -> None:
    log, reference = _logs(tmp_path, name)
    arbiter = make_arbiter(echo, commit_log=log)
    arbiter.dispatch(_call(1))
    arbiter.dispatch(ToolCall(tool="demo.echo@1.0.0", args={"text": "x"}))
    for record in log.records():
        reference.append(CommitEntry.model_validate(record.model_dump(include=_ENTRY_FIELDS)))
    assert _rows(log) == _rows(reference)
    assert log.head() == reference.head()
    assert log.verify_chain() is None
    assert len(log.records()) == 2
    for each in (log, reference):
        if isinstance(each, SqliteCommitLog):
            each.close()


def test_issue19_a_log_subclass_still_gets_entries(make_arbiter: ArbiterFactory) -> None:
    appended: list[CommitEntry] = []

    class Watched(InMemoryCommitLog):
        def append(self, entry: CommitEntry) -> CommitRecord:
            appended.append(entry)
            return super().append(entry)

    arbiter = make_arbiter(echo, commit_log=Watched())
    arbiter.dispatch(_call(1))
    assert [(e.tool, e.call_id, e.status) for e in appended] == [
        ("demo.echo@1.0.0", "call_1", "success")
    ]


def test_issue19_external_calls_keep_their_audit_record(make_arbiter: ArbiterFactory) -> None:
    @tool(id="demo.post@1.0.0", description="Post.", side_effect="external")
    def post(text: str) -> str:
        return text

    arbiter = make_arbiter(post)
    arbiter.dispatch(ToolCall(tool="demo.post@1.0.0", args={"text": "x"}, call_id="c"))
    kinds = [(r.kind, r.status) for r in arbiter.commit_log.records()]
    assert kinds == [("call", "success"), ("audit", "success")]
    assert arbiter.commit_log.verify_chain() is None


def test_issue19_no_policy_and_default_deny_still_denies(make_arbiter: ArbiterFactory) -> None:
    arbiter = make_arbiter(echo, default_allow=False)
    with pytest.raises(ToolNotAllowedError, match="no policy hook allowed it"):
        arbiter.dispatch(ToolCall(tool="demo.echo@1.0.0", args={"text": "x"}))
    assert make_arbiter(echo).dispatch(_call(1)).status == "success"


class _Subclassed(ToolResult):
    """A result of a subclass: its message must be the plain one's."""


def _message_as_views(result: ToolResult, lane: str) -> dict[str, Any]:
    """``result``'s message built from ``visible_to`` and ``prompt_view``."""
    return _Subclassed.model_construct(**result.__dict__).to_tool_message(lane)


@pytest.mark.parametrize("exposure", ["both", "edge", "core"])
@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("payload", [None, "text", {"k": [1, 2]}])
@pytest.mark.parametrize("lane", ["edge", "core"])
def test_issue19_tool_message_is_the_prompt_view(
    exposure: str, mask: bool, payload: Any, lane: str
) -> None:
    result = ToolResult(
        tool="t@1",
        call_id="c",
        status="success",
        summary="s",
        artifact_ref="sha256:" + "0" * 64,
        payload=payload,
        exposure=exposure,
        prompt_mask=mask,
    )
    assert result.to_tool_message(lane) == _message_as_views(result, lane)
    failed = ToolResult.from_error(ToolError("boom"), call_id=None)
    assert failed.to_tool_message(lane) == _message_as_views(failed, lane)
