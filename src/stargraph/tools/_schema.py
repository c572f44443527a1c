"""Argument validation with pydantic, for both kinds of tool.

A Python tool's arguments are checked against a model built from its signature; an external
tool's manifest only has JSON Schema, so the common subset of JSON Schema is translated into a
pydantic model once, at load time. Unsupported keywords fail the load instead of being
silently ignored: a constraint the manifest states but nobody checks would be a lie.

Validation runs in pydantic's *strict JSON* mode: the arguments are what a model sent as JSON,
so ``"5"`` is not an integer and ``1`` is not a boolean, exactly as JSON Schema says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Union

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import SchemaError

from stargraph._typed import validate_json_raw
from stargraph.errors import Problem, ToolArgumentError, ToolSpecError
from stargraph.tools._result import FieldProblem, ToolFailure

__all__ = ["ArgumentModel", "ValidatedArgs", "model_from_json_schema"]

_ANNOTATION_KEYWORDS: Final = frozenset({"description", "title", "$schema", "examples", "$comment"})
_CONSTRAINTS: Final = {
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minItems": "min_length",
    "maxItems": "max_length",
}
_STRUCTURE_KEYWORDS: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "const", "items", "default"}
)
SUPPORTED_KEYWORDS: Final = _ANNOTATION_KEYWORDS | _STRUCTURE_KEYWORDS | frozenset(_CONSTRAINTS)
_SCALARS: Final = {"string": str, "integer": int, "number": float, "boolean": bool, "null": None}


@dataclass(frozen=True, slots=True)
class ValidatedArgs:
    """Arguments that passed validation, in two forms.

    ``model`` holds typed values (what a Python body receives); ``json`` is the normalised JSON
    object (what an external tool receives on stdin, what lock templates and ``args_hash``
    use).
    """

    model: BaseModel
    json: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ArgumentModel:
    """A tool's argument validator: the pydantic model plus which fields may be absent.

    ``optional_absent`` lists fields with no default that the caller may omit; they are
    dropped from the normalised arguments when omitted, so an external tool never sees a
    ``null`` the schema does not allow.
    """

    model: type[BaseModel]
    optional_absent: frozenset[str] = frozenset()

    @property
    def json_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments (the LLM view's ``parameters``)."""
        return self.model.model_json_schema()

    def validate(
        self, tool: str, args: Mapping[str, Any], *, node: str | None = None
    ) -> ValidatedArgs:
        """Validate ``args``; return typed and normalised JSON arguments.

        Raises :class:`ToolArgumentError` naming the tool and every failing field at once.
        """
        try:
            raw = orjson.dumps(dict(args))
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise _argument_error(
                tool, [FieldProblem(field="", message=f"arguments are not JSON: {exc}")], node
            ) from exc
        try:
            instance = validate_json_raw(self.model, raw, strict=True)
        except ValidationError as exc:
            problems = [
                FieldProblem(
                    field=".".join(str(part) for part in error["loc"]) or "<arguments>",
                    message=error["msg"],
                    type=error["type"],
                )
                for error in exc.errors(include_url=False, include_input=False)
            ]
            raise _argument_error(tool, problems, node) from None
        normalised = instance.model_dump(mode="json", by_alias=True)
        if self.optional_absent:
            fields = type(instance).model_fields
            given = {fields[n].alias or n for n in instance.model_fields_set if n in fields}
            for key in self.optional_absent - given:
                normalised.pop(key, None)
        return ValidatedArgs(instance, normalised)


def _argument_error(tool: str, fields: list[FieldProblem], node: str | None) -> ToolArgumentError:
    listed = "; ".join(f"{p.field}: {p.message}" for p in fields)
    hint = "call the tool again with arguments that match its parameters schema"
    message = f"tool {tool!r} got invalid arguments: {listed} (fix: {hint})"
    failure = ToolFailure(
        code="invalid_arguments", tool=tool, message=message, hint=hint, fields=tuple(fields)
    )
    return ToolArgumentError(message, node=node, failure=failure)


# --------------------------------------------------------------------------- JSON Schema


def model_from_json_schema(
    schema: Mapping[str, Any], *, name: str, source: str, pointer: str = ""
) -> ArgumentModel:
    """Translate the supported JSON Schema subset into an :class:`ArgumentModel`.

    Supported: ``type`` (one or a list), ``properties``, ``required``, boolean
    ``additionalProperties``, ``enum``, ``const``, ``items``, ``default`` and the numeric,
    length and ``pattern`` constraints. Any other keyword raises :class:`ToolSpecError`
    naming ``source`` and the JSON pointer (below ``pointer``) of every offending keyword.
    """
    problems: list[Problem] = []
    if not isinstance(schema, Mapping):
        problems.append(
            Problem(
                f"{source}#{pointer}",
                f"the input schema must be a JSON object, got {type(schema).__name__}",
                'write {"type": "object", "properties": {...}}',
            )
        )
        raise ToolSpecError(problems, subject=f"tool manifest {source}")
    if schema.get("type") != "object":
        problems.append(Problem(f"{source}#{pointer}/type", "input schema must have type 'object'"))
    builder = _Builder(source, problems)
    model = builder.object_model(schema, _model_name(name), pointer)
    if problems:
        raise ToolSpecError(problems, subject=f"tool manifest {source}")
    # object_model refused any properties or required of the wrong shape above.
    required = set(schema.get("required", ()))
    absent = frozenset(
        key
        for key, sub in schema.get("properties", {}).items()
        if key not in required and not (isinstance(sub, Mapping) and "default" in sub)
    )
    return ArgumentModel(model, absent)


def _model_name(name: str) -> str:
    cleaned = "".join(part.capitalize() for part in name.replace("@", ".").split(".") if part)
    return "".join(ch for ch in cleaned if ch.isalnum()) + "Args"


@dataclass
class _Builder:
    source: str
    problems: list[Problem]

    def fail(self, pointer: str, message: str, hint: str = "") -> Any:
        self.problems.append(Problem(f"{self.source}#{pointer}", message, hint))
        return Any

    def object_model(self, schema: Mapping[str, Any], name: str, pointer: str) -> type[BaseModel]:
        self.check_keywords(schema, pointer)
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, Mapping):
            self.fail(f"{pointer}/properties", "properties must be an object")
            properties = {}
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            self.fail(f"{pointer}/required", "required must be a list of property names")
            required = []
        for missing in sorted(set(required) - set(properties)):
            self.fail(f"{pointer}/required", f"required property {missing!r} is not declared")
        extra = schema.get("additionalProperties", True)
        if not isinstance(extra, bool):
            self.fail(
                f"{pointer}/additionalProperties",
                "only true/false is supported for additionalProperties",
            )
        fields: dict[str, Any] = {}
        for key, sub in properties.items():
            sub_pointer = f"{pointer}/properties/{key}"
            annotation = self.annotation(sub, f"{name}_{key}", sub_pointer)
            description = sub.get("description") if isinstance(sub, Mapping) else None
            if key in required:
                default: Any = ...
            elif isinstance(sub, Mapping) and "default" in sub:
                default = sub["default"]
            else:
                # Not nullable: the annotation stays as declared, so an explicit null is
                # refused while omitting the field is fine (defaults are not validated).
                default = None
            # Aliases keep keys that are not Python identifiers ("from", "x-y") usable.
            fields[f"f_{len(fields)}"] = (
                annotation,
                Field(default, alias=key, description=description),
            )
        config = ConfigDict(extra="forbid" if extra is False else "allow", populate_by_name=False)
        try:
            model: type[BaseModel] = create_model(name, __config__=config, **fields)
        except (SchemaError, TypeError, ValueError) as exc:
            # What the checks above let through but pydantic-core still cannot compile (a
            # pattern its regex engine refuses, a default of the wrong type for a bound).
            first = str(exc).strip().splitlines()[-1].strip()
            self.fail(
                pointer,
                f"pydantic cannot build a validator for this schema: {first}",
                "use constraint values of the type the keyword takes",
            )
            return BaseModel
        return model

    def check_keywords(self, schema: Mapping[str, Any], pointer: str) -> None:
        for keyword in schema:
            if keyword not in SUPPORTED_KEYWORDS:
                self.fail(
                    f"{pointer}/{keyword}",
                    f"unsupported JSON Schema keyword {keyword!r}",
                    f"use only {', '.join(sorted(SUPPORTED_KEYWORDS))}",
                )

    def constraint_ok(self, key: str, value: Any, pointer: str) -> bool:
        """Whether ``value`` has the type keyword ``key`` takes (else a problem)."""
        if key == "pattern":
            ok, wanted = isinstance(value, str), "a string"
        elif key in ("minLength", "maxLength", "minItems", "maxItems"):
            ok, wanted = type(value) is int and value >= 0, "a non-negative integer"
        else:
            ok = type(value) in (int, float) and math.isfinite(value)
            wanted = "a finite number"
        if not ok:
            self.fail(f"{pointer}/{key}", f"{key} must be {wanted}, got {value!r:.60}")
        return ok

    def annotation(self, schema: Any, name: str, pointer: str) -> Any:
        if not isinstance(schema, Mapping):
            return self.fail(pointer, "a property schema must be an object")
        self.check_keywords(schema, pointer)
        if "enum" in schema or "const" in schema:
            key = "enum" if "enum" in schema else "const"
            values = schema["enum"] if key == "enum" else [schema["const"]]
            if not isinstance(values, list) or not values:
                return self.fail(f"{pointer}/enum", "enum must be a non-empty list")
            if not all(v is None or type(v) in (str, int, bool) for v in values):
                return self.fail(
                    f"{pointer}/{key}",
                    f"{key} values must be strings, integers, booleans or null, got {values!r:.80}",
                    "list only scalar values",
                )
            return Literal[tuple(values)]
        declared = schema.get("type")
        if declared is None:
            return Any
        types = declared if isinstance(declared, list) else [declared]
        if not types:
            return self.fail(f"{pointer}/type", "type must name at least one JSON Schema type")
        options = [self.single(t, schema, name, pointer) for t in types]
        return options[0] if len(options) == 1 else Union[tuple(options)]  # noqa: UP007

    def single(self, kind: Any, schema: Mapping[str, Any], name: str, pointer: str) -> Any:
        constraints = {
            _CONSTRAINTS[key]: value
            for key, value in schema.items()
            if key in _CONSTRAINTS and self.constraint_ok(key, value, pointer)
        }
        if not isinstance(kind, str):
            return self.fail(f"{pointer}/type", f"a JSON Schema type is a string, got {kind!r:.60}")
        if kind == "object":
            if "properties" in schema:
                return self.object_model(schema, name, pointer)
            return dict[str, Any]
        if kind == "array":
            item = self.annotation(schema.get("items", {}), f"{name}_item", f"{pointer}/items")
            base: Any = list[item]  # type: ignore[valid-type]
        elif kind in _SCALARS:
            base = _SCALARS[kind]
        else:
            return self.fail(f"{pointer}/type", f"unknown JSON Schema type {kind!r}")
        return Annotated[base, Field(**constraints)] if constraints else base
