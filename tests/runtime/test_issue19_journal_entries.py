"""A recorded call's entry is built from the journal's own values without validation: it
equals the validated entry (fields set included), and other values are still validated."""

from __future__ import annotations

from typing import Any

import pytest

from stargraph.checkpoint import JournalEntry
from stargraph.errors import CorruptCheckpointError
from stargraph.runtime._context import TaskJournal


def _journal() -> TaskJournal:
    return TaskJournal(run_id="r", step=3, node="n", index=0, entries=[], persist=None)


def test_issue19_recorded_entry_is_the_validated_one() -> None:
    journal = _journal()
    journal.call("llm", "chat", lambda: {"ok": 1}, request={"q": 1}, fingerprint="sha256:x")
    (entry,) = journal.entries
    validated = JournalEntry(
        step=3,
        node="n",
        index=0,
        seq=0,
        kind="llm",
        key="chat",
        value={"ok": 1},
        fingerprint="sha256:x",
        request={"q": 1},
    )
    assert entry == validated
    assert entry.__dict__ == validated.__dict__
    assert entry.model_fields_set == validated.model_fields_set


def test_issue19_recorded_entry_of_other_values_is_validated() -> None:
    key: Any = 5
    with pytest.raises(CorruptCheckpointError, match="JournalEntry data is invalid: /key"):
        _journal().call("once", key, lambda: 1)


def test_issue19_recorded_entry_is_not_validated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Any, **data: Any) -> None:
        raise AssertionError("validated")

    monkeypatch.setattr(JournalEntry, "__init__", refuse)
    journal = _journal()
    assert journal.call("uuid", "", lambda: "u-1") == "u-1"
    assert journal.entries[0].value == "u-1"
