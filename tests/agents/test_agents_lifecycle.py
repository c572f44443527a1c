"""Agents (D5-D10): profiles, the lifecycle as validated data, the SQLite store and its
hash-chained audit log, the writeback contract and the orphan scan."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.agents import (
    DEFAULT_LIFECYCLE,
    LIFECYCLE_DATA,
    AgentEvent,
    AgentProfile,
    AgentState,
    AgentStore,
    Lifecycle,
    OrphanWarning,
    TaskNeeds,
    WritebackWarning,
    allocate,
)
from stargraph.errors import AgentConfigError, CompileError, LifecycleError, RunError
from stargraph.skills.markdown import parse_skill_md

CODER = AgentProfile(
    agent_type="coder",
    skills=("archive-notes",),
    permissions={"tools": ["choir.fs.*"], "write_access": True},
    limits={"max_concurrent_tasks": 2, "token_budget": 50_000, "timeout_ms": 60_000},
    history={"success_rate": 0.9, "avg_duration_ms": 1000, "total_runs": 10},
)
SKILL = parse_skill_md(
    """---
name: archive-notes
description: d
kind: agent
tools: [choir.fs.read@1.0.0]
required_tools: [choir.fs.read, choir.fs.write]
---
"""
)
HTTP_SKILL = parse_skill_md(
    """---
name: fetcher
description: d
kind: agent
required_tools: [choir.http.fetch, choir.fs.read, web.search@1.0.0]
---
"""
)
UPDATE = {"task_id": "t1", "status": "done", "progress": 100, "summary": "archived"}
THOUGHT = {
    "task_id": "t1",
    "type": "reflection",
    "branch": "feature/archive",
    "commit_sha": "abc123",
    "tests_run": ["tests/test_x.py"],
    "blockers": [],
}


@pytest.fixture
def events() -> list[AgentEvent]:
    return []


@pytest.fixture
def store(tmp_path: Path, events: list[AgentEvent]) -> Iterator[AgentStore]:
    ids = iter(f"agent-{i}" for i in range(100))
    with AgentStore(
        tmp_path / "agents.db", on_event=events.append, clock=lambda: 1.5, new_id=lambda: next(ids)
    ) as db:
        yield db


def ready(store: AgentStore, profile: AgentProfile = CODER) -> str:
    agent = store.allocate(profile, task_id="t1", pool="implementation")
    store.spawn(agent.id)
    assert store.initialize(agent.id, [SKILL]).status == "READY"
    return agent.id


def test_D5_required_tools_outside_permissions_fail_initialization(
    store: AgentStore, events: list[AgentEvent]
) -> None:
    agent = store.allocate(CODER, task_id="t1")
    store.spawn(agent.id)
    failed = store.initialize(agent.id, [SKILL, HTTP_SKILL])
    assert failed.status == "FAILED"
    assert failed.error is not None
    assert "['choir.http.fetch', 'web.search@1.0.0']" in failed.error
    assert events == [
        AgentEvent(
            kind="init_failed",
            agent_id=agent.id,
            detail={"missing_tools": ["choir.http.fetch", "web.search@1.0.0"]},
        )
    ]
    last = store.audit(agent.id)[-1]
    assert (last.action, last.from_state, last.to_state) == ("fail", "INITIALIZING", "FAILED")
    assert last.detail == {"missing_tools": ["choir.http.fetch", "web.search@1.0.0"]}


def test_D6_lifecycle_is_data_validated_by_the_machine_validator() -> None:
    assert DEFAULT_LIFECYCLE.initial == "PENDING"
    assert set(DEFAULT_LIFECYCLE.transitions) == {s.value for s in AgentState}
    non_terminal = set(AgentState) - DEFAULT_LIFECYCLE.terminal
    assert all(DEFAULT_LIFECYCLE.target(s, "fail") == "FAILED" for s in non_terminal)
    assert DEFAULT_LIFECYCLE.terminal == {"TERMINATED", "FAILED"}
    broken: dict[str, Any] = {
        "initial_state": "PENDING",
        "states": {**LIFECYCLE_DATA["states"], "LIMBO": {"transitions": []}},
    }
    with pytest.raises(CompileError) as info:
        Lifecycle.from_data(broken)
    messages = [p.message for p in info.value.problems]
    assert "state 'LIMBO' is a dead end: not terminal and no transitions" in messages
    assert any("unreachable states" in m and "LIMBO" in m for m in messages)


def test_D6_illegal_transition_raises(store: AgentStore) -> None:
    agent = store.allocate(CODER, task_id="t1")
    with pytest.raises(LifecycleError, match=r"illegal lifecycle transition PENDING -> BUSY"):
        store.transition(agent.id, "BUSY")
    assert issubclass(LifecycleError, RunError)
    store.fail(agent.id, "crashed")
    with pytest.raises(LifecycleError, match=r"FAILED is terminal"):
        store.spawn(agent.id)
    assert store.get(agent.id).status == "FAILED"  # nothing changed


def test_D6_states_in_sqlite_and_each_transition_audited(store: AgentStore) -> None:
    agent_id = ready(store)
    store.assign(agent_id, "t1")
    store.task_update(agent_id, UPDATE)
    store.thought_record(agent_id, THOUGHT)
    assert store.terminate(agent_id).status == "TERMINATED"
    conn = sqlite3.connect(store.path)
    assert conn.execute("SELECT status FROM agents").fetchall() == [("TERMINATED",)]
    moves = conn.execute(
        "SELECT action, from_state, to_state FROM audit_log WHERE to_state IS NOT NULL ORDER BY seq"
    ).fetchall()
    conn.close()
    assert moves == [
        ("allocate", None, "PENDING"),
        ("spawn", "PENDING", "INITIALIZING"),
        ("ready", "INITIALIZING", "READY"),
        ("assign", "READY", "BUSY"),
        ("terminate", "BUSY", "TERMINATED"),
    ]
    assert store.verify_chain() is None


def test_D7_writeback_warn_mode_warns_and_terminates(
    store: AgentStore, events: list[AgentEvent]
) -> None:
    agent_id = ready(store)
    store.assign(agent_id, "t1")
    store.task_update(agent_id, UPDATE)
    with pytest.warns(WritebackWarning, match=r"missing \['thought_record'\]"):
        assert store.terminate(agent_id).status == "TERMINATED"
    assert events[-1].kind == "writeback_missing"


def test_D7_writeback_block_mode_refuses_termination(tmp_path: Path) -> None:
    with AgentStore(tmp_path / "a.db", writeback="block") as store:
        agent_id = ready(store)
        store.assign(agent_id, "t1")
        with pytest.raises(LifecycleError, match=r"missing \['task_update', 'thought_record'\]"):
            store.terminate(agent_id)
        assert store.get(agent_id).status == "BUSY"
        store.task_update(agent_id, UPDATE)
        store.thought_record(agent_id, THOUGHT)
        store.memory_pack(agent_id, "session-1")  # optional
        assert store.terminate(agent_id).status == "TERMINATED"
        assert store.thought_records(agent_id)[0].commit_sha == "abc123"


def test_D7_malformed_writeback_is_refused_naming_fields(store: AgentStore) -> None:
    agent_id = ready(store)
    with pytest.raises(LifecycleError, match=r"bad fields \['progress'\]"):
        store.task_update(agent_id, {**UPDATE, "progress": 150})
    with pytest.raises(LifecycleError, match=r"bad fields \['type', 'commit_sha'\]"):
        store.thought_record(agent_id, {**THOUGHT, "type": "diary", "commit_sha": ""})


def test_D8_orphan_scan_flags_terminated_agents_without_thought_record(
    store: AgentStore, events: list[AgentEvent]
) -> None:
    orphan = ready(store)
    store.assign(orphan, "t1")
    store.task_update(orphan, UPDATE)
    with pytest.warns(WritebackWarning):
        store.terminate(orphan)
    good = ready(store)
    store.assign(good, "t1")
    store.task_update(good, UPDATE)
    store.thought_record(good, THOUGHT)
    store.terminate(good)
    events.clear()
    with pytest.warns(OrphanWarning, match=f"orphaned agent '{orphan}'"):
        assert store.orphan_scan() == [orphan]
    assert events == [AgentEvent(kind="orphan", agent_id=orphan)]
    assert store.get(orphan).status == "TERMINATED"  # no rollback, no re-execution
    assert store.audit(orphan)[-1].action == "orphan"


def test_D9_profile_validates_and_allocation_respects_skills_permissions_limits(
    store: AgentStore,
) -> None:
    with pytest.raises(AgentConfigError, match="success_rate"):
        AgentProfile(agent_type="x", history={"success_rate": 2})
    reviewer = AgentProfile(
        agent_type="reviewer",
        skills=("archive-notes",),
        permissions={"tools": ["choir.fs.read"]},
        history={"success_rate": 0.99},
    )
    read = TaskNeeds(skills=("archive-notes",), tools=("choir.fs.read",))
    write = TaskNeeds(skills=("archive-notes",), tools=("choir.fs.write",), write_access=True)
    assert allocate([CODER, reviewer], read) == reviewer  # better history
    assert allocate([CODER, reviewer], write) == CODER  # only one permitted
    assert allocate([CODER, reviewer], read, active={"reviewer": 1}) == CODER  # limit
    assert allocate([CODER], TaskNeeds(skills=("wiki",))) is None
    assert allocate([CODER], TaskNeeds(tokens=60_000)) is None
    assert read.reasons(reviewer, active=1) == ["at its limit of 1 concurrent tasks"]
    # The store enforces the pool limit too.
    store.allocate(CODER)
    store.allocate(CODER)
    with pytest.raises(LifecycleError, match="max_concurrent_tasks=2"):
        store.allocate(CODER)


def test_D10_tampered_audit_row_is_detected(store: AgentStore) -> None:
    agent_id = ready(store)
    store.assign(agent_id, "t1")
    assert store.verify_chain() is None
    conn = sqlite3.connect(store.path)
    # A column edited in place: the row no longer hashes to its sealed record.
    conn.execute("UPDATE audit_log SET to_state = 'TERMINATED' WHERE seq = 3")
    conn.commit()
    assert store.verify_chain() == 3
    conn.execute("UPDATE audit_log SET to_state = 'READY' WHERE seq = 3")
    conn.commit()
    assert store.verify_chain() is None
    # A record rewritten: the commit-log chain check (shared with the arbiter) catches it.
    record = conn.execute("SELECT record FROM audit_log WHERE seq = 2").fetchone()[0]
    conn.execute(
        "UPDATE audit_log SET record = ? WHERE seq = 2",
        (bytes(record).replace(b"INITIALIZING", b"READY"),),
    )
    conn.commit()
    assert store.verify_chain() == 2
    conn.execute("UPDATE audit_log SET record = ? WHERE seq = 2", (record,))
    conn.execute("DELETE FROM audit_log WHERE seq = 1")
    conn.commit()
    conn.close()
    assert store.verify_chain() == 1
