"""One dispatch builds its context, lease and records directly: each must be what the
constructors make of the same values, and the work done once per tool or per record shape
must not be redone per call."""

from __future__ import annotations

import dataclasses
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
    Secrets,
    SqliteCommitLog,
    ToolCall,
    ToolContext,
    ToolResult,
    Workspace,
    canonical_json,
    llm_name_for,
    seal,
    tool,
    verify_rows,
)
from stargraph.tools import _locks as locks_module
from stargraph.tools._arbiter import _normalised_fields
from stargraph.tools._tool import _Cancellation, context_of

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


def test_issue19_context_of_is_the_dataclass(tmp_path: Any) -> None:
    workspace = Workspace.at(tmp_path)
    secrets = Secrets({"k": "value"})
    values: dict[str, Any] = {
        "tool": "demo.echo@1.0.0",
        "call_id": "call_1",
        "lane": "core",
        "node": "act",
        "workspace": workspace,
        "timeout_s": 3.0,
        "deadline": 12.5,
        "secrets": secrets,
        "host": None,
    }
    made = context_of(**values)
    expected = ToolContext(**values)
    for field in dataclasses.fields(ToolContext):
        if field.name == "cancelled":
            assert type(made.cancelled) is _Cancellation
            assert not made.cancelled.is_set()
        else:
            assert getattr(made, field.name) == getattr(expected, field.name), field.name
    field_name = "tool"  # frozen: setting any field raises
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, field_name, "other")
    assert made.cancelled is not context_of(**values).cancelled


def test_issue19_dispatch_builds_its_context_without_init(
    make_arbiter: ArbiterFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    arbiter = make_arbiter(echo)
    seen: list[ToolContext] = []
    original = ToolContext.__init__

    def counting(self: ToolContext, *args: Any, **kwargs: Any) -> None:
        seen.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(ToolContext, "__init__", counting)
    assert arbiter.dispatch(_call(1)).summary == "hi"
    assert seen == []


def test_issue19_empty_lockset_is_not_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LockManager()
    expanded: list[object] = []
    original = LockManager.expand

    def counting(self: LockManager, locks: Any) -> Any:
        expanded.append(locks)
        return original(self, locks)

    monkeypatch.setattr(LockManager, "expand", counting)
    lease = manager.acquire((), owner="a#1")
    assert expanded == []
    assert (lease.owner, dict(lease.modes)) == ("a#1", {})
    manager.release(lease)
    with pytest.raises(ToolError, match="not held"):
        manager.release(lease)
    # A lockset that is not an empty tuple still expands (an empty list included).
    manager.release(manager.acquire([], owner="b"))
    assert expanded == [[]]


def test_issue19_lease_is_the_dataclass() -> None:
    made = locks_module._lease(7, "t#1", {"workspace": "S"}, 1.5)
    for field in dataclasses.fields(Lease):
        assert getattr(made, field.name) == getattr(
            Lease(7, "t#1", {"workspace": "S"}, 1.5), field.name
        )
    field_name = "owner"  # frozen: setting any field raises
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, field_name, "x")
    manager = LockManager()
    lease = manager.acquire([LockRequest("file:a", "X")], owner="o")
    assert type(lease) is Lease
    assert dict(lease.modes) == {"file:a": "X", "workspace": "IX"}
    assert manager.snapshot() == {"file:a": (("o", "X"),), "workspace": (("o", "IX"),)}
    manager.release(lease)
    assert manager.snapshot() == {}


def test_issue19_records_of_one_shape_share_their_fields_set(
    make_arbiter: ArbiterFactory,
) -> None:
    arbiter = make_arbiter(echo)
    first, second = arbiter.dispatch(_call(1)), arbiter.dispatch(_call(2))
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    expected = ToolResult.model_construct(**first.__dict__).__pydantic_fields_set__
    assert first.__pydantic_fields_set__ == expected - {"error"}
    copied = first.model_copy(update={"error": None})
    assert "error" in copied.__pydantic_fields_set__
    assert "error" not in second.__pydantic_fields_set__
    assert ToolResult.model_validate(first.model_dump()) == first
    entry = CommitEntry(lane="core", tool="t", args_hash="h", status="success")
    assert entry == CommitEntry.model_validate(entry.model_dump())


def test_issue19_normalised_call_sets_what_the_union_sets() -> None:
    call = _call(1)
    assert _normalised_fields(call) == frozenset({"tool", "args"}) | call.model_fields_set
    partial = ToolCall(tool="demo_echo", args={"text": "x"})
    assert _normalised_fields(partial) == {"tool", "args"}

    class Wider(ToolCall):
        extra_field: str = "x"

    wider = Wider(tool="t", args={}, call_id="c", lane="core", node="n", state="s", allowed=())
    given = wider.model_fields_set
    assert _normalised_fields(wider) == frozenset({"tool", "args"}) | given


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
    make_arbiter: ArbiterFactory, tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, reference = _logs(tmp_path, name)
    arbiter = make_arbiter(echo, commit_log=log)

    def refuse(self: object, entry: CommitEntry) -> None:
        raise AssertionError("the arbiter's own logs append its fields, not built entries")

    monkeypatch.setattr(type(log), "append", refuse)
    arbiter.dispatch(_call(1))
    arbiter.dispatch(ToolCall(tool="demo.echo@1.0.0", args={"text": "x"}))
    monkeypatch.undo()
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
    r"""A result that takes ``to_tool_message``'s general path (the direct one is for plain
    ``ToolResult``\ s only)."""


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
