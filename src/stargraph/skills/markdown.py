"""SKILL.md: skills written as a markdown file with YAML frontmatter (rows D1-D4).

A skill folder holds ``SKILL.md`` and, optionally, a ``references/`` folder of supporting
documents (recorded, not read)::

    ---
    name: save-notes                      # ^[a-z][a-z0-9-]+$
    description: Copy the notes into the archive.
    version: 1.0.0                        # SemVer; default 0.1.0
    kind: workflow                        # agent | workflow | utility
    tools: [choir.fs.read@1.0.0, choir.fs.write@1.0.0]
    triggers: [archive notes, "#notes", "tool:choir.fs.*"]
    required_tools: [choir.fs.read, choir.fs.write]
    workflow:
      - {step: read the notes, tool: choir.fs.read@1.0.0, params: {path: notes.txt}}
      - {step: archive them, tool: choir.fs.write@1.0.0,
         params: {path: archive/notes.txt, content: archived}}
    verification:
      - "the archive exists"                                  # prose: listed, not checked
      - {check: archived, tool: choir.fs.read@1.0.0, params: {path: archive/notes.txt},
         contains: archived}
    ---
    The body becomes the skill's system prompt.

Without frontmatter the donor's section format is read instead: ``## Triggers``,
``## Required tools``, ``## Workflow``, ``## Verification`` ... headings whose content is the
YAML (a bulleted list is YAML); the name comes from a ``## Name`` section or a slug ``#``
title, and the remaining sections form the system prompt.

What a file compiles to:

* ``workflow`` - a linear graph over :class:`WorkflowState`: one node per step that calls
  the step's tool through ``ctx.services["arbiter"]`` with its static ``params`` (node config,
  so in the graph hash), then a ``verify`` node for ``verification``. A failed step halts the
  run (rule ``workflow/step_failed``); failed checks are listed in
  ``verification_failures`` and halt it with rule ``workflow/verification_failed``, so
  ``stopped_by`` in the run record says which, and the state still holds every result.
  (A run error was the alternative; a halt keeps the results inspectable.)
* ``kind: agent`` without ``workflow`` - :func:`~stargraph.skills.react.react_skill` over the
  skill's ``tools`` with the body as system prompt (``model``, ``max_steps``,
  ``error_budget``, ``temperature`` are passed through when given).

Every problem of a file is collected and raised as one
:class:`~stargraph.errors.SkillValidationError` whose pointers read ``<file>#/<key>``.
Unknown keys are kept (``MarkdownSkill.extra``) and warned about with
:class:`UnknownKeyWarning`. ``skill_md_loaders()`` plugs the loader into
``Registry.build(..., skill_loaders=...)``; ``registry.match(task)`` uses
:meth:`MarkdownSkill.matches`.
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from stargraph import fathom, reducers
from stargraph.errors import (
    NodeError,
    Problem,
    SkillValidationError,
    StargraphWarning,
    ToolError,
)
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext
from stargraph.skills import SEMVER, SLUG, TOOL_ID, Example, Skill, SkillKind

__all__ = [
    "ENV_VAR",
    "Check",
    "MarkdownSkill",
    "StepResult",
    "Trigger",
    "UnknownKeyWarning",
    "WorkflowOutput",
    "WorkflowState",
    "WorkflowStep",
    "discover_skill_dirs",
    "load_skill_md",
    "parse_skill_md",
    "registry_dirs",
    "skill_md_loaders",
    "workflow_graph",
]

ENV_VAR: Final = "STARGRAPH_SKILLS_DIR"
"""Environment variable naming a skills directory (searched first)."""

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
_KNOWN: Final = (
    "name",
    "description",
    "version",
    "kind",
    "tools",
    "requires",
    "triggers",
    "required_tools",
    "workflow",
    "verification",
    "examples",
    "model",
    "max_steps",
    "error_budget",
    "temperature",
)
# Tool names in workflow steps and required_tools: ``ns.name``, optionally ``@<semver>``.
_TOOL_NAME: Final = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+(@\S+)?$")
_FRONTMATTER: Final = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*\r?$\n?", re.S | re.M
)
_HEADING: Final = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_WORD_TOKEN: Final = re.compile(r"[A-Za-z0-9_.@*-]+")


class UnknownKeyWarning(StargraphWarning):
    """A SKILL.md frontmatter has keys stargraph does not know (they are kept in ``extra``)."""


# --------------------------------------------------------------------------- data


class Trigger(BaseModel):
    """When a skill applies (D4): a keyword or phrase, a ``#tag``, or a tool pattern.

    Written in frontmatter as ``"archive notes"`` (keyword), ``"#notes"`` or ``"tag:notes"``
    (tag), ``"tool:choir.fs.*"`` (tool pattern), or ``{keyword|tag|tool: value}``.

    >>> Trigger.parse("tool:choir.fs.*").matches("then call choir.fs.read on it")
    True
    """

    model_config = _FROZEN

    kind: Literal["keyword", "tag", "tool"]
    """What ``value`` is matched against."""
    value: str
    """The keyword/phrase, the tag (without ``#``), or the ``fnmatch`` tool pattern."""

    @classmethod
    def parse(cls, raw: str | Mapping[str, str]) -> Trigger:
        """A trigger from its frontmatter form."""
        if isinstance(raw, Mapping):
            ((kind, value),) = raw.items()
            return cls(kind=kind, value=value.lstrip("#") if kind == "tag" else value)
        if raw.startswith("#"):
            return cls(kind="tag", value=raw[1:])
        head, sep, rest = raw.partition(":")
        if sep and head in ("tag", "tool", "keyword"):
            return cls(kind=head, value=rest.strip().lstrip("#") if head == "tag" else rest.strip())
        return cls(kind="keyword", value=raw)

    def matches(self, task: str) -> bool:
        """Whether ``task`` (free text) triggers this: the keyword as whole words, ``#tag``
        as a token, or a tool-like token matching the pattern (case-insensitive)."""
        text = task.lower()
        value = self.value.lower()
        if self.kind == "keyword":
            return re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", text) is not None
        if self.kind == "tag":
            return re.search(r"(?<!\w)#" + re.escape(value) + r"(?![\w-])", text) is not None
        for raw in _WORD_TOKEN.findall(text):
            token = raw.strip(".-")
            if fnmatch.fnmatchcase(token, value) or fnmatch.fnmatchcase(
                token.partition("@")[0], value
            ):
                return True
        return False


class WorkflowStep(BaseModel):
    """One ``workflow`` entry: a description, the tool to call and its static params."""

    model_config = _FROZEN

    step: str
    """What the step does (shown in results and errors)."""
    tool: str
    """Tool id or ``ns.name``."""
    params: dict[str, JsonValue] = {}
    """Arguments, fixed when the file is written (they are part of the graph hash)."""


class Check(BaseModel):
    """One machine-checked ``verification`` entry (prose entries stay plain strings).

    It inspects the result of ``step`` (1-based index or step description; default the last
    step) or, with ``tool``, the result of calling that tool with ``params`` at verify time;
    the result must have ``status`` and, when given, ``contains`` a text / ``equals`` a value.
    """

    model_config = _FROZEN

    check: str = ""
    """What is checked (names the check in failures)."""
    step: int | str | None = None
    """Which workflow step's result to inspect."""
    tool: str | None = None
    """A tool to call instead (e.g. read back a written file)."""
    params: dict[str, JsonValue] = {}
    """Arguments for ``tool``."""
    status: str = "success"
    """Expected ``ToolResult.status``."""
    contains: str | None = None
    """Text the payload must contain (JSON payloads are searched as canonical JSON)."""
    equals: JsonValue = None
    """Exact payload expected (``None``: not checked)."""


class StepResult(BaseModel):
    """What one workflow step (or a verification tool call) produced."""

    model_config = _FROZEN

    index: int
    """1-based step number (0 for a verification call)."""
    step: str
    """The step's description."""
    tool: str
    """The canonical tool id the arbiter resolved."""
    status: str
    """``ToolResult.status``."""
    summary: str
    """The result summary or the failure reason."""
    payload: JsonValue = None
    """The result payload, when the tool returned one inline."""


class WorkflowOutput(BaseModel):
    """The declared output channels of a SKILL.md workflow skill."""

    steps: Annotated[list[StepResult], reducers.append] = []
    """Every step's result, in order."""
    verification_failures: list[str] = []
    """Every failed verification check, each naming the check and what was found."""
    verification_unchecked: list[str] = []
    """Prose checks the verify node cannot evaluate (for a human or a reviewer)."""
    verified: bool = False
    """True when the verify node ran and every machine check passed."""


class WorkflowState(WorkflowOutput):
    """State of a SKILL.md workflow graph: the outputs plus the facts its rules read."""

    step_failed: Annotated[bool, fathom.Fact()] = False
    """A step's tool call failed; rule ``workflow/step_failed`` halts the run."""
    verification_failed: Annotated[bool, fathom.Fact()] = False
    """A check failed; rule ``workflow/verification_failed`` halts the run."""


class MarkdownSkill(Skill):
    """A :class:`~stargraph.skills.Skill` read from a SKILL.md, with the file's extra data."""

    triggers: tuple[Trigger, ...] = ()
    """When the skill applies; see :meth:`matches`."""
    required_tools: tuple[str, ...] = ()
    """Tools the skill needs; an agent whose permissions lack one fails initialization."""
    workflow: tuple[WorkflowStep, ...] = ()
    """The steps the workflow graph runs, in order."""
    verification: tuple[str | Check, ...] = ()
    """Prose and machine checks for the verify node."""
    references: tuple[str, ...] = ()
    """Files under the skill's ``references/`` folder, relative to the skill folder."""
    source: str | None = None
    """The SKILL.md path."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Frontmatter keys stargraph does not know, kept as read."""

    def matches(self, task: str) -> bool:
        """Whether any trigger matches ``task`` (used by ``Registry.match``)."""
        return any(trigger.matches(task) for trigger in self.triggers)


# --------------------------------------------------------------------------- parsing


def load_skill_md(path: str | os.PathLike[str]) -> MarkdownSkill:
    """Read one SKILL.md (and its ``references/`` listing) into a :class:`MarkdownSkill`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillValidationError(
            [Problem(f"{path}#", f"cannot read the file: {exc}", "check the path and encoding")],
            subject=f"SKILL.md {path}",
        ) from None
    refs = path.parent / "references"
    references = (
        tuple(sorted(str(p.relative_to(path.parent)) for p in refs.rglob("*") if p.is_file()))
        if refs.is_dir()
        else ()
    )
    return parse_skill_md(text, source=str(path), references=references)


def parse_skill_md(
    text: str, *, source: str = "<memory>", references: tuple[str, ...] = ()
) -> MarkdownSkill:
    """Parse SKILL.md text; raise one ``SkillValidationError`` listing every problem."""
    where = f"{source}#"
    problems: list[Problem] = []
    found = _FRONTMATTER.match(text)
    if found is not None:
        body = text[found.end() :]
        try:
            data: Any = yaml.safe_load(found.group(1))
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise SkillValidationError(
                [Problem(where, f"frontmatter is not valid YAML: {exc}", "fix the YAML")],
                subject=f"SKILL.md {source}",
            ) from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SkillValidationError(
                [
                    Problem(
                        where,
                        f"frontmatter must be a mapping, got {type(data).__name__}",
                        "write 'key: value' lines between the --- markers",
                    )
                ],
                subject=f"SKILL.md {source}",
            )
    elif text.lstrip("\ufeff").startswith("---"):
        raise SkillValidationError(
            [Problem(where, "frontmatter has no closing '---' line", "close it with ---")],
            subject=f"SKILL.md {source}",
        )
    else:
        data, body, problems = _donor_sections(text, where)
    fields = _fields(data, body, where, problems)
    if problems:
        raise SkillValidationError(problems, subject=f"SKILL.md {source}")
    unknown = sorted(str(k) for k in data if k not in _KNOWN)
    if unknown:
        warnings.warn(
            f"{source}: unknown frontmatter keys {unknown} are kept in MarkdownSkill.extra "
            f"but not used (known keys: {list(_KNOWN)})",
            UnknownKeyWarning,
            stacklevel=2,
        )
    extra = {str(k): v for k, v in data.items() if k not in _KNOWN}
    try:
        return _build(fields, source=source, references=references, extra=extra)
    except SkillValidationError as exc:
        raise SkillValidationError(
            [Problem(f"{where}{p.pointer}", p.message, p.hint) for p in exc.problems],
            subject=f"SKILL.md {source}",
        ) from None


def _donor_sections(text: str, where: str) -> tuple[dict[str, Any], str, list[Problem]]:
    """The donor layout: ``## Key`` headings with YAML content; the rest is the prompt."""
    data: dict[str, Any] = {}
    problems: list[Problem] = []
    prompt: list[str] = []
    heads = list(_HEADING.finditer(text))
    prompt.append(text[: heads[0].start()] if heads else text)
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        content = text[head.end() : end]
        key = re.sub(r"[\s-]+", "_", head.group(2).strip().lower())
        if key not in _KNOWN:
            if len(head.group(1)) == 1 and "name" not in data and SLUG.match(head.group(2)):
                data["name"] = head.group(2)
                prompt.append(content)
            else:
                prompt.append(text[head.start() : end])
            continue
        if key in ("name", "description", "version", "kind", "model"):
            data[key] = content.strip()
            continue
        try:
            data[key] = yaml.safe_load(content)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
            problems.append(
                Problem(f"{where}/{key}", f"section is not valid YAML: {exc}", "fix it")
            )
    body = "".join(prompt)
    if "description" not in data:
        paragraph = next((p.strip() for p in body.split("\n\n") if p.strip()), "")
        if paragraph:
            data["description"] = " ".join(paragraph.split())
    return data, body, problems


def _json_ok(value: Any, depth: int = 0) -> bool:
    if depth > 64:
        return False
    if value is None or isinstance(value, str | bool | int):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_ok(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_ok(v, depth + 1) for k, v in value.items())
    return False


def _str_list(data: Mapping[Any, Any], key: str, where: str, problems: list[Problem]) -> list[str]:
    value = data.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(
            Problem(
                f"{where}/{key}",
                f"{key!r} must be a list of non-empty strings, got {_show(value)}",
                f"write {key}: [a, b]",
            )
        )
        return []
    return list(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields(
    data: Mapping[Any, Any], body: str, where: str, problems: list[Problem]
) -> dict[str, Any]:
    """Type-check every known key; collect problems; return Skill-ready values."""
    out: dict[str, Any] = {}
    for key in ("name", "description"):
        value = data.get(key)
        if value is None:
            problems.append(Problem(f"{where}/{key}", f"missing {key!r}", f"add '{key}: ...'"))
        elif not isinstance(value, str) or not value.strip():
            problems.append(
                Problem(f"{where}/{key}", f"{key!r} must be a non-empty string, got {_show(value)}")
            )
        else:
            out[key] = value.strip()
    if "name" in out and not SLUG.match(out["name"]):
        problems.append(
            Problem(
                f"{where}/name",
                f"name {out['name']!r} does not match ^[a-z][a-z0-9-]+$",
                "use lowercase letters, digits and dashes, e.g. 'web-research'",
            )
        )
    version = data.get("version", "0.1.0")
    if not isinstance(version, str) or not SEMVER.match(version):
        problems.append(
            Problem(f"{where}/version", f"version is not SemVer: {_show(version)}", "use 1.2.0")
        )
    out["version"] = version
    kind = data.get("kind", "workflow" if data.get("workflow") else "agent")
    if kind not in tuple(SkillKind):
        problems.append(
            Problem(
                f"{where}/kind", f"unknown kind {_show(kind)}", "use agent, workflow or utility"
            )
        )
    out["kind"] = kind
    tools = _str_list(data, "tools", where, problems)
    for i, tool in enumerate(tools):
        if not TOOL_ID.match(tool):
            problems.append(
                Problem(
                    f"{where}/tools/{i}",
                    f"tool id {tool!r} is not '<ns>.<name>@<semver>'",
                    "write e.g. 'choir.fs.read@1.0.0'",
                )
            )
    out["tools"] = tuple(tools)
    out["requires"] = tuple(_str_list(data, "requires", where, problems))
    out["required_tools"] = tuple(_str_list(data, "required_tools", where, problems))
    out["triggers"] = _triggers(data.get("triggers"), where, problems)
    out["workflow"] = _workflow(data.get("workflow"), tools, where, problems)
    out["verification"] = _verification(data.get("verification"), where, problems)
    out["examples"] = _examples(data.get("examples"), where, problems)
    if out["kind"] in ("workflow", "utility") and not out["workflow"]:
        problems.append(
            Problem(
                f"{where}/workflow",
                f"a {out['kind']} skill needs workflow steps",
                "add 'workflow: [{step, tool, params}]' or make it kind: agent",
            )
        )
    for key, types, low in (("max_steps", int, 1), ("error_budget", int, 1)):
        value = data.get(key)
        if value is not None and (
            not isinstance(value, types) or isinstance(value, bool) or value < low
        ):
            problems.append(
                Problem(f"{where}/{key}", f"{key!r} must be an int >= 1, got {_show(value)}")
            )
    temperature = data.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 2
    ):
        problems.append(
            Problem(f"{where}/temperature", f"temperature must be 0..2, got {_show(temperature)}")
        )
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        problems.append(Problem(f"{where}/model", f"model must be a string, got {_show(model)}"))
    out.update(
        {k: data[k] for k in ("model", "max_steps", "error_budget", "temperature") if k in data}
    )
    out["system_prompt"] = body.strip() or None
    return out


def _triggers(value: Any, where: str, problems: list[Problem]) -> tuple[Trigger, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(
            Problem(f"{where}/triggers", f"triggers must be a list, got {_show(value)}")
        )
        return ()
    out = []
    for i, raw in enumerate(value):
        ok_map = (
            isinstance(raw, dict)
            and len(raw) == 1
            and next(iter(raw)) in ("keyword", "tag", "tool")
            and isinstance(next(iter(raw.values())), str)
        )
        if not ((isinstance(raw, str) and raw.strip()) or ok_map):
            problems.append(
                Problem(
                    f"{where}/triggers/{i}",
                    f"a trigger must be a string or {{keyword|tag|tool: text}}, got {_show(raw)}",
                    "write 'keyword', '#tag' or 'tool:ns.*'",
                )
            )
            continue
        out.append(Trigger.parse(raw))
    return tuple(out)


def _workflow(
    value: Any, tools: list[str], where: str, problems: list[Problem]
) -> tuple[WorkflowStep, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(
            Problem(f"{where}/workflow", f"workflow must be a list of steps, got {_show(value)}")
        )
        return ()
    from stargraph.tools import matches_allowlist

    steps = []
    for i, raw in enumerate(value):
        here = f"{where}/workflow/{i}"
        if not isinstance(raw, dict):
            problems.append(
                Problem(here, f"a step must be a mapping, got {_show(raw)}", "{step, tool, params}")
            )
            continue
        before = len(problems)
        extra = sorted(str(k) for k in raw if k not in ("step", "tool", "params"))
        if extra:
            problems.append(Problem(here, f"unknown step keys {extra}", "use step, tool, params"))
        step, tool, params = raw.get("step", f"step {i + 1}"), raw.get("tool"), raw.get("params")
        if not isinstance(step, str):
            problems.append(Problem(f"{here}/step", f"step must be a string, got {_show(step)}"))
        if not isinstance(tool, str) or not _TOOL_NAME.match(tool):
            problems.append(
                Problem(
                    f"{here}/tool",
                    f"tool must be a tool id or 'ns.name', got {_show(tool)}",
                    "write e.g. 'choir.fs.read@1.0.0'",
                )
            )
        elif tools and not matches_allowlist(tool, tools):
            problems.append(
                Problem(
                    f"{here}/tool",
                    f"step tool {tool!r} is not among the skill's tools {tools}",
                    "add it to 'tools'",
                )
            )
        if params is None:
            params = {}
        if not isinstance(params, dict) or not _json_ok(params):
            problems.append(
                Problem(
                    f"{here}/params",
                    f"params must be a JSON object, got {_show(params)}",
                    "use strings, numbers, booleans, lists and mappings",
                )
            )
        if len(problems) == before:
            steps.append(WorkflowStep(step=step, tool=tool, params=params))
    return tuple(steps)


def _verification(value: Any, where: str, problems: list[Problem]) -> tuple[str | Check, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(
            Problem(f"{where}/verification", f"verification must be a list, got {_show(value)}")
        )
        return ()
    out: list[str | Check] = []
    for i, raw in enumerate(value):
        here = f"{where}/verification/{i}"
        if isinstance(raw, str):
            out.append(raw)
            continue
        if not isinstance(raw, dict) or not _json_ok(raw):
            problems.append(
                Problem(here, f"a check must be a string or a mapping, got {_show(raw)}")
            )
            continue
        try:
            check = Check.model_validate(raw)
        except ValueError as exc:  # pydantic's ValidationError
            problems.append(Problem(here, f"invalid check: {_first_line(exc)}", _CHECK_HINT))
            continue
        if check.tool is not None and not _TOOL_NAME.match(check.tool):
            problems.append(Problem(f"{here}/tool", f"tool {check.tool!r} is not a tool id"))
            continue
        out.append(check)
    return tuple(out)


_CHECK_HINT: Final = "keys: check, step, tool, params, status, contains, equals"


def _first_line(exc: Exception) -> str:
    lines = str(exc).splitlines()
    return " ".join(line.strip() for line in lines[:3])


def _examples(value: Any, where: str, problems: list[Problem]) -> tuple[Example, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(
            Problem(f"{where}/examples", f"examples must be a list, got {_show(value)}")
        )
        return ()
    out = []
    for i, raw in enumerate(value):
        try:
            if not isinstance(raw, dict):
                raise TypeError(f"expected a mapping, got {_show(raw)}")
            out.append(Example.model_validate(raw))
        except (ValueError, TypeError) as exc:
            problems.append(
                Problem(
                    f"{where}/examples/{i}",
                    f"invalid example: {_first_line(exc)}",
                    "write {input: {...}, output: {...}, description: ...}",
                )
            )
    return tuple(out)


# --------------------------------------------------------------------------- building


def _build(
    fields: dict[str, Any], *, source: str, references: tuple[str, ...], extra: dict[str, Any]
) -> MarkdownSkill:
    md = {
        "triggers": fields["triggers"],
        "required_tools": fields["required_tools"],
        "workflow": fields["workflow"],
        "verification": fields["verification"],
        "references": references,
        "source": source,
        "extra": extra,
    }
    common = {
        "name": fields["name"],
        "version": fields["version"],
        "kind": fields["kind"],
        "description": fields["description"],
        "tools": fields["tools"],
        "system_prompt": fields["system_prompt"],
        "requires": fields["requires"],
        "examples": fields["examples"],
    }
    if fields["workflow"]:
        graph = workflow_graph(fields["name"], fields["workflow"], fields["verification"])
        return MarkdownSkill.from_graph(graph, state_schema=WorkflowOutput, **common, **md)  # type: ignore[return-value]
    from stargraph.skills.react import react_skill

    options = {
        k: fields[k] for k in ("model", "max_steps", "error_budget", "temperature") if k in fields
    }
    base = react_skill(
        name=fields["name"],
        version=fields["version"],
        description=fields["description"],
        tools=fields["tools"],
        system_prompt=fields["system_prompt"],
        requires=fields["requires"],
        **options,
    )
    values = {k: getattr(base, k) for k in Skill.model_fields}
    values["examples"] = fields["examples"]
    skill = MarkdownSkill(**values, **md)
    skill._impls.update(base.impls)
    return skill


def workflow_graph(
    name: str,
    steps: tuple[WorkflowStep, ...],
    verification: tuple[str | Check, ...] = (),
) -> Graph[WorkflowState]:
    """The linear graph of a workflow: ``step_1 -> ... -> step_n [-> verify]``, with the
    ``workflow`` rule pack (``step_failed``, ``verification_failed``)."""
    graph = Graph(name, state=WorkflowState)
    ids = []
    for i, step in enumerate(steps, start=1):
        node = f"step_{i}"
        ids.append(node)
        graph = graph.with_node(
            node,
            run_step,
            config={"index": i, "step": step.step, "tool": step.tool, "params": step.params},
            writes=("steps", "step_failed"),
        )
    if verification:
        ids.append("verify")
        checks = [c if isinstance(c, str) else c.model_dump(mode="json") for c in verification]
        graph = graph.with_node(
            "verify",
            verify,
            config={"checks": checks},
            writes=(
                "verification_failures",
                "verification_unchecked",
                "verified",
                "verification_failed",
            ),
        )
    graph = graph.with_edge(START, ids[0])
    for a, b in itertools.pairwise(ids):
        graph = graph.with_edge(a, b)
    return graph.with_edge(ids[-1], END).with_rules(_workflow_pack())


def _workflow_pack() -> fathom.RulePack:
    return fathom.RulePack.from_spec(
        {
            "id": "workflow",
            "version": "1",
            "rules": [
                {
                    "name": "step_failed",
                    "salience": 10,
                    "when": [{"state.step_failed": True}],
                    "then": {"halt": "step_failed"},
                },
                {
                    "name": "verification_failed",
                    "when": [{"state.verification_failed": True}],
                    "then": {"halt": "verification_failed"},
                },
            ],
        }
    )


# --------------------------------------------------------------------------- nodes


def _call(
    ctx: RunContext, tool: str, params: Mapping[str, Any], index: int, step: str
) -> StepResult:
    from stargraph.tools import ToolCall, ToolResult

    arbiter = ctx.services.get("arbiter")
    if not callable(getattr(arbiter, "dispatch", None)):
        raise NodeError(
            f"workflow node {ctx.node!r} needs a tool Arbiter as services['arbiter']; "
            "compile the graph with services={'arbiter': ...}",
            run_id=ctx.run_id,
            step=ctx.step,
            node=ctx.node,
        )
    call = ToolCall(tool=tool, args=dict(params), node=ctx.node, allowed=(tool,))
    try:
        result: ToolResult = arbiter.dispatch(call)  # type: ignore[union-attr]
    except ToolError as exc:
        result = ToolResult.from_error(exc)
    return StepResult(
        index=index,
        step=step,
        tool=result.tool,
        status=result.status,
        summary=result.summary,
        payload=result.payload,
    )


def run_step(state: WorkflowState, ctx: RunContext) -> dict[str, Any]:
    """Call the step's tool with its static params through the arbiter."""
    del state
    cfg = ctx.config
    result = _call(ctx, cfg["tool"], cfg["params"], cfg["index"], cfg["step"])
    return {"steps": [result], "step_failed": result.status != "success"}


def verify(state: WorkflowState, ctx: RunContext) -> dict[str, Any]:
    """Evaluate the machine checks; list prose checks as unchecked."""
    failures: list[str] = []
    unchecked: list[str] = []
    for i, raw in enumerate(ctx.config["checks"], start=1):
        if isinstance(raw, str):
            unchecked.append(raw)
            continue
        check = Check.model_validate(raw)
        label = check.check or f"check {i}"
        if check.tool is not None:
            result: StepResult | None = _call(ctx, check.tool, check.params, 0, label)
        else:
            result = _find_step(state.steps, check.step)
        if result is None:
            failures.append(f"{label}: step {check.step!r} did not run")
            continue
        failures.extend(f"{label}: {why}" for why in _check_failures(check, result))
    return {
        "verification_failures": failures,
        "verification_unchecked": unchecked,
        "verified": not failures,
        "verification_failed": bool(failures),
    }


def _find_step(steps: list[StepResult], which: int | str | None) -> StepResult | None:
    if which is None:
        return steps[-1] if steps else None
    for result in steps:
        if which in (result.index, result.step):
            return result
    return None


def _check_failures(check: Check, result: StepResult) -> list[str]:
    out = []
    if result.status != check.status:
        out.append(f"expected status {check.status!r}, got {result.status!r} ({result.summary})")
    text = (
        result.payload
        if isinstance(result.payload, str)
        else orjson.dumps(result.payload, option=orjson.OPT_SORT_KEYS).decode()
    )
    if check.contains is not None and check.contains not in text:
        out.append(f"payload does not contain {check.contains!r} (got {_show(text)})")
    if check.equals is not None and result.payload != check.equals:
        out.append(f"payload is {_show(result.payload)}, expected {_show(check.equals)}")
    return out


# --------------------------------------------------------------------------- discovery


def discover_skill_dirs(
    *, cwd: str | os.PathLike[str] | None = None, home: str | os.PathLike[str] | None = None
) -> list[Path]:
    """Existing skill directories, in search order: ``$STARGRAPH_SKILLS_DIR``, ``./skills/``,
    ``~/.stargraph/skills/``."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    user = Path(home) if home is not None else Path.home()
    candidates = [here / "skills", user / ".stargraph" / "skills"]
    env = os.environ.get(ENV_VAR)
    if env:
        candidates.insert(0, Path(env).expanduser())
    out: list[Path] = []
    for path in candidates:
        if path.is_dir() and path.resolve() not in [p.resolve() for p in out]:
            out.append(path)
    return out


def registry_dirs(
    *, cwd: str | os.PathLike[str] | None = None, home: str | os.PathLike[str] | None = None
) -> dict[str, Path]:
    """``Registry.build`` keyword arguments for the discovered directories: ``agent_dir`` is
    ``./skills/`` (project skills win), ``global_dir`` is ``$STARGRAPH_SKILLS_DIR`` when set,
    else ``~/.stargraph/skills/``. Missing directories are left out."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    user = Path(home) if home is not None else Path.home()
    env = os.environ.get(ENV_VAR)
    found = {
        "global_dir": Path(env).expanduser() if env else user / ".stargraph" / "skills",
        "agent_dir": here / "skills",
    }
    return {k: v for k, v in found.items() if v.is_dir()}


def skill_md_loaders() -> dict[str, Any]:
    """The ``skill_loaders`` mapping for ``Registry.build``: ``{"SKILL.md": load_skill_md}``."""
    return {"SKILL.md": load_skill_md}
