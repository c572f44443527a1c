"""The model is offered a tool's argument schema without pydantic's ``title`` annotations
(Qwen2.5-Coder 0.5B called a tool by its schema's title), while an argument that is itself
called ``title`` stays, and the spec the arbiter validates with keeps every title."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from stargraph.tools import tool


class Line(BaseModel):
    title: str
    amount: float


@tool(id="books.add@1.0.0")
def add(title: str, lines: list[Line], note: str | None = None) -> int:
    """Add a book with its lines."""
    return len(lines)


def titles(schema: Any) -> list[str]:
    """Every ``title`` annotation in ``schema`` (not properties named so)."""
    found: list[str] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                found.append(value)
            elif key in ("properties", "$defs"):
                for sub in value.values():
                    found += titles(sub)
            else:
                found += titles(value)
    elif isinstance(schema, list):
        for item in schema:
            found += titles(item)
    return found


def test_issue47_the_offered_schema_has_no_titles_and_keeps_an_argument_named_title() -> None:
    spec = add.spec
    assert titles(spec.input_schema)  # pydantic's, kept for validation
    offered = spec.llm_view()["function"]["parameters"]
    assert titles(offered) == []
    assert set(offered["properties"]) == {"title", "lines", "note"}
    assert offered["required"] == spec.input_schema["required"]
    line = offered["$defs"]["Line"]
    assert set(line["properties"]) == {"title", "amount"}
    assert line["properties"]["title"] == {"type": "string"}
    # A new object each time: a caller that edits the view leaves the spec as it was.
    offered["properties"].clear()
    assert spec.llm_view()["function"]["parameters"]["properties"]
