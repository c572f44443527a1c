"""Choir-style state-machine skills (SkillSpec) and nested schemas.

A skill is an explicit state machine: each state has an objective, a tool allowlist and its
transitions; the model sees only the current state and may only propose what it allows
(seeds 000 and 001). The pieces:

* :func:`parse_skillspec` / :func:`load_skillspec` / :class:`SkillSpecRegistry` - load and
  validate SkillSpec JSON, every problem named by file and JSON pointer;
  :func:`validate_machine` is the one state-machine validator.
* :func:`skillspec_graph` / :func:`compile_skillspec` - compile to IR: one step node per
  state, edges routed on ``last_event``, a termination rule pack; a ``kind=agent``
  :class:`~stargraph.skills.Skill` that mounts with ``SubgraphNode.from_skill``.
* :class:`MachineRuntime` - runs skills on lanes (one per lane, ``cancel()``), sharing one
  model and one tool arbiter; transitions land in the arbiter's commit log.
* :class:`PromptBuilder` - master + (schema prompt, state prompt) per active level + user
  message + context, with masks; :mod:`nested schemas <stargraph.skills.machine._schemas>`
  (:class:`Schema`, :class:`SchemaSession`) stack levels and hot-swap the root loop.
* :class:`Session` / :class:`SessionStore` - the session state machine above the lanes:
  start, heartbeat, stop, and crash recovery that resumes a dead session's skill runs from
  their checkpoints.
* :class:`LaneSession` - edge and core lanes running concurrently over one arbiter, each with
  a lane state machine (data, validated) and a :class:`WorkingMemory`.
* :class:`ProposalStore` and :func:`proposal_tools` - ``propose.*`` meta-tools that only store
  pending proposals; approval builds a new registry version; built-in
  ``skill-builder`` / ``tool-builder`` SkillSpecs (:func:`builtin_skillspecs`).
"""

from __future__ import annotations

from stargraph.skills.machine import _schemas
from stargraph.skills.machine._compile import (
    MachineControl,
    MachineEvent,
    MachineOutput,
    MachineState,
    StepNote,
    compile_skillspec,
    machine_pack,
    skillspec_graph,
)
from stargraph.skills.machine._lanes import (
    CORE_LANE_MACHINE,
    EDGE_LANE_MACHINE,
    CoreJobLauncher,
    Lane,
    LaneMachine,
    LaneSession,
    LaneTransitionError,
)
from stargraph.skills.machine._memory import CoreJobStart, MemoryEvent, WorkingMemory
from stargraph.skills.machine._prompt import MaskPart, PromptBuilder, PromptLevel, Section, render
from stargraph.skills.machine._proposals import (
    Rejection,
    RejectionCode,
    commit_transition,
    transition_records,
)
from stargraph.skills.machine._proposals_store import (
    ExecutableProposalError,
    InvalidProposalError,
    Proposal,
    ProposalError,
    ProposalNotFoundError,
    ProposalStateError,
    ProposalStore,
    builtin_skillspecs,
    executable_problems,
    proposal_tools,
    validator_tools,
)
from stargraph.skills.machine._registry import SkillLoadReport, SkillSpecRegistry, SkippedSpec
from stargraph.skills.machine._runtime import (
    CancelOutcome,
    MachineResult,
    MachineRuntime,
    SkillRun,
)
from stargraph.skills.machine._schemas import *
from stargraph.skills.machine._session import (
    RESUMABLE,
    SESSION_MACHINE,
    Session,
    SessionEvent,
    SessionRecord,
    SessionStore,
)
from stargraph.skills.machine._spec import (
    SkillSpec,
    StateSpec,
    Transition,
    load_skillspec,
    parse_skillspec,
)
from stargraph.skills.machine._validate import MachineShape, StateShape, validate_machine

__all__ = [
    "CORE_LANE_MACHINE",
    "CancelOutcome",
    "CoreJobLauncher",
    "CoreJobStart",
    "EDGE_LANE_MACHINE",
    "ExecutableProposalError",
    "InvalidProposalError",
    "Lane",
    "LaneMachine",
    "LaneSession",
    "LaneTransitionError",
    "MachineControl",
    "MachineEvent",
    "MachineOutput",
    "MachineResult",
    "MachineRuntime",
    "MachineShape",
    "MachineState",
    "MaskPart",
    "MemoryEvent",
    "PromptBuilder",
    "PromptLevel",
    "Proposal",
    "ProposalError",
    "ProposalNotFoundError",
    "ProposalStateError",
    "ProposalStore",
    "RESUMABLE",
    "Rejection",
    "RejectionCode",
    "SESSION_MACHINE",
    "Section",
    "Session",
    "SessionEvent",
    "SessionRecord",
    "SessionStore",
    "SkillLoadReport",
    "SkillRun",
    "SkillSpec",
    "SkillSpecRegistry",
    "SkippedSpec",
    "StateShape",
    "StateSpec",
    "StepNote",
    "Transition",
    "WorkingMemory",
    "builtin_skillspecs",
    "commit_transition",
    "compile_skillspec",
    "executable_problems",
    "load_skillspec",
    "machine_pack",
    "parse_skillspec",
    "proposal_tools",
    "render",
    "skillspec_graph",
    "transition_records",
    "validate_machine",
    "validator_tools",
]
# The nested schemas' names are listed once, in _schemas.__all__.
__all__ += _schemas.__all__
__all__.sort()
