"""Agents: capability profiles, a lifecycle defined as data, and their SQLite record.

    from stargraph.agents import AgentProfile, AgentStore
    store = AgentStore("agents.db", writeback="block")
    agent = store.allocate(AgentProfile(agent_type="coder", permissions={"tools": ["choir.*"]}))
    store.spawn(agent.id)                        # PENDING -> INITIALIZING
    store.initialize(agent.id, skills=[skill])   # -> READY, or -> FAILED naming missing tools
    store.assign(agent.id, "task-1")             # -> BUSY
    store.task_update(agent.id, {"task_id": "task-1", "status": "done", "progress": 100,
                                 "summary": "..."})
    store.thought_record(agent.id, {"task_id": "task-1", "branch": "feature/x",
                                    "commit_sha": "abc123"})
    store.terminate(agent.id)                    # -> TERMINATED (writeback enforced)
    store.verify_chain()                         # None: the audit log is intact

Illegal transitions raise :class:`~stargraph.errors.LifecycleError`; ``orphan_scan()`` flags
terminated agents that never wrote a thought record (warning + event, nothing rolled back);
``allocate(profiles, TaskNeeds(...), strategy=...)`` picks a profile respecting skills,
permissions and limits under a pool strategy (FIFO, PRIORITY, ROUND_ROBIN, LEAST_LOADED,
CAPACITY_AWARE, or your own :class:`Strategy`), and ``store.dispatch(profiles, tasks)`` does
it for a queue of tasks against the store's live agents. ``spawn(agent_id, SpawnParams(...))``
injects the seven spawn parameters; :func:`skill_list` lists skills by the six-tier taxonomy.
Invalid agent data is an :class:`~stargraph.errors.AgentConfigError` naming field and value.

``store.submit(profile, TaskNeeds(...), parent="run-1")`` gives a task an agent while the
profile's ``limits`` leave a slot, queues it up to ``limits.queue_depth`` otherwise (then
:class:`~stargraph.errors.AgentQueueFullError`); an agent that ends frees its slot for the
next queued task and notifies its parent (``store.notifications(parent)``,
``store.wait_notification(parent)``). :class:`OrphanScanner` runs the orphan scan every N
seconds; :func:`phased_graph` runs a sub-agent's workflow as GATHER -> ANALYZE -> PLAN ->
APPLY with a checkpoint at each phase boundary.
"""

from __future__ import annotations

from stargraph.agents._lifecycle import DEFAULT_LIFECYCLE, LIFECYCLE_DATA, AgentState, Lifecycle
from stargraph.agents._phases import (
    PHASES,
    Phase,
    PhaseCheckpoint,
    phase_checkpoints,
    phased_graph,
)
from stargraph.agents._pipeline import Notification, QueuedTask
from stargraph.agents._pool import (
    STRATEGIES,
    Allocation,
    Candidate,
    PoolStrategy,
    Strategy,
    allocate,
    plan,
)
from stargraph.agents._profile import AgentProfile, History, Limits, Permissions, TaskNeeds
from stargraph.agents._scanner import OrphanScanner
from stargraph.agents._spawn import (
    ContextSnapshot,
    PoolAssignment,
    SpawnParams,
    WritebackContract,
    WritebackItem,
    task_slug,
)
from stargraph.agents._store import AgentRecord, AgentStore, AuditRow
from stargraph.agents._taxonomy import SkillListing, SkillTier, skill_list
from stargraph.agents._writeback import (
    AgentEvent,
    OrphanWarning,
    TaskUpdate,
    ThoughtRecord,
    WritebackMode,
    WritebackWarning,
)

__all__ = [
    "AgentEvent",
    "AgentProfile",
    "AgentRecord",
    "AgentState",
    "AgentStore",
    "Allocation",
    "AuditRow",
    "Candidate",
    "ContextSnapshot",
    "DEFAULT_LIFECYCLE",
    "History",
    "LIFECYCLE_DATA",
    "Lifecycle",
    "Limits",
    "Notification",
    "OrphanScanner",
    "OrphanWarning",
    "PHASES",
    "Permissions",
    "Phase",
    "PhaseCheckpoint",
    "PoolAssignment",
    "PoolStrategy",
    "QueuedTask",
    "STRATEGIES",
    "SkillListing",
    "SkillTier",
    "SpawnParams",
    "Strategy",
    "TaskNeeds",
    "TaskUpdate",
    "ThoughtRecord",
    "WritebackContract",
    "WritebackItem",
    "WritebackMode",
    "WritebackWarning",
    "allocate",
    "phase_checkpoints",
    "phased_graph",
    "plan",
    "skill_list",
    "task_slug",
]
