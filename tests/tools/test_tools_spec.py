"""ToolSpec: canonical ids, the two views (B1, B2), lock templates (B7), ``@tool`` schemas."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from stargraph.errors import ToolSpecError
from stargraph.tools import (
    AsyncPythonTool,
    PythonTool,
    ToolContext,
    ToolSpec,
    llm_name_for,
    parse_lock_template,
    tool,
    tool_id_from_llm_name,
)

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}

# Every runtime-view field, each set to a value that is easy to find in a serialised view.
RUNTIME = {
    "side_effect": "external",
    "locks": ("file:{path}:X", "workspace_tag_zz:S"),
    "timeout_s": 12.5,
    "idempotent": True,
    "secret_resources": ("git_identity_zz",),
    "network": True,
    "exposure": "edge",
    "prompt_mask": True,
    "executor": "subprocess",
    "exec_path": "/opt/tools/exec_path_zz",
    "build_hash": "sha256:build_hash_zz",
}


def full_spec() -> ToolSpec:
    return ToolSpec(
        id="acme.git.commit@1.2.3", description="Commit.", input_schema=SCHEMA, **RUNTIME
    )


def test_runtime_fields_cover_every_non_llm_field() -> None:
    # If someone adds a runtime field to ToolSpec, this test must learn about it.
    assert set(ToolSpec.model_fields) - {"id", "description", "input_schema"} == set(RUNTIME)


@pytest.mark.parametrize("key", sorted(RUNTIME))
def test_llm_view_never_contains_a_runtime_key_or_value(key: str) -> None:
    view = full_spec().llm_view()
    text = json.dumps(view)
    assert view == {
        "type": "function",
        "function": {
            "name": "acme__git__commit__v1_2_3",
            "description": "Commit.",
            "parameters": SCHEMA,
        },
    }
    assert f'"{key}"' not in text
    value = RUNTIME[key]
    for needle in value if isinstance(value, tuple) else (value,):
        if isinstance(needle, str) and needle.endswith(("_zz", "_zz:S", ":X")):
            assert needle not in text


def test_llm_view_is_a_copy() -> None:
    spec = full_spec()
    spec.llm_view()["function"]["parameters"]["properties"]["evil"] = {}
    assert "evil" not in spec.input_schema["properties"]


@pytest.mark.parametrize(
    "bad",
    ["fs.read", "read@1.0.0", "Choir.fs.read@1.0.0", "choir..read@1.0.0", "choir.fs_@1.0.0",
     "choir.fs__x@1.0.0", "choir.fs.read@1.0", "choir.fs.read@1.0.0+build", "choir.fs.read@01.0.0"],
)  # fmt: skip
def test_non_canonical_ids_are_rejected(bad: str) -> None:
    with pytest.raises(ToolSpecError, match="is not a canonical tool id"):
        ToolSpec(id=bad, description="x", input_schema=SCHEMA)


def test_id_mapping_to_too_long_llm_name_is_rejected() -> None:
    with pytest.raises(ToolSpecError, match="longer than 64 characters; shorten"):
        ToolSpec(id="a" * 40 + "." + "b" * 30 + "@1.0.0", description="x", input_schema=SCHEMA)


_segment = st.from_regex(r"[a-z][a-z0-9]{0,5}(?:[_-][a-z0-9]{1,4}){0,2}", fullmatch=True)
_version = st.from_regex(
    r"(?:0|[1-9][0-9]{0,2})\.(?:0|[1-9][0-9]?)\.(?:0|[1-9])(?:-[0-9a-zA-Z-]{1,4}(?:\.[0-9a-z]{1,3})?)?",
    fullmatch=True,
)


@given(st.lists(_segment, min_size=2, max_size=4), _version)
def test_llm_name_is_openai_safe_and_reversible(segments: list[str], version: str) -> None:
    tool_id = ".".join(segments) + "@" + version
    name = llm_name_for(tool_id)
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in name)
    assert tool_id_from_llm_name(name) == tool_id


def test_tool_id_from_llm_name_rejects_foreign_names() -> None:
    assert tool_id_from_llm_name("get_weather") is None
    assert tool_id_from_llm_name("a__b") is None


def test_lock_templates_parse_and_render() -> None:
    template = parse_lock_template("file:{path}:S")
    assert (template.kind, template.mode, template.fields) == ("file", "S", ("path",))
    assert template.render({"path": "a/b.txt"}) == "file:a/b.txt"
    assert parse_lock_template("workspace:X").fields == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workspace", "does not end in ':S' or ':X'"),
        ("file:{path}:W", "does not end in ':S' or ':X'"),
        ("File:{path}:S", "has no lower-case resource kind"),
        ("file:{path.__class__}:S", "has placeholder {path.__class__}"),
        ("file:{path!r}:S", "has placeholder {path}"),
    ],
)
def test_bad_lock_templates_are_rejected(text: str, message: str) -> None:
    with pytest.raises(ToolSpecError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_lock_template(text)


def test_lock_template_must_name_a_declared_argument() -> None:
    with pytest.raises(
        ToolSpecError, match=r"lock file:\{pth\}:S uses \['pth'\] which input_schema"
    ):
        ToolSpec(id="a.b@1.0.0", description="x", input_schema=SCHEMA, locks=("file:{pth}:S",))


def test_subprocess_spec_needs_exec_path() -> None:
    with pytest.raises(ToolSpecError, match="a subprocess tool needs exec_path"):
        ToolSpec(id="a.b@1.0.0", description="x", input_schema=SCHEMA, executor="subprocess")


def test_spec_round_trips_through_json_and_hash_tracks_every_field() -> None:
    spec = full_spec()
    again = ToolSpec.model_validate_json(spec.model_dump_json())
    assert again == spec
    assert again.spec_hash == spec.spec_hash
    assert spec.model_copy(update={"timeout_s": 13.0}).spec_hash != spec.spec_hash
    assert (spec.name, spec.version, spec.path_args) == ("acme.git.commit", "1.2.3", ("path",))


# --------------------------------------------------------------------------- @tool


def test_tool_decorator_builds_schema_from_signature() -> None:
    @tool(id="demo.greet@1.0.0", locks=("file:{name}:S",))
    def greet(
        ctx: ToolContext,
        name: Annotated[str, Field(description="Who to greet.")],
        style: Literal["short", "long"] = "short",
        times: int = 1,
    ) -> str:
        """Greet someone."""
        return name * times

    assert isinstance(greet, PythonTool)
    assert not isinstance(greet, AsyncPythonTool)
    schema = greet.spec.input_schema
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["name"]["description"] == "Who to greet."
    assert schema["properties"]["style"]["enum"] == ["short", "long"]
    assert "ctx" not in schema["properties"]
    assert greet.spec.description == "Greet someone."


def test_async_function_gives_async_tool() -> None:
    @tool(id="demo.wait@1.0.0", description="Wait.")
    async def wait(seconds: float) -> None:
        return None

    assert isinstance(wait, AsyncPythonTool)


class FindArgs(BaseModel):
    query: str
    limit: int = 5


def test_tool_from_an_args_model() -> None:
    @tool(id="demo.find@1.0.0", description="Find.", args_model=FindArgs)
    def find(args: FindArgs) -> list[str]:
        return [args.query] * args.limit

    assert find.spec.input_schema["properties"]["limit"]["default"] == 5


def test_tool_decorator_reports_every_bad_parameter_at_once() -> None:
    with pytest.raises(ToolSpecError) as info:

        @tool(id="demo.bad@1.0.0", description="Bad.")
        def bad(a, *rest: int, **kw: int) -> None:  # type: ignore[no-untyped-def]
            return None

    text = str(info.value)
    assert "has 3 problems" in text
    assert "bad (demo.bad@1.0.0)#/a: parameter has no type annotation (fix: annotate it)" in text
    assert "#/rest: *args/**kwargs cannot be tool arguments" in text
    assert "#/kw: *args/**kwargs cannot be tool arguments" in text


def test_tool_without_description_is_rejected() -> None:
    with pytest.raises(ToolSpecError, match=r"demo.quiet@1.0.0#/description: the tool has no"):

        @tool(id="demo.quiet@1.0.0")
        def quiet(a: int) -> None:
            return None


def test_tool_decorator_names_the_function_on_a_bad_id() -> None:
    with pytest.raises(
        ToolSpecError,
        match=r"f \(bad\) is invalid: .*f \(bad\)#/id: 'bad' is not a canonical tool id",
    ):

        @tool(id="bad", description="x")
        def f(a: int) -> None:
            return None
