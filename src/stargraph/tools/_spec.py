"""``ToolSpec``: one tool's two views.

The *LLM view* is what a model may see: name, description, JSON-Schema parameters. The
*runtime view* is everything the arbiter needs to run the call safely: side-effect class, lock
templates, timeout, secrets, exposure, executor. ``ToolSpec.llm_view()`` is the only way the
LLM view is produced, and it is built from an explicit allowlist of keys so a runtime field
can never leak into a prompt.
"""

from __future__ import annotations

import copy
import re
import string
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Final, Literal, NewType

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from stargraph._typed import TypedModel
from stargraph.errors import Problem, ToolSpecError, _ProblemsError
from stargraph.tools._canonical import canonical_json, sha256_hex
from stargraph.tools._result import Exposure

__all__ = [
    "ExecutorKind",
    "Exposure",
    "LockMode",
    "LockTemplate",
    "SideEffect",
    "ToolId",
    "ToolSpec",
    "llm_name_for",
    "parse_lock_template",
    "spec_error_from_validation",
    "tool_id_from_llm_name",
]

ToolId = NewType("ToolId", str)
"""A canonical tool id, ``ns.name[.sub]@MAJOR.MINOR.PATCH`` (e.g. ``choir.fs.read@1.0.0``)."""

SideEffect = Literal["none", "read", "write", "external"]
ExecutorKind = Literal["local", "subprocess", "host"]
LockMode = Literal["S", "X"]

# A segment never starts or ends with "_" or "-" and never holds "__": that is what makes the
# ".", "__" mapping of llm_name_for reversible.
_SEGMENT: Final = r"[a-z][a-z0-9]*(?:[_-][a-z0-9]+)*"
_NAME: Final = rf"{_SEGMENT}(?:\.{_SEGMENT})+"
# SemVer 2.0 without build metadata: "+" cannot appear in an OpenAI function name, and build
# metadata carries no precedence anyway.
_SEMVER: Final = (
    r"(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)
NAME_RE: Final = re.compile(rf"^{_NAME}$")
ID_RE: Final = re.compile(rf"^(?P<name>{_NAME})@(?P<version>{_SEMVER})$")
_LLM_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_LOCK_KIND_RE: Final = re.compile(r"^[a-z][a-z0-9_]*$")
_OPENAI_NAME_LIMIT: Final = 64

_ID_HINT: Final = (
    "use a lower-case namespaced name and a SemVer version, e.g. 'choir.fs.read@1.0.0'"
)


@lru_cache(maxsize=4096)
def llm_name_for(tool_id: str) -> str:
    """The OpenAI-safe function name of a tool id (``^[a-zA-Z0-9_-]{1,64}$``); reversible.

    Dots between segments become ``__``, ``@`` becomes ``__v`` and dots in the version ``_``:

    >>> llm_name_for("choir.fs.read@1.0.0")
    'choir__fs__read__v1_0_0'
    """
    match = ID_RE.match(tool_id)
    if match is None:
        raise _spec_error(tool_id, "id", f"{tool_id!r} is not a canonical tool id", _ID_HINT)
    name, version = match["name"], match["version"]
    return name.replace(".", "__") + "__v" + version.replace(".", "_")


def tool_id_from_llm_name(llm_name: str) -> str | None:
    """Inverse of :func:`llm_name_for`; ``None`` when ``llm_name`` is not such a name.

    >>> tool_id_from_llm_name("choir__fs__read__v1_0_0")
    'choir.fs.read@1.0.0'
    """
    head, sep, tail = llm_name.rpartition("__")
    if not sep or not tail.startswith("v"):
        return None
    candidate = head.replace("__", ".") + "@" + tail[1:].replace("_", ".")
    return candidate if ID_RE.match(candidate) else None


@dataclass(frozen=True, slots=True)
class LockTemplate:
    """One parsed lock template: ``file:{path}:S`` -> resource ``file:{path}``, mode ``S``.

    ``fields`` are the argument names substituted into ``resource`` at dispatch time.
    """

    resource: str
    mode: LockMode
    fields: tuple[str, ...]

    @property
    def kind(self) -> str:
        """The resource kind before the first colon (``file``, ``workspace``, ``browser_tab``)."""
        return self.resource.split(":", 1)[0]

    def render(self, args: dict[str, Any]) -> str:
        """The concrete resource key for ``args`` (values are formatted with ``str``)."""
        return self.resource.format_map({name: str(args[name]) for name in self.fields})


@lru_cache(maxsize=4096)
def parse_lock_template(text: str) -> LockTemplate:
    """Parse ``kind[:part]:S|X``; placeholders must be plain ``{name}`` fields.

    Raises :class:`~stargraph.errors.ToolSpecError` naming the template and the fix.
    """
    resource, sep, mode = text.rpartition(":")
    hint = "write 'kind:S', 'kind:X' or 'kind:{arg}:S', e.g. 'workspace:X' or 'file:{path}:S'"
    if not sep or mode not in ("S", "X") or not resource:
        raise _spec_error(text, "locks", f"lock {text!r} does not end in ':S' or ':X'", hint)
    if not _LOCK_KIND_RE.match(resource.split(":", 1)[0]):
        raise _spec_error(text, "locks", f"lock {text!r} has no lower-case resource kind", hint)
    fields: list[str] = []
    try:
        parsed = list(string.Formatter().parse(resource))
    except ValueError as exc:
        message = f"lock {text!r} is not a valid template: {exc}"
        raise _spec_error(text, "locks", message, hint) from exc
    for _literal, field, spec, conversion in parsed:
        if field is None:
            continue
        # Only bare identifiers: "{path.__class__}" or "{x[0]}" would let a template reach
        # into argument objects.
        if not field.isidentifier() or spec or conversion:
            raise _spec_error(
                text, "locks", f"lock {text!r} has placeholder {{{field}}}", "use '{argname}'"
            )
        fields.append(field)
    return LockTemplate(resource, mode, tuple(dict.fromkeys(fields)))  # type: ignore[arg-type]


def _spec_error(subject: str, field: str, message: str, hint: str = "") -> ToolSpecError:
    return ToolSpecError([Problem(f"{subject}#/{field}", message, hint)], subject="tool spec")


def spec_error_from_validation(exc: ValidationError, *, source: str) -> ToolSpecError:
    """A :class:`ToolSpecError` listing every field of ``exc`` under ``source``."""
    problems = [
        Problem(
            f"{source}#/" + "/".join(str(part) for part in error["loc"]),
            error["msg"].removeprefix("Value error, "),
        )
        for error in exc.errors(include_url=False)
    ]
    return ToolSpecError(problems, subject=f"tool {source}")


class ToolSpec(TypedModel):
    """A tool's id, LLM view (``description``, ``input_schema``) and runtime view.

    Frozen and JSON round-trippable. Construct it directly, through the ``@tool`` decorator
    (schema from the function signature) or from a JSON manifest (:func:`load_manifest`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Canonical id: namespaced name, '@', SemVer version.")
    description: str = Field(description="What the tool does, for the model (LLM view).")
    input_schema: dict[str, Any] = Field(
        description="JSON Schema (type object) of the arguments (LLM view: 'parameters')."
    )
    side_effect: SideEffect = Field(
        "none", description="none|read|write|external; external calls add an audit record."
    )
    locks: tuple[str, ...] = Field(
        (), description="Lock templates, e.g. 'workspace:X', 'file:{path}:S'."
    )
    timeout_s: float = Field(30.0, gt=0, description="Wall-clock limit for one execution.")
    idempotent: bool = Field(False, description="Safe to re-run with the same arguments.")
    secret_resources: tuple[str, ...] = Field(
        (), description="Names of secrets handed to this tool's execution only."
    )
    network: bool = Field(False, description="The tool talks to the network (runtime view).")
    exposure: Exposure = Field(
        "both", description="Which lane sees the result: edge|core|both|none."
    )
    prompt_mask: bool = Field(
        False, description="Only status, summary and artifact_ref reach the prompt."
    )
    executor: ExecutorKind = Field(
        "local", description="local (Python), subprocess, or host (delegated to the host)."
    )
    exec_path: str | None = Field(None, description="Executable of a subprocess tool.")
    build_hash: str | None = Field(
        None,
        description="'sha256:<hex>' of what a tool built from its source directory was built "
        "from and to (source tree, command, artifact); None for a ready executable.",
    )

    typed_error: ClassVar[type[_ProblemsError]] = ToolSpecError

    def __init__(self, **data: Any) -> None:
        """Validate ``data``; raise :class:`ToolSpecError` listing every bad field."""
        try:
            BaseModel.__init__(self, **data)
        except ValidationError as exc:
            tool = data.get("id")
            if isinstance(tool, str):  # the problems read as the tool's, under its id
                raise spec_error_from_validation(exc, source=tool) from None
            raise type(self)._typed(exc) from None

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not ID_RE.match(value):
            raise ValueError(f"{value!r} is not a canonical tool id; {_ID_HINT}")
        if len(llm_name_for(value)) > _OPENAI_NAME_LIMIT:
            raise ValueError(
                f"{value!r} maps to an LLM function name longer than 64 characters; "
                "shorten the namespace or name"
            )
        return value

    @field_validator("input_schema")
    @classmethod
    def _check_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('input_schema must be a JSON Schema with "type": "object"')
        return value

    @field_validator("secret_resources")
    @classmethod
    def _check_secrets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not re.match(r"^[A-Za-z][A-Za-z0-9_]*$", name):
                raise ValueError(f"secret resource {name!r} must match [A-Za-z][A-Za-z0-9_]*")
        return value

    @model_validator(mode="after")
    def _check_runtime(self) -> ToolSpec:
        properties = self.input_schema.get("properties")
        if not isinstance(properties, dict):
            properties = {}  # the schema translator names a bad properties itself
        for template in self.lock_templates:
            missing = [f for f in template.fields if f not in properties]
            if missing:
                raise ValueError(
                    f"lock {template.resource}:{template.mode} uses {missing} which "
                    f"input_schema does not declare (properties: {sorted(properties)})"
                )
        if self.executor == "subprocess" and not self.exec_path:
            raise ValueError("a subprocess tool needs exec_path")
        if self.executor == "host" and self.exec_path:
            raise ValueError("a host-executed tool has no exec_path (the host runs it)")
        return self

    # ----------------------------------------------------------------------- derived views
    # Plain properties, not cached_property: model_copy(update=...) copies an instance's
    # __dict__, so a cached value would silently describe the old spec. The parsers behind
    # them are lru-cached instead.

    @property
    def name(self) -> str:
        """The namespaced name without version (``choir.fs.read``); registry override key."""
        return self.id.partition("@")[0]

    @property
    def version(self) -> str:
        """The SemVer version (``1.0.0``)."""
        return self.id.partition("@")[2]

    @property
    def llm_name(self) -> str:
        """OpenAI-safe function name, reversible with :func:`tool_id_from_llm_name`."""
        return llm_name_for(self.id)

    @property
    def lock_templates(self) -> tuple[LockTemplate, ...]:
        """Parsed :attr:`locks`."""
        return tuple(parse_lock_template(text) for text in self.locks)

    @property
    def path_args(self) -> tuple[str, ...]:
        """Arguments that name workspace paths: those used in a ``file:{...}`` lock."""
        names = (f for t in self.lock_templates if t.kind == "file" for f in t.fields)
        return tuple(dict.fromkeys(names))

    @property
    def spec_hash(self) -> str:
        """sha256 of the canonical JSON of the whole spec; changes with any field."""
        # A ready executable's spec leaves the field out: its hash is what it always was.
        exclude = {"build_hash"} if self.build_hash is None else None
        return sha256_hex(canonical_json(self.model_dump(mode="json", exclude=exclude)))

    def llm_view(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry; contains no runtime key by construction.

        >>> spec = ToolSpec(id="demo.echo@1.0.0", description="Echo.",
        ...                 input_schema={"type": "object", "properties": {}})
        >>> spec.llm_view()["function"]["name"]
        'demo__echo__v1_0_0'
        """
        return {
            "type": "function",
            "function": {
                "name": self.llm_name,
                "description": self.description,
                # A new object: callers may mutate the view (add "strict") without
                # touching the frozen spec.
                "parameters": _model_facing(self.input_schema),
            },
        }


# Schema keywords whose values are schemas, and those whose values map names or hold lists
# of schemas: the places a title can hide.
_SUBSCHEMA: Final = ("items", "additionalProperties", "not", "contains")
_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions", "patternProperties")
_SCHEMA_LISTS: Final = ("anyOf", "allOf", "oneOf", "prefixItems")


def _model_facing(schema: Any) -> Any:
    """A copy of a parameters schema without its ``title`` annotations.

    pydantic titles every schema (``"title": "multiplyArgs"`` for a tool's arguments): a
    name a model reads beside the function's own, and small models call the tool by it.
    Titles carry nothing validation uses, so the model is offered the schema without them.
    """
    if isinstance(schema, list):
        return [_model_facing(item) for item in schema]
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _model_facing(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMA or key in _SCHEMA_LISTS:
            out[key] = _model_facing(value)
        else:
            out[key] = copy.deepcopy(value)
    return out
