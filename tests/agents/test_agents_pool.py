"""Row D11 (spawn parameters, pool strategies, six-tier taxonomy on ``skill_list``) and the
negative cases of D8 (the orphan scan leaves live agents alone) and D9 (write and admin
access decide allocation), all through the real ``AgentStore`` / ``Registry`` paths."""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stargraph.agents import (
    STRATEGIES,
    AgentEvent,
    AgentProfile,
    AgentStore,
    Candidate,
    ContextSnapshot,
    OrphanWarning,
    PoolAssignment,
    PoolStrategy,
    SkillTier,
    SpawnParams,
    Strategy,
    TaskNeeds,
    WritebackContract,
    WritebackWarning,
    allocate,
    plan,
    skill_list,
)
from stargraph.errors import AgentConfigError, LifecycleError, SkillValidationError
from stargraph.plugin import Registry, get_plugin_manager, hookimpl
from stargraph.skills import Skill
from stargraph.skills.markdown import parse_skill_md, skill_md_loaders

UPDATE = {"task_id": "t1", "status": "done", "progress": 100, "summary": "archived"}
THOUGHT = {"task_id": "t1", "branch": "feature/t1", "commit_sha": "abc123"}


def profile(name: str, *, max_tasks: int = 5, success: float = 0.5, **extra: Any) -> AgentProfile:
    return AgentProfile.model_validate(
        {
            "agent_type": name,
            "skills": ["archive-notes", "summarize"],
            "limits": {"max_concurrent_tasks": max_tasks},
            "history": {"success_rate": success},
            **extra,
        }
    )


def skill_md(name: str) -> Any:
    return parse_skill_md(f"---\nname: {name}\ndescription: d\nkind: agent\n---\n")


@pytest.fixture
def events() -> list[AgentEvent]:
    return []


@pytest.fixture
def store(tmp_path: Path, events: list[AgentEvent]) -> Iterator[AgentStore]:
    ids = iter(f"agent-{i}" for i in range(100))
    with AgentStore(
        tmp_path / "agents.db", on_event=events.append, clock=lambda: 2.0, new_id=lambda: next(ids)
    ) as db:
        yield db


# --------------------------------------------------------------------------- spawn parameters


def test_D11_spawn_params_are_frozen_typed_data_naming_bad_fields() -> None:
    params = SpawnParams.for_task(
        "agent-7",
        "T-7: Archive the notes",
        pool="implementation",
        worktree_root="/work/trees",
        skill_refs=["archive-notes"],
        context_snapshot=ContextSnapshot(memory=("notes live in notes/",), thought_chain=("a",)),
    )
    assert params.model_dump(mode="json") == {
        "agent_id": "agent-7",
        "pool_assignment": "implementation",
        "worktree_path": "/work/trees/agent-7",
        "branch_name": "feature/t-7-archive-the-notes",
        "writeback_contract": {
            "required": ["task_update", "thought_record"],
            "optional": ["memory_pack"],
            "mode": None,
        },
        "skill_refs": ["archive-notes"],
        "context_snapshot": {
            "memory": ["notes live in notes/"],
            "thought_chain": ["a"],
            "data": {},
        },
    }
    with pytest.raises(AgentConfigError, match=r"/branch_name: .*frozen"):
        params.branch_name = "main"  # type: ignore[misc]
    with pytest.raises(AgentConfigError) as info:
        SpawnParams.model_validate(
            {
                "agent_id": "../escape",
                "pool_assignment": "marketing",
                "worktree_path": "/w",
                "branch_name": "feature/../x",
                "skill_refs": ["Not A Slug"],
                "colour": "red",
            }
        )
    pointers = [p.pointer for p in info.value.problems]
    assert pointers == [
        "/agent_id",
        "/pool_assignment",
        "/branch_name",
        "/skill_refs",
        "/colour",
    ]
    text = str(info.value)
    assert "'../escape'" in text
    assert "'marketing'" in text
    assert "'feature/../x'" in text
    with pytest.raises(AgentConfigError, match="both required and optional"):
        WritebackContract(required=("memory_pack",), optional=("memory_pack",))


_TEXT = st.text(alphabet=string.printable, max_size=12)
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    data=st.dictionaries(
        st.sampled_from(
            [
                "agent_id",
                "pool_assignment",
                "worktree_path",
                "branch_name",
                "skill_refs",
                "writeback_contract",
                "context_snapshot",
                "extra",
            ]
        ),
        _VALUE,
    )
)
def test_D11_any_malformed_spawn_params_raise_only_agent_config_errors(
    data: dict[str, Any],
) -> None:
    errors: list[AgentConfigError] = []
    try:
        SpawnParams.model_validate(data)
    except AgentConfigError as exc:
        errors.append(exc)
    # Valid data or one typed error naming where; never a pydantic or bare error.
    for error in errors:
        assert error.problems
        assert all(p.pointer.startswith("/") for p in error.problems)


_PROFILE_KEYS = st.sampled_from(
    ["agent_type", "skills", "permissions", "limits", "history", "tools", "tokens", "priority"]
)


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from([AgentProfile, TaskNeeds, WritebackContract, ContextSnapshot]),
    data=st.dictionaries(_PROFILE_KEYS, _VALUE)
    | st.dictionaries(_PROFILE_KEYS, _VALUE).map(
        lambda d: {"permissions": d, "limits": d, "history": d, "agent_type": "x"}
    ),
)
def test_D9_any_malformed_agent_data_raises_only_agent_config_errors(
    model: Any, data: dict[str, Any]
) -> None:
    errors: list[AgentConfigError] = []
    try:
        model.model_validate(data)
    except AgentConfigError as exc:
        errors.append(exc)
    for error in errors:
        assert error.problems
        assert all(p.pointer.startswith("/") for p in error.problems)


def test_D11_spawn_injects_params_through_the_store(store: AgentStore, tmp_path: Path) -> None:
    coder = profile("coder", skills=["archive-notes"])
    agent = store.allocate(coder, task_id="t1", pool="implementation")
    wrong = [
        SpawnParams.for_task("agent-99", "t1", pool="implementation", worktree_root=tmp_path),
        SpawnParams.for_task(agent.id, "t1", pool="review", worktree_root=tmp_path),
        SpawnParams.for_task(
            agent.id, "t1", pool="implementation", worktree_root=tmp_path, skill_refs=["wiki"]
        ),
    ]
    culprits = ["/agent_id", "/pool_assignment", "/skill_refs"]
    for params, culprit in zip(wrong, culprits, strict=True):
        with pytest.raises(AgentConfigError) as info:
            store.spawn(agent.id, params)
        assert [p.pointer for p in info.value.problems] == [culprit]
    assert store.get(agent.id).status == "PENDING"  # nothing moved, nothing stored
    assert store.get(agent.id).spawn is None

    params = SpawnParams.for_task(
        agent.id, "t1", pool=PoolAssignment.IMPLEMENTATION, worktree_root=tmp_path
    )
    record = store.spawn(agent.id, params)
    assert (record.status, record.spawn, record.pool) == ("INITIALIZING", params, "implementation")
    last = store.audit(agent.id)[-1]
    assert (last.action, last.detail) == ("spawn", {"params": params.model_dump(mode="json")})
    assert store.verify_chain() is None
    # Stored with the agent: another connection to the file reads the same parameters.
    with AgentStore(store.path) as again:
        assert again.get(agent.id).spawn == params
    # An agent allocated without a pool takes the one it is spawned in.
    free = store.allocate(coder)
    store.spawn(free.id, SpawnParams.for_task(free.id, "t2", pool="research", worktree_root="/w"))
    assert store.get(free.id).pool == "research"


def test_D11_skill_refs_bound_what_an_agent_initializes_with(
    store: AgentStore, events: list[AgentEvent]
) -> None:
    coder = profile("coder")
    refs = ("archive-notes",)
    one, two = store.allocate(coder), store.allocate(coder)
    for agent in (one, two):
        store.spawn(
            agent.id,
            SpawnParams.for_task(
                agent.id, "t1", pool="implementation", worktree_root="/w", skill_refs=refs
            ),
        )
    assert store.initialize(one.id, [skill_md("archive-notes")]).status == "READY"
    failed = store.initialize(two.id, [skill_md("archive-notes"), skill_md("summarize")])
    assert failed.status == "FAILED"
    assert failed.error is not None
    assert "['summarize'] are not in the agent's skill_refs" in (failed.error)
    assert events[-1] == AgentEvent(
        kind="init_failed", agent_id=two.id, detail={"outside_skill_refs": ["summarize"]}
    )


def _busy(store: AgentStore, contract: WritebackContract) -> str:
    agent = store.allocate(profile("coder"))
    params = SpawnParams.for_task(
        agent.id, "t1", pool="implementation", worktree_root="/w", writeback_contract=contract
    )
    store.spawn(agent.id, params)
    store.initialize(agent.id)
    store.assign(agent.id, "t1")
    return agent.id


def test_D11_the_writeback_contract_is_what_terminate_enforces(store: AgentStore) -> None:
    assert store.writeback == "warn"
    # A contract demanding memory_pack, enforced by blocking although the store only warns.
    strict = _busy(store, WritebackContract(required=("task_update", "memory_pack"), mode="block"))
    store.task_update(strict, UPDATE)
    with pytest.raises(LifecycleError, match=r"missing \['memory_pack'\]"):
        store.terminate(strict)
    assert store.get(strict).status == "BUSY"
    store.memory_pack(strict, "session-1")
    assert store.terminate(strict).status == "TERMINATED"  # no thought_record owed
    # A contract owing only task_update terminates without any warning (pytest turns
    # warnings into errors here), where the default contract would warn.
    light = _busy(store, WritebackContract(required=("task_update",)))
    store.task_update(light, UPDATE)
    assert store.terminate(light).status == "TERMINATED"
    default = store.allocate(profile("coder"))
    store.spawn(default.id)
    store.initialize(default.id)
    store.assign(default.id, "t1")
    store.task_update(default.id, UPDATE)
    with pytest.warns(WritebackWarning, match=r"missing \['thought_record'\]"):
        store.terminate(default.id)


# --------------------------------------------------------------------------- pool strategies

# Three types in pool order. Live agents: alpha 5 of 10 (load .5), beta 1 of 2 (load .5),
# gamma 2 of 20 (load .1). Each built-in strategy picks a different one.
ALPHA = profile("alpha", max_tasks=10, success=0.99)
BETA = profile("beta", max_tasks=2, success=0.9)
GAMMA = profile("gamma", max_tasks=20, success=0.1)
POOL = [ALPHA, BETA, GAMMA]
LIVE = {"alpha": 5, "beta": 1, "gamma": 2}
TASK = TaskNeeds(skills=("archive-notes",))


@pytest.mark.parametrize(
    ("strategy", "last", "expected"),
    [
        (PoolStrategy.FIFO, None, "alpha"),  # first eligible in pool order
        (PoolStrategy.PRIORITY, None, "alpha"),  # one task: served first, first eligible
        (PoolStrategy.LEAST_LOADED, None, "beta"),  # fewest live agents (1)
        (PoolStrategy.CAPACITY_AWARE, None, "gamma"),  # lowest load (.1)
        (PoolStrategy.ROUND_ROBIN, None, "alpha"),
        (PoolStrategy.ROUND_ROBIN, "alpha", "beta"),
        (PoolStrategy.ROUND_ROBIN, "beta", "gamma"),
        (PoolStrategy.ROUND_ROBIN, "gamma", "alpha"),  # wraps around
        ("LEAST_LOADED", None, "beta"),  # by name too
    ],
)
def test_D11_each_pool_strategy_chooses_by_its_own_rule(
    strategy: PoolStrategy | str, last: str | None, expected: str
) -> None:
    chosen = allocate(POOL, TASK, LIVE, strategy=strategy, last=last)
    assert chosen is not None
    assert chosen.agent_type == expected


def test_D11_round_robin_skips_ineligible_types_and_priority_orders_the_queue() -> None:
    beta_full = {**LIVE, "beta": 2}
    chosen = allocate(POOL, TASK, beta_full, strategy="ROUND_ROBIN", last="alpha")
    assert chosen == GAMMA
    solo = [profile("solo", max_tasks=1)]
    queue = [
        TaskNeeds(task_id="low", priority=0),
        TaskNeeds(task_id="high", priority=5),
        TaskNeeds(task_id="mid", priority=5),
    ]
    fifo = plan(solo, queue, strategy="FIFO")
    assert [(a.task.task_id, a.profile is not None) for a in fifo] == [
        ("low", True),
        ("high", False),
        ("mid", False),
    ]
    by_priority = plan(solo, queue, strategy="PRIORITY")
    assert [(a.task.task_id, a.profile is not None) for a in by_priority] == [
        ("high", True),
        ("mid", False),  # ties keep submission order
        ("low", False),
    ]
    assert by_priority[1].reasons == {"solo": ["at its limit of 1 concurrent tasks"]}


def test_D11_a_strategy_of_your_own_plugs_in() -> None:
    def last_in_pool(candidates: Sequence[Candidate], last: int | None) -> Candidate:
        return candidates[-1]

    mine = Strategy("last-in-pool", last_in_pool)
    assert allocate(POOL, TASK, LIVE, strategy=mine) == GAMMA
    assert set(STRATEGIES) == set(PoolStrategy)
    with pytest.raises(AgentConfigError, match="unknown pool strategy 'RANDOM'"):
        allocate(POOL, TASK, strategy="RANDOM")
    rogue = Strategy("rogue", lambda c, last: Candidate(BETA, 1, 0, TASK))
    with pytest.raises(AgentConfigError, match="not one of the eligible candidates"):
        allocate([ALPHA], TASK, strategy=rogue)
    with pytest.raises(AgentConfigError, match="'alpha' is in the pool twice"):
        allocate([ALPHA, ALPHA], TASK)


def test_D11_dispatch_allocates_a_queue_in_the_store(store: AgentStore) -> None:
    pool = [profile("a"), profile("b"), profile("c")]
    tasks = [TaskNeeds(task_id=f"t{i}", pool="research") for i in range(4)]
    placed = store.dispatch(pool, tasks, strategy=PoolStrategy.ROUND_ROBIN)
    records = [r for _, r in placed]
    assert [r.agent_type if r else None for r in records] == ["a", "b", "c", "a"]
    assert [(r.task_id, r.pool) for r in records if r] == [(f"t{i}", "research") for i in range(4)]
    # The rotation goes on from the store's last allocation, across calls.
    again = store.dispatch(pool, [TaskNeeds(task_id="t4")], strategy="ROUND_ROBIN")
    assert again[0][1] is not None
    assert again[0][1].agent_type == "b"
    assert store.active_counts() == {"a": 2, "b": 2, "c": 1}
    # LEAST_LOADED reads the live counts from the store.
    least = store.dispatch(pool, [TaskNeeds(task_id="t5")], strategy="LEAST_LOADED")
    assert least[0][1] is not None
    assert least[0][1].agent_type == "c"
    # A queue larger than the pool: PRIORITY gives the last slot to the urgent task.
    solo = [profile("solo", max_tasks=1)]
    queue = [TaskNeeds(task_id="chore"), TaskNeeds(task_id="urgent", priority=9)]
    served = store.dispatch(solo, queue, strategy="PRIORITY")
    assert [(t.task_id, r is not None) for t, r in served] == [("urgent", True), ("chore", False)]


# --------------------------------------------------------------------------- taxonomy


class Out(BaseModel):
    answer: str = ""


def _skill(name: str, description: str, tags: tuple[str, ...]) -> Skill:
    return Skill(
        name=name,
        version="1.0.0",
        kind="agent",
        description=description,
        subgraph=None,
        state_schema=Out,
        tags=tags,
    )


class TieredSkills:
    @hookimpl
    def register_skills(self, register: Any) -> None:
        register(_skill("merkle-seal", "Seal the audit trail into a proof.", ("audit-proof",)))
        register(_skill("task-crud", "Create and update tasks.", ("task-roadmap", "tasks")))
        register(_skill("untiered", "Anything else.", ()))


def test_D11_six_tier_taxonomy_tags_skill_list(tmp_path: Path) -> None:
    assert [t.value for t in SkillTier] == [
        "pm-orchestration",
        "task-roadmap",
        "gsd-execution",
        "audit-proof",
        "infrastructure",
        "integration",
    ]
    folder = tmp_path / "agent" / "notify"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: notify\ndescription: Send a notification to chat.\nkind: agent\n"
        "tags: [integration, chat]\n---\n"
    )
    registry = Registry.build(
        get_plugin_manager(plugins=[TieredSkills()], entry_points=False),
        agent_dir=tmp_path / "agent",
        skill_loaders=skill_md_loaders(),
    )
    rows = registry.skill_list(capability="audit-proof")
    assert [(r.name, r.tier) for r in rows] == [("merkle-seal", SkillTier.AUDIT_PROOF)]
    assert [r.name for r in registry.skill_list(capability=SkillTier.INTEGRATION)] == ["notify"]
    assert [r.name for r in registry.skill_list(capability="tasks")] == ["task-crud"]
    assert [r.name for r in registry.skill_list(search="SEAL proof")] == ["merkle-seal"]
    assert [r.name for r in registry.skill_list(search="notification", capability="chat")] == [
        "notify"
    ]
    everything = {r.name: r.tier for r in skill_list(registry)}
    assert everything["untiered"] is None
    assert everything["task-crud"] is SkillTier.TASK_ROADMAP
    assert registry.skill_list(search="audit", capability="integration") == []
    with pytest.raises(AgentConfigError, match="is not a tier or tag"):
        registry.skill_list(capability="Audit & Proof")
    with pytest.raises(SkillValidationError, match="belongs to one tier"):
        _skill("two-tiers", "x", ("audit-proof", "integration"))


# --------------------------------------------------------------------------- D8 / D9 negatives


def test_D8_orphan_scan_leaves_live_and_failed_agents_alone(
    store: AgentStore, events: list[AgentEvent]
) -> None:
    # Agents in every non-terminated state, none with a thought record: none is an orphan.
    coder = profile("coder", max_tasks=10)
    store.allocate(coder)  # stays PENDING
    initializing = store.allocate(coder).id
    store.spawn(initializing)
    ready = store.allocate(coder).id
    store.spawn(ready)
    store.initialize(ready)
    busy = store.allocate(coder).id
    store.spawn(busy)
    store.initialize(busy)
    store.assign(busy, "t1")
    store.task_update(busy, UPDATE)
    failed = store.allocate(coder).id
    store.fail(failed, "crashed")
    states = {a.id: a.status for a in store.agents()}
    assert sorted(states.values()) == ["BUSY", "FAILED", "INITIALIZING", "PENDING", "READY"]
    before = len(store.audit())
    assert store.orphan_scan() == []  # no OrphanWarning either: warnings are errors here
    assert events == []
    assert len(store.audit()) == before
    # Once the busy one terminates without a thought record, it (and only it) is flagged.
    with pytest.warns(WritebackWarning):
        store.terminate(busy)
    with pytest.warns(OrphanWarning, match=f"orphaned agent '{busy}'"):
        assert store.orphan_scan() == [busy]
    assert {a.id: a.status for a in store.agents()} == {**states, busy: "TERMINATED"}


def test_D9_write_access_decides_allocation() -> None:
    # Identical profiles but for write access; the reader comes first in the pool.
    reader = profile("reader")
    writer = profile("writer", permissions={"write_access": True})
    needs_write = TaskNeeds(write_access=True)
    assert needs_write.reasons(reader) == ["no write access"]
    for strategy in PoolStrategy:
        assert allocate([reader, writer], needs_write, strategy=strategy) == writer, strategy
    assert allocate([reader], needs_write) is None
    # A task that needs no writing goes to the reader: no privilege it does not need.
    assert allocate([writer, reader], TaskNeeds()) == reader


def test_D9_admin_access_decides_allocation(store: AgentStore) -> None:
    worker = profile("worker", permissions={"write_access": True})
    admin = profile("admin", permissions={"write_access": True, "admin_access": True})
    needs_admin = TaskNeeds(task_id="rotate-keys", admin_access=True, write_access=True)
    assert needs_admin.reasons(worker) == ["no admin access"]
    for strategy in PoolStrategy:
        assert allocate([worker, admin], needs_admin, strategy=strategy) == admin, strategy
    served = store.dispatch([worker], [needs_admin], strategy="FIFO")
    assert served[0][1] is None
    assert store.agents() == []
    served = store.dispatch([worker, admin], [needs_admin], strategy="FIFO")
    assert served[0][1] is not None
    assert served[0][1].agent_type == "admin"


def test_D9_profile_errors_are_typed_and_name_field_and_value() -> None:
    with pytest.raises(AgentConfigError) as info:
        AgentProfile.model_validate(
            {
                "agent_type": "",
                "limits": {"max_concurrent_tasks": 0},
                "history": {"success_rate": 2},
            }
        )
    assert [(p.pointer, "(got" in p.message) for p in info.value.problems] == [
        ("/agent_type", True),
        ("/limits/max_concurrent_tasks", True),
        ("/history/success_rate", True),
    ]
    assert "(got 2)" in str(info.value)
    assert "(got 0)" in str(info.value)
    with pytest.raises(AgentConfigError, match="/tokens"):
        TaskNeeds(tokens=-1)
    # A profile row damaged on disk is a typed error too, not a pydantic one.
    db = AgentStore(":memory:", new_id=lambda: "x")
    db.allocate(profile("coder"))
    db._conn.execute("UPDATE agents SET profile = '{\"agent_type\": 3}'")
    with pytest.raises(AgentConfigError, match="/agent_type"):
        db.get("x")
    db.close()
    assert issubclass(AgentConfigError, ValueError)
