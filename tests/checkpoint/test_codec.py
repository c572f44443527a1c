"""The SQL stores' payload bytes are exactly ``model_dump_json(exclude_defaults=True)``: the
encoder calls pydantic's serializer directly, and stored rows must not change by a byte."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stargraph.checkpoint import JournalEntry, PendingWrite, StepRecord, TaskRecord, WriteRecord
from stargraph.checkpoint._codec import encode
from stargraph.checkpoint._records import iso_at, iso_now, trusted_fields
from stargraph.errors import CheckpointError

_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
_JSON = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
_NAMES = st.text(min_size=1, max_size=8)


def _writes() -> st.SearchStrategy[WriteRecord]:
    return st.builds(
        WriteRecord,
        node=_NAMES,
        index=st.integers(0, 3),
        writes=st.dictionaries(_NAMES, _JSON, max_size=3),
    )


def _tasks() -> st.SearchStrategy[TaskRecord]:
    return st.builds(
        TaskRecord,
        node=_NAMES,
        index=st.integers(0, 3),
        payload=st.none() | st.dictionaries(_NAMES, _JSON, max_size=2),
    )


def _calls() -> st.SearchStrategy[JournalEntry]:
    return st.builds(
        JournalEntry,
        step=st.integers(0, 5),
        node=_NAMES,
        index=st.integers(0, 2),
        seq=st.integers(0, 5),
        kind=_NAMES,
        key=st.text(max_size=5),
        value=_JSON,
        fingerprint=st.text(max_size=5),
        request=_JSON,
        base=st.text(max_size=5),
    )


_STEPS = st.builds(
    StepRecord,
    step=st.integers(0, 10**6),
    writes=st.lists(_writes(), max_size=3).map(tuple),
    snapshot=st.none() | st.dictionaries(_NAMES, _JSON, max_size=3),
    carried=st.dictionaries(_NAMES, st.integers(0, 100), max_size=2),
    next=st.lists(_tasks(), max_size=3).map(tuple),
    joins=st.dictionaries(_NAMES, st.lists(_NAMES, max_size=2).map(tuple), max_size=2),
    facts=_JSON,
    decision=st.none() | st.dictionaries(_NAMES, _JSON, max_size=2),
    attempts=st.dictionaries(_NAMES, st.integers(1, 5), max_size=2),
    calls=st.lists(_calls(), max_size=2).map(tuple),
    created_ms=st.integers(0, 2**45),
)


def _reference(record: BaseModel) -> bytes:
    return record.model_dump_json(exclude_defaults=True).encode()


@settings(max_examples=300, deadline=None)
@given(_STEPS)
def test_issue19_step_payloads_are_the_bytes_of_model_dump_json(record: StepRecord) -> None:
    assert encode(record, run_id="r", step=record.step) == _reference(record)


@pytest.mark.parametrize(
    "record",
    [
        StepRecord(step=0),  # every field at its default but the step
        StepRecord(step=3, writes=(WriteRecord(node="n", writes={}),)),
        trusted_fields(  # as the executor builds the common step
            StepRecord,
            {
                "step": 7,
                "writes": (
                    trusted_fields(
                        WriteRecord, {"node": "n7", "index": 0, "writes": {"c": 7, "items": ["6"]}}
                    ),
                ),
                "snapshot": None,
                "carried": {},
                "next": (trusted_fields(TaskRecord, {"node": "n8", "index": 0, "payload": None}),),
                "joins": {},
                "facts": None,
                "decision": None,
                "attempts": {},
                "calls": (),
                "created_ms": 1_764_230_000_123,
            },
        ),
        StepRecord(
            step=2,
            writes=(WriteRecord(node="ünï", index=1, writes={"t": '日本 \u2028 \U0001f600 "q"'}),),
            snapshot={"x": [math.nan, math.inf, -math.inf, 2**70, -0.0, 1e300]},
            carried={"log": 0},
            next=(TaskRecord(node="a", index=2, payload={"p": {"deep": [1, {"k": None}]}}),),
            joins={"0": ("a", "b")},
            facts={"f": [True, False]},
            decision={"kind": "halt", "rule": "r"},
            attempts={"a/0": 2},
            calls=(
                JournalEntry(step=2, node="a", seq=0, kind="clock", value=1.5),
                JournalEntry(
                    step=2, node="a", seq=1, kind="llm", key="m", request={"m": []}, base="h"
                ),
            ),
            created_ms=5,
        ),
        PendingWrite(step=1, node="n", writes={"x": [1, "二"]}),
        JournalEntry(step=0, node="n", seq=0, kind="uuid", value="id"),
    ],
)
def test_issue19_payloads_of_every_record_kind_match_model_dump_json(record: BaseModel) -> None:
    assert encode(record, run_id="r", step=0) == _reference(record)


def test_a_value_pydantic_cannot_serialize_is_a_checkpoint_error() -> None:
    record = StepRecord(step=1, facts={"f": 1})
    broken = record.model_copy(update={"facts": object()})
    with pytest.raises(CheckpointError, match="cannot store StepRecord as JSON"):
        encode(broken, run_id="r", step=1)


@settings(max_examples=500, deadline=None)
@given(
    st.floats(min_value=0, max_value=4e9, allow_nan=False)
    | st.integers(0, 4 * 10**9).map(float)
    | st.integers(0, 4 * 10**15).map(lambda us: us / 1e6)
)
def test_issue19_iso_at_writes_what_datetime_writes(epoch: float) -> None:
    assert iso_at(epoch) == datetime.fromtimestamp(epoch, UTC).isoformat()


def test_issue19_iso_now_is_datetime_now_in_the_same_format() -> None:
    before = datetime.now(UTC)
    now = datetime.fromisoformat(iso_now())
    assert before <= now <= datetime.now(UTC)
    assert len(iso_now()) in (25, 32)  # without or with microseconds, as isoformat()
