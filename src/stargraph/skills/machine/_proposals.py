"""What the model may propose in a state, and what happens to an invalid proposal.

The model is offered exactly the current state's allowed tools (their ``llm_view``), one
function per transition event and - only in a terminal state - ``finish``. A proposal
the state does not allow is answered by a structured :class:`Rejection` and
executes nothing. A valid transition is appended to the arbiter's hash-chained commit log
as a record whose artifact holds ``{skill, from, to, on, step}`` plus lineage.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import orjson
from pydantic import ConfigDict, JsonValue

from stargraph._typed import TypedModel
from stargraph.errors import InvalidProposalError, ToolArgumentError, ToolSpecError
from stargraph.skills._services import ToolDispatcher
from stargraph.tools import (
    ArgumentModel,
    CommitEntry,
    canonical_json,
    failure_of,
    model_from_json_schema,
    sha256_hex,
    tool_id_from_llm_name,
)

__all__ = [
    "FINISH",
    "ProposalKind",
    "Rejection",
    "RejectionCode",
    "classify",
    "commit_transition",
    "event_function",
    "finish_function",
    "json_problems",
    "transition_records",
]

FINISH: Final = "finish"
"""The function that ends a skill from a terminal state."""

TRANSITION_STATUS: Final = "transition"
"""Commit-log ``status`` of a state transition record."""

RejectionCode = Literal[
    "tool_not_allowed",
    "invalid_transition",
    "finish_not_terminal",
    "invalid_output",
    "no_proposal",
    "spawn_not_declared",
    "awaiting_child",
]
"""Why a proposal was rejected: the seed's three codes, plus an output that fails
``output_schema``, a reply with no proposal at all, an undeclared sub-schema, and an event
that only a spawned child's exit may fire (a spawning state completes when its child
exits)."""

ProposalKind = Literal["finish", "transition", "tool", "spawn", "unknown"]
"""What a function name proposes in a given state."""


class Rejection(TypedModel):
    """The structured answer to an invalid proposal: what was proposed, what is
    allowed, and how many retries are left in this step. Nothing was executed."""

    typed_error = InvalidProposalError

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: RejectionCode
    """Why it was rejected."""
    state: str
    """The current state."""
    proposed: str
    """The function name (tool, event) the model proposed."""
    allowed_tools: tuple[str, ...]
    """The tools the current state allows."""
    valid_transitions: tuple[dict[str, str], ...]
    """The current state's transitions, ``{"on", "to"}`` each."""
    retries_left: int
    """Invalid proposals still tolerated in this step before the error transition."""

    def to_json(self) -> dict[str, JsonValue]:
        """``{code, state, proposed, allowed_tools[], valid_transitions[{on,to}],
        retries_left}``."""
        return self.model_dump(mode="json")


def event_function(on: str, description: str = "") -> dict[str, Any]:
    """The function offered for transition event ``on``."""
    return {
        "type": "function",
        "function": {
            "name": on,
            "description": description or f"Propose the transition event {on!r}.",
            "parameters": {
                "type": "object",
                "properties": {"reason": {"type": "string", "description": "Why, briefly."}},
                "additionalProperties": False,
            },
        },
    }


def finish_function(output_schema: Mapping[str, Any]) -> dict[str, Any]:
    """``finish``: its parameters are the skill's ``output_schema``."""
    return {
        "type": "function",
        "function": {
            "name": FINISH,
            "description": "End the skill with its output (only valid in a terminal state).",
            "parameters": dict(output_schema),
        },
    }


def classify(name: str, *, events: Sequence[str], spawns: Sequence[str] = ()) -> ProposalKind:
    """What the function ``name`` proposes: ``finish``, a transition event of this state,
    a sub-schema spawn, a tool (anything that looks like a tool name), else ``unknown``
    (an event this state does not have: ``invalid_transition``)."""
    if name == FINISH:
        return "finish"
    if name in events:
        return "transition"
    if name in spawns:
        return "spawn"
    if "." in name or tool_id_from_llm_name(name) is not None:
        return "tool"
    return "unknown"


_VALIDATORS: dict[str, ArgumentModel] = {}


def json_problems(schema: Mapping[str, Any], value: Any, *, what: str) -> list[str]:
    """Every way ``value`` fails the JSON Schema ``schema`` (empty when it fits).

    Uses the arbiter's JSON Schema subset (strict JSON semantics), so a skill's input and
    output are checked exactly like tool arguments.
    """
    key = sha256_hex(canonical_json(dict(schema)))
    validator = _VALIDATORS.get(key)
    if validator is None:
        try:
            validator = model_from_json_schema(schema, name=what, source=what)
        except ToolSpecError as exc:
            return [p.render() for p in exc.problems]
        _VALIDATORS[key] = validator
    if not isinstance(value, dict):
        return [f"{what} must be a JSON object, got {type(value).__name__}"]
    try:
        validator.validate(what, value)
    except ToolArgumentError as exc:
        return [f"{p.field}: {p.message}" for p in failure_of(exc).fields] or [str(exc)]
    return []


def commit_transition(arbiter: ToolDispatcher, record: Mapping[str, JsonValue]) -> str:
    """Append a transition to the arbiter's commit log; returns the record's hash.

    The commit log's record shape is fixed (tool calls), so the transition is an entry with
    ``tool="skill:<name>"``, ``status="transition"`` and the canonical record stored as its
    artifact (``args_hash`` is that record's sha256): the chain covers it all the same.
    """
    data = canonical_json(dict(record))
    ref = arbiter.artifacts.put(data)
    entry = CommitEntry(
        lane=str(record.get("lane") or "core"),
        tool=f"skill:{record['skill']}",
        call_id=f"{record['from']}->{record['to']}@{record['step']}",
        args_hash=sha256_hex(data),
        status=TRANSITION_STATUS,
        artifact_ref=ref,
    )
    return arbiter.commit_log.append(entry).hash


def transition_records(arbiter: ToolDispatcher) -> list[dict[str, Any]]:
    """Every transition in the arbiter's commit log, in order, as recorded."""
    out = []
    for record in arbiter.commit_log.records():
        if record.status == TRANSITION_STATUS and record.artifact_ref:
            out.append(orjson.loads(arbiter.artifacts.get(record.artifact_ref)))
    return out


# The offered tool views per arbiter and allowlist (the registry behind an arbiter is frozen).
_OFFERED: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], tuple[dict[str, Any], ...]]]
_OFFERED = weakref.WeakKeyDictionary()


def offered_tools(arbiter: ToolDispatcher, allowed: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The ``llm_view`` of every registered tool the allowlist covers (cached)."""
    key = tuple(allowed)
    # A durable run wraps the arbiter anew for every task: key the cache on the arbiter
    # underneath, or each step would build the views again.
    per_arbiter = _OFFERED.setdefault(getattr(arbiter, "arbiter", arbiter), {})
    found = per_arbiter.get(key)
    if found is None:
        found = per_arbiter[key] = tuple(arbiter.registry.llm_tools(key)) if key else ()
    return found
