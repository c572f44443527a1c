"""Choir-style state-machine skills (SkillSpec) and nested schemas (issue 9).

A skill is an explicit state machine: each state has an objective, a tool allowlist and its
transitions; the model sees only the current state and may only propose what it allows
(seeds 000 and 001). The pieces:

* :func:`parse_skillspec` / :func:`load_skillspec` / :class:`SkillSpecRegistry` - load and
  validate SkillSpec JSON, every problem named by file and JSON pointer (A1-A8);
  :func:`validate_machine` is the one state-machine validator.
* :func:`skillspec_graph` / :func:`compile_skillspec` - compile to IR: one step node per
  state, edges routed on ``last_event``, a termination rule pack; a ``kind=agent``
  :class:`~stargraph.skills.Skill` that mounts with ``SubgraphNode.from_skill``.
* :class:`MachineRuntime` - runs skills on lanes (one per lane, ``cancel()``), sharing one
  model and one tool arbiter; transitions land in the arbiter's commit log.
* :class:`PromptBuilder` - master + (schema prompt, state prompt) per active level + user
  message + context, with masks; :mod:`nested schemas <stargraph.skills.machine._schemas>`
  (:class:`Schema`, :class:`SchemaSession`) stack levels and hot-swap the root loop.
"""

from __future__ import annotations

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
from stargraph.skills.machine._prompt import MaskPart, PromptBuilder, PromptLevel, Section, render
from stargraph.skills.machine._proposals import (
    Rejection,
    RejectionCode,
    commit_transition,
    transition_records,
)
from stargraph.skills.machine._registry import SkillLoadReport, SkillSpecRegistry, SkippedSpec
from stargraph.skills.machine._runtime import (
    CancelOutcome,
    MachineResult,
    MachineRuntime,
    SkillRun,
)
from stargraph.skills.machine._schemas import (
    Frame,
    Schema,
    SchemaLibrary,
    SchemaRunState,
    SchemaSession,
    SchemaState,
    SchemaTransition,
    Spawn,
    schema_graph,
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
    "CancelOutcome",
    "Frame",
    "MachineControl",
    "MachineEvent",
    "MachineOutput",
    "MachineResult",
    "MachineRuntime",
    "MachineShape",
    "MachineState",
    "MaskPart",
    "PromptBuilder",
    "PromptLevel",
    "Rejection",
    "RejectionCode",
    "Schema",
    "SchemaLibrary",
    "SchemaRunState",
    "SchemaSession",
    "SchemaState",
    "SchemaTransition",
    "Section",
    "SkillLoadReport",
    "SkillRun",
    "SkillSpec",
    "SkillSpecRegistry",
    "SkippedSpec",
    "Spawn",
    "StateShape",
    "StateSpec",
    "StepNote",
    "Transition",
    "commit_transition",
    "compile_skillspec",
    "load_skillspec",
    "machine_pack",
    "parse_skillspec",
    "render",
    "schema_graph",
    "skillspec_graph",
    "transition_records",
    "validate_machine",
]
