"""The packages that import their public names at first read export the same names as before.

Each such package imports the names under ``TYPE_CHECKING`` (for type checkers) and lists
them in a table its ``__getattr__`` reads: the two must agree, and every name of ``__all__``
must resolve to the object its defining module holds. The shipped literals built without
validation (so that importing builds no schema) must equal their validated forms.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import stargraph

_LAZY = ("stargraph.checkpoint", "stargraph.fathom", "stargraph.llm", "stargraph.tools")
_ROOT = Path(stargraph.__file__).parent


def _type_checking_imports(package: str) -> list[tuple[str, str, str]]:
    """``(module, name, exported as)`` of each import under the package's TYPE_CHECKING."""
    path = _ROOT.joinpath(*package.split(".")[1:], "__init__.py")
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom)
                assert item.module is not None
                found += [(item.module, a.name, a.asname or a.name) for a in item.names]
    return found


@pytest.mark.parametrize("package", _LAZY)
def test_issue45_lazy_names_resolve_to_what_type_checkers_see(package: str) -> None:
    module = importlib.import_module(package)
    typed = _type_checking_imports(package)
    assert typed, f"{package} imports no name lazily"
    for source, name, exported in typed:
        assert exported in module.__all__
        assert exported in dir(module)
        assert getattr(module, exported) is getattr(importlib.import_module(source), name)
    for name in module.__all__:
        assert hasattr(module, name), f"{package}.{name}"


@pytest.mark.parametrize("package", _LAZY)
def test_issue45_an_unknown_name_is_still_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    assert not hasattr(module, "no_such_name")
    with pytest.raises(ImportError, match="no_such_name"):
        exec(f"from {package} import no_such_name", {})


def _literals() -> list[BaseModel]:
    from stargraph.fathom import _engine
    from stargraph.llm import GENERIC, LLAMA_CPP, OLLAMA, OPENAI, VLLM, ChatResponse
    from stargraph.skills import CHOIR_NESTING, DEFAULT_NESTING
    from stargraph.skills.react import ReactState
    from stargraph.tools import _commit

    usage: Any = ChatResponse.model_fields["usage"].default
    react_usage: Any = ReactState.model_fields["usage"].default
    return [
        OPENAI,
        VLLM,
        LLAMA_CPP,
        OLLAMA,
        GENERIC,
        DEFAULT_NESTING,
        CHOIR_NESTING,
        _engine._CONTINUE,
        _commit._EMPTY,
        usage,
        react_usage,
    ]


def test_issue45_shipped_literals_equal_their_validated_forms() -> None:
    for literal in _literals():
        # What the constructor call would have built from the same arguments.
        validated = type(literal)(**literal.model_dump(exclude_unset=True))
        assert validated == literal
        assert validated.model_dump_json() == literal.model_dump_json()
        assert validated.model_fields_set == literal.model_fields_set
