"""Reading SKILL.md files: frontmatter or donor sections -> a validated MarkdownSkill."""

from __future__ import annotations

import fnmatch
import os
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import ConfigDict, Field

from stargraph.errors import CompileError, Problem, SkillValidationError, UnknownKeyWarning
from stargraph.ir._canonical import non_canonical
from stargraph.skills import (
    SEMVER,
    SLUG,
    TAG,
    TOOL_ID,
    Example,
    Skill,
    SkillKind,
    slug_suggestion,
)
from stargraph.skills._files import SkillModel, read_utf8
from stargraph.skills._services import options_from_data
from stargraph.skills.markdown._workflow import (
    Check,
    WorkflowOutput,
    WorkflowStep,
    _show,
    workflow_graph,
)

__all__ = ["MarkdownSkill", "Trigger", "UnknownKeyWarning", "load_skill_md", "parse_skill_md"]

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
_KNOWN: Final = (
    "name",
    "description",
    "version",
    "kind",
    "tools",
    "requires",
    "tags",
    "triggers",
    "required_tools",
    "workflow",
    "verification",
    "examples",
    "model",
    "max_steps",
    "error_budget",
    "temperature",
    "request",
)
# Tool names in workflow steps and required_tools: a tool id's ``ns.name``, optionally
# ``@<semver>``.
_TOOL_NAME: Final = re.compile(TOOL_ID.pattern.partition("@")[0] + r"(@\S+)?$")
_FRONTMATTER: Final = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*\r?$\n?", re.S | re.M
)
_HEADING: Final = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
_WORD_TOKEN: Final = re.compile(r"[A-Za-z0-9_.@*-]+")
# A level-1 title read as the skill's name in the donor layout: a slug, or one but for '_'.
_NAME_HEADING: Final = re.compile(r"^[a-z][a-z0-9_-]+$")


# --------------------------------------------------------------------------- data


class Trigger(SkillModel):
    """When a skill applies: a keyword or phrase, a ``#tag``, or a tool pattern.

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
    """Read one SKILL.md (and its ``references/`` listing) into a :class:`MarkdownSkill`.

    The file must be UTF-8; a file or a ``references/`` directory that cannot be read is a
    :class:`~stargraph.errors.SkillValidationError` naming it (never a silently empty skill).
    """
    path = Path(path)
    text = read_utf8(path, subject=f"SKILL.md {path}", rule="SKILL.md files must be UTF-8 text")
    return parse_skill_md(text, source=str(path), references=_references(path.parent))


def _references(folder: Path) -> tuple[str, ...]:
    """The files under ``folder/references`` (relative to ``folder``), sorted. A directory
    that cannot be listed is an error: ``Path.rglob`` would silently skip it."""
    refs = folder / "references"
    found: list[str] = []
    errors: list[OSError] = []
    try:
        if not refs.is_dir():
            return ()
    except OSError as exc:  # e.g. no search permission on the skill's directory
        errors.append(exc)
    else:
        for root, _dirs, files in os.walk(refs, onerror=errors.append):
            for name in files:
                path = Path(root) / name
                try:
                    if path.is_file():
                        found.append(str(path.relative_to(folder)))
                except OSError as exc:  # listed but not searchable (r without x)
                    errors.append(exc)
    if errors:
        raise SkillValidationError(
            [
                Problem(
                    f"{exc.filename or refs}",
                    f"cannot list the skill's references: {exc.strerror or exc}",
                    "make the directory readable (chmod u+rx) or remove it",
                )
                for exc in errors
            ],
            subject=f"SKILL.md {folder / 'SKILL.md'}",
        )
    return tuple(sorted(found))


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
            reason = _yaml_error(exc, text.count("\n", 0, found.start(1)))
            raise SkillValidationError(
                [Problem(where, f"frontmatter is not valid YAML {reason}", "fix the YAML")],
                subject=f"SKILL.md {source}",
            ) from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise SkillValidationError.at(
                where,
                f"frontmatter must be a mapping, got {type(data).__name__}",
                "write 'key: value' lines between the --- markers",
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
    except CompileError as exc:
        # The skill's graph refused a value (a string YAML decoded into a lone surrogate, a
        # number outside JSON's exact range): the file is what to fix, so name it.
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
            if (
                len(head.group(1)) == 1
                and "name" not in data
                and _NAME_HEADING.match(head.group(2))
            ):
                # A near-slug title (``# note_taker``) is meant as the name: taken, the
                # name check refuses it with a fix instead of reporting no name at all.
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
            reason = _yaml_error(exc, text.count("\n", 0, head.end()))
            problems.append(
                Problem(f"{where}/{key}", f"section is not valid YAML {reason}", "fix it")
            )
    body = "".join(prompt)
    if "description" not in data:
        paragraph = next((p.strip() for p in body.split("\n\n") if p.strip()), "")
        if paragraph:
            data["description"] = " ".join(paragraph.split())
    return data, body, problems


def _yaml_error(exc: BaseException, lines_before: int) -> str:
    """``at line L, column C: <problem>`` with L counted in the whole file (PyYAML counts
    from the start of the snippet it was given), or the error itself when it has no mark."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        detail = " ".join(f"{exc.problem or ''}".split()) or type(exc).__name__
        if exc.context:
            detail += f" ({exc.context})"
        return f"at line {lines_before + mark.line + 1}, column {mark.column + 1}: {detail}"
    return f"({type(exc).__name__}): {' '.join(str(exc).split())}"


def _json_ok(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is JSON the graph hash can carry (RFC 8785: integers within
    +-(2**53 - 1), finite floats, UTF-8 text), nested at most 64 deep."""
    if depth > 64:
        return False
    if isinstance(value, list):
        return all(_json_ok(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(
            isinstance(k, str) and _json_ok(k) and _json_ok(v, depth + 1) for k, v in value.items()
        )
    if value is None or isinstance(value, str | bool | int | float):
        return next(non_canonical(value), None) is None
    return False  # a date, a set ...: YAML has them, JSON does not


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
        name = out["name"]
        # The usual near miss is a Python-style name: say which character is refused.
        why = " ('_' is not allowed: use '-')" if "_" in name else ""
        guess = slug_suggestion(name)
        problems.append(
            Problem(
                f"{where}/name",
                f"name {name!r} does not match ^[a-z][a-z0-9-]+${why}",
                f"rename it {guess!r} (lowercase letters, digits and dashes)"
                if guess
                else "use lowercase letters, digits and dashes, e.g. 'web-research'",
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
    out["tags"] = tuple(_str_list(data, "tags", where, problems))
    for i, tag in enumerate(out["tags"]):
        if not TAG.match(tag):
            problems.append(
                Problem(
                    f"{where}/tags/{i}",
                    f"tag {tag!r} is not a lowercase tag",
                    "write e.g. 'audit-proof' (a tier) or 'notes'",
                )
            )
    out["required_tools"] = tuple(_str_list(data, "required_tools", where, problems))
    out["triggers"] = _triggers(data.get("triggers"), where, problems)
    out["workflow"] = _workflow(data.get("workflow"), tools, where, problems)
    out["verification"] = _verification(data.get("verification"), where, problems)
    out["examples"] = _examples(data.get("examples"), where, problems)
    if out["kind"] in ("workflow", "utility") and not data.get("workflow"):
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
    request = options_from_data(data, where, problems)
    if request is not None:
        out["request"] = request
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        problems.append(Problem(f"{where}/model", f"model must be a string, got {_show(model)}"))
    out.update(
        {k: data[k] for k in ("model", "max_steps", "error_budget", "temperature") if k in data}
    )
    out["system_prompt"] = body.strip() or None
    return out


def _entries(
    value: Any, key: str, where: str, problems: list[Problem], what: str = "a list"
) -> list[Any]:
    """The entries of frontmatter list ``key``: none when it is absent; none and a problem
    when it is not a list."""
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(Problem(f"{where}/{key}", f"{key} must be {what}, got {_show(value)}"))
        return []
    return value


def _triggers(value: Any, where: str, problems: list[Problem]) -> tuple[Trigger, ...]:
    out = []
    for i, raw in enumerate(_entries(value, "triggers", where, problems)):
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
    from stargraph.tools import matches_allowlist

    steps = []
    for i, raw in enumerate(_entries(value, "workflow", where, problems, "a list of steps")):
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
    out: list[str | Check] = []
    for i, raw in enumerate(_entries(value, "verification", where, problems)):
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
    out = []
    for i, raw in enumerate(_entries(value, "examples", where, problems)):
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
        "tags": fields["tags"],
        "examples": fields["examples"],
    }
    if fields["workflow"]:
        graph = workflow_graph(fields["name"], fields["workflow"], fields["verification"])
        return MarkdownSkill.from_graph(graph, state_schema=WorkflowOutput, **common, **md)  # type: ignore[return-value]
    from stargraph.skills.react import react_skill

    options = {
        k: fields[k]
        for k in ("model", "max_steps", "error_budget", "temperature", "request")
        if k in fields
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
    values["tags"] = fields["tags"]
    skill = MarkdownSkill(**values, **md)
    skill._impls.update(base.impls)
    return skill
