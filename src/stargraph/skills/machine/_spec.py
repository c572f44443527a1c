"""Choir SkillSpec documents: the frozen model, the collecting parser, and the file loader.

A SkillSpec is JSON::

    {"name": "build_feature", "description": "...", "initial_state": "understand",
     "input_schema": {...}, "output_schema": {...},
     "states": {"understand": {"objective": "...", "allowed_tools": ["choir.memory.query"],
                               "transitions": [{"on": "complete", "to": "plan"}]},
                "done": {"terminal": true}},
     "max_steps": 20, "interruptible": true}

and may fix the request options of every model call the machine makes (``"temperature": 0``,
``"request": {"max_tokens": 256, "seed": 7}``: the fields of
:class:`~stargraph.llm.RequestOptions`).

:func:`parse_skillspec` checks types, the machine (through
:func:`~stargraph.skills.machine.validate_machine`), the JSON Schemas and, given a tool
registry, every ``allowed_tools`` entry. It collects every problem, each named
``<file>#<JSON pointer>``, into one :class:`~stargraph.errors.SkillValidationError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BeforeValidator, ConfigDict, Field, JsonValue

from stargraph.errors import Problem, SkillValidationError, ToolSpecError
from stargraph.ir._canonical import non_canonical
from stargraph.llm import RequestOptions
from stargraph.skills._files import SkillModel, read_utf8
from stargraph.skills._services import options_from_data
from stargraph.skills.machine._validate import MachineShape, StateShape, validate_machine
from stargraph.tools import ToolRegistry, matches_allowlist, model_from_json_schema

__all__ = [
    "SkillSpec",
    "StateSpec",
    "Transition",
    "load_skillspec",
    "parse_skillspec",
]

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
_NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_TOP: Final = {
    "name": str,
    "description": str,
    "initial_state": str,
    "input_schema": dict,
    "output_schema": dict,
    "states": dict,
    "max_steps": int,
    "interruptible": bool,
}
# Optional: the request options of the machine's model calls.
_OPTIONS: Final = ("temperature", "request")
_STATE_KEYS: Final = frozenset({"objective", "allowed_tools", "transitions", "terminal"})
_TYPE_NAMES: Final = {
    str: "a string",
    dict: "an object",
    int: "an integer",
    bool: "a boolean",
    list: "an array",
}


KnownTools = ToolRegistry | Collection[str]
"""What ``allowed_tools`` entries are checked against: the tool registry (by id, name or
namespace wildcard) or any collection of tool ids."""


def _none_admits_nothing(value: Any) -> Any:
    # Deny by default: a state defines exactly the tools it may call (seed 000), so no
    # allowlist is the empty one, never "any tool".
    return () if value is None else value


ToolAllowlist = Annotated[tuple[str, ...], BeforeValidator(_none_admits_nothing)]
"""The tools a machine state admits; ``None`` is read as the empty allowlist."""


class Transition(SkillModel):
    """``{"on": event, "to": state}``: on ``event`` the machine moves to ``state``."""

    model_config = _FROZEN

    on: str
    """The event the model proposes (offered to it as a function of that name)."""
    to: str
    """The state entered."""


class StateSpec(SkillModel):
    """One phase of a skill: what the model should do and the moves it may make."""

    model_config = _FROZEN

    objective: str = ""
    """What the model should accomplish in this state (the only objective it sees)."""
    allowed_tools: ToolAllowlist = ()
    """Tools the model may call here: a hard allowlist enforced by the arbiter. Empty (or
    ``None``) admits no tool: a call is refused as ``tool_not_allowed``."""
    transitions: tuple[Transition, ...] = ()
    """The valid exits of this state."""
    terminal: bool = False
    """An end state: no transitions; ``finish`` is offered here and only here."""

    def transition_for(self, event: str) -> Transition | None:
        """The transition taken on ``event``, or ``None``."""
        return next((t for t in self.transitions if t.on == event), None)


class SkillSpec(SkillModel):
    """A Choir SkillSpec: a skill as an explicit state machine.

    Build one with :func:`parse_skillspec` / :func:`load_skillspec`, which validate
    everything; ``source`` is the file it came from (cosmetic: not part of any hash).
    """

    model_config = _FROZEN

    name: str
    """Unique skill identifier."""
    description: str
    """Human-readable purpose."""
    initial_state: str
    """The state a run starts in."""
    input_schema: dict[str, JsonValue]
    """JSON Schema of the skill's input, checked at start."""
    output_schema: dict[str, JsonValue]
    """JSON Schema of the output, checked at ``finish``."""
    states: dict[str, StateSpec]
    """State name -> state."""
    max_steps: int = Field(ge=1)
    """LLM steps allowed before the run is force-terminated."""
    interruptible: bool
    """Whether ``cancel()`` stops the run at the next step boundary."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    """The sampling temperature of every model call; ``None`` leaves the endpoint's."""
    request: RequestOptions | None = None
    """Further request options of every model call (``max_tokens``, ``seed`` ...)."""
    source: str = Field("<memory>", exclude=True)
    """Where the spec was read from."""

    def to_json(self) -> dict[str, Any]:
        """The SkillSpec document (``source`` left out)."""
        out = self.model_dump(mode="json")
        # Left out when unset, so a spec without options reads (and hashes) as before.
        for key in _OPTIONS:
            if out[key] is None:
                del out[key]
        if self.request is not None:
            out["request"] = self.request.model_dump(mode="json", exclude_defaults=True)
        for state in out["states"].values():
            if state["terminal"]:
                for key in ("objective", "allowed_tools", "transitions"):
                    if not state[key]:
                        del state[key]
            else:
                del state["terminal"]
        return out


def _type_ok(value: Any, expected: type) -> bool:
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _describe(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_skillspec(
    data: Any, *, source: str = "<memory>", tools: KnownTools | None = None
) -> SkillSpec:
    """Validate a SkillSpec document (parsed JSON) and build the :class:`SkillSpec`.

    ``tools`` is the tool registry (or any collection of tool ids) that ``allowed_tools``
    entries must name; ``None`` skips that check. Raises one
    :class:`~stargraph.errors.SkillValidationError` listing every problem as
    ``<source>#<pointer>: <message> (fix: <hint>)``.
    """
    where = f"{source}#"
    problems: list[Problem] = []
    if not isinstance(data, dict):
        raise SkillValidationError(
            [Problem(f"{where}", f"a SkillSpec must be a JSON object, got {_describe(data)}")],
            subject=f"SkillSpec {source}",
        )
    for key, expected in _TOP.items():
        if key not in data:
            problems.append(Problem(f"{where}/{key}", f"missing field {key!r}", f"add {key!r}"))
        elif not _type_ok(data[key], expected):
            problems.append(
                Problem(
                    f"{where}/{key}",
                    f"{key!r} must be {_TYPE_NAMES[expected]}, got {_describe(data[key])}",
                    f"make {key!r} {_TYPE_NAMES[expected]}",
                )
            )
    for key in sorted(set(data) - set(_TOP) - set(_OPTIONS)):
        problems.append(
            Problem(
                f"{where}/{key}",
                f"unknown field {key!r}"
                + (" (a SkillSpec cannot spawn other skills)" if "spawn" in key else ""),
                f"remove it; SkillSpec fields are {sorted([*_TOP, *_OPTIONS])}",
            )
        )
    name = data.get("name")
    if isinstance(name, str) and not _NAME.match(name):
        problems.append(
            Problem(
                f"{where}/name", f"name {name!r} is not an identifier", "use e.g. build_feature"
            )
        )
    if _type_ok(data.get("max_steps"), int) and data["max_steps"] < 1:
        problems.append(
            Problem(f"{where}/max_steps", f"max_steps must be >= 1, got {data['max_steps']}")
        )
    for pointer, reason in non_canonical(data):
        # The spec is hashed into the graph (RFC 8785): refuse here, naming the value,
        # what the IR would refuse later without saying which file.
        problems.append(
            Problem(f"{where}{pointer}", reason, "use a value JSON carries exactly (or a string)")
        )
    for key in ("input_schema", "output_schema"):
        schema = data.get(key)
        if isinstance(schema, dict):
            problems.extend(_schema_problems(schema, source, key))
    states: dict[str, StateSpec] = {}
    raw_states = data.get("states")
    if isinstance(raw_states, dict):
        if not raw_states:
            problems.append(Problem(f"{where}/states", "no states", "declare at least two states"))
        for state_name, raw in raw_states.items():
            state = _parse_state(raw, f"{where}/states/{state_name}", problems)
            if state is not None:
                states[str(state_name)] = state
        if len(states) == len(raw_states) and isinstance(data.get("initial_state"), str):
            shape = MachineShape(
                data["initial_state"],
                {
                    n: StateShape([(t.on, t.to) for t in s.transitions], s.terminal)
                    for n, s in states.items()
                },
                where=where,
            )
            problems.extend(validate_machine(shape))
    if tools is not None:
        problems.extend(_tool_problems(states, tools, where))
    request = options_from_data(data, where, problems)
    if problems:
        raise SkillValidationError(problems, subject=f"SkillSpec {source}")
    return SkillSpec.model_validate(
        {**data, "states": states, "request": request, "source": source}
    )


def _parse_state(raw: Any, here: str, problems: list[Problem]) -> StateSpec | None:
    if not isinstance(raw, dict):
        problems.append(Problem(here, f"a state must be an object, got {_describe(raw)}"))
        return None
    before = len(problems)
    for key in sorted(set(raw) - _STATE_KEYS):
        problems.append(
            Problem(f"{here}/{key}", f"unknown state field {key!r}", f"use {sorted(_STATE_KEYS)}")
        )
    objective = raw.get("objective", "")
    if not isinstance(objective, str):
        problems.append(Problem(f"{here}/objective", "objective must be a string"))
    terminal = raw.get("terminal", False)
    if not isinstance(terminal, bool):
        problems.append(Problem(f"{here}/terminal", "terminal must be a boolean"))
    tools = raw.get("allowed_tools", [])
    if not isinstance(tools, list):
        problems.append(Problem(f"{here}/allowed_tools", "allowed_tools must be an array"))
        tools = []
    for i, entry in enumerate(tools):
        if not isinstance(entry, str) or not entry:
            problems.append(
                Problem(f"{here}/allowed_tools/{i}", f"tool name must be a string: {entry!r}")
            )
    transitions = raw.get("transitions", [])
    if not isinstance(transitions, list):
        problems.append(Problem(f"{here}/transitions", "transitions must be an array"))
        transitions = []
    parsed: list[Transition] = []
    for i, item in enumerate(transitions):
        at = f"{here}/transitions/{i}"
        if not isinstance(item, dict):
            problems.append(Problem(at, "a transition must be an object {on, to}"))
            continue
        for key in sorted(set(item) - {"on", "to"}):
            problems.append(Problem(f"{at}/{key}", f"unknown transition field {key!r}"))
        for key in ("on", "to"):
            if not isinstance(item.get(key), str):
                problems.append(
                    Problem(
                        f"{at}/{key}", f"{key!r} must be a string, got {_describe(item.get(key))}"
                    )
                )
        if isinstance(item.get("on"), str) and isinstance(item.get("to"), str):
            parsed.append(Transition(on=item["on"], to=item["to"]))
    if len(problems) > before:
        return None
    return StateSpec(
        objective=objective,
        allowed_tools=tuple(tools),
        transitions=tuple(parsed),
        terminal=terminal,
    )


def _schema_problems(schema: Mapping[str, Any], source: str, key: str) -> list[Problem]:
    """The JSON Schema must be an object schema in the subset the arbiter validates."""
    try:
        model_from_json_schema(schema, name=key, source=source, pointer=f"/{key}")
    except ToolSpecError as exc:
        return [
            Problem(p.pointer, p.message, p.hint or "use the supported JSON Schema subset")
            for p in exc.problems
        ]
    except (TypeError, ValueError, AttributeError) as exc:
        return [Problem(f"{source}#/{key}", f"not a usable JSON Schema: {exc}")]
    return []


def _tool_problems(states: Mapping[str, StateSpec], tools: KnownTools, where: str) -> list[Problem]:
    if isinstance(tools, ToolRegistry):
        ids = tools.ids
    else:  # any registry-like object with .ids works too (duck-typed, as before)
        ids = tuple(getattr(tools, "ids", None) or tools)
    problems = []
    for name, state in states.items():
        for i, entry in enumerate(state.allowed_tools):
            found = entry in tools or any(matches_allowlist(t, [entry]) for t in ids)
            if not found:
                problems.append(
                    Problem(
                        f"{where}/states/{name}/allowed_tools/{i}",
                        f"state {name!r} allows tool {entry!r}, which is not in the tool registry",
                        "register the tool or remove it from allowed_tools",
                    )
                )
    return problems


def load_skillspec(path: str | Path, *, tools: KnownTools | None = None) -> SkillSpec:
    """Read and validate one SkillSpec ``.json`` file (see :func:`parse_skillspec`).

    The file must be UTF-8 (a byte-order mark is allowed); anything else is a
    :class:`~stargraph.errors.SkillValidationError` naming the file and the first bad byte.
    """
    path = Path(path)
    # utf-8-sig: editors on Windows save JSON with a BOM, which json.loads refuses.
    text = read_utf8(
        path,
        subject=f"SkillSpec {path}",
        encoding="utf-8-sig",
        rule="SkillSpec files must be UTF-8 JSON",
    )
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: also ints of 4300+ digits
        line = getattr(exc, "lineno", "?")
        raise SkillValidationError(
            [Problem(f"{path}#", f"invalid JSON (line {line}): {exc}", "fix the JSON")],
            subject=f"SkillSpec {path}",
        ) from None
    return parse_skillspec(data, source=str(path), tools=tools)
