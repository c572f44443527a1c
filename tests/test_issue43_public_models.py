"""Every public pydantic model raises only errors of the one tree, however it is built.

The models are discovered, not listed: every ``BaseModel`` subclass exported in the
``__all__`` of ``stargraph`` or of any public module under it, so that a model added later
is held to the same rule without anyone remembering to add it here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from functools import partial

import pytest
from pydantic import BaseModel

import stargraph
from stargraph.errors import StargraphError


def public_models() -> dict[str, type[BaseModel]]:
    """Every pydantic model in a public ``__all__``, by its qualified name."""
    names = ["stargraph"]
    for info in pkgutil.walk_packages(stargraph.__path__, "stargraph."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    found: dict[str, type[BaseModel]] = {}
    for name in names:
        module = importlib.import_module(name)
        for export in getattr(module, "__all__", ()):
            value = getattr(module, export, None)
            if inspect.isclass(value) and issubclass(value, BaseModel):
                found.setdefault(f"{value.__module__}.{value.__qualname__}", value)
    return found


MODELS = public_models()


class _Wrong:
    """A value of no type any field declares (only ``Any``/``object`` take it)."""

    def __repr__(self) -> str:
        return "<wrong>"


def probes(model: type[BaseModel]) -> dict[str, tuple[Callable[[], object], str]]:
    """Bad ways to build ``model``, each with a name its error must mention (besides the
    model's: a field that takes anything leaves the other fields missing)."""
    me = model.__name__
    cases: dict[str, tuple[Callable[[], object], str]] = {
        "unknown key": (lambda: model(**{"__bogus__": _Wrong()}), me),
        "validate a non-dict": (lambda: model.model_validate(42), me),
        "validate a list": (lambda: model.model_validate([]), me),
        "truncated JSON": (lambda: model.model_validate_json("{"), me),
        "JSON array": (lambda: model.model_validate_json("[]"), me),
        "JSON of wrong types": (
            lambda: model.model_validate_json(
                "{" + ",".join(f'"{f}": {{"x": [1]}}' for f in model.model_fields) + "}"
            ),
            me,
        ),
    }
    for field in model.model_fields:
        cases[f"field {field}"] = (partial(model, **{field: _Wrong()}), field)
    return cases


def test_issue43_public_models_are_discovered() -> None:
    # The discovery itself must reach the subpackages' models, or the test below is empty.
    short = {name.rpartition(".")[2] for name in MODELS}
    assert {"ToolResult", "Cassette", "Interrupt", "StepRecord", "EndpointProfile"} <= short
    assert len(MODELS) > 50, sorted(MODELS)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_issue43_every_public_model_raises_only_typed_errors(name: str) -> None:
    model = MODELS[name]
    escaped: list[str] = []
    for how, (build, culprit) in probes(model).items():
        try:
            build()
        except StargraphError as exc:
            if culprit not in str(exc) and model.__name__ not in str(exc):
                escaped.append(f"{how}: {type(exc).__name__} does not name {culprit!r}: {exc}")
        except Exception as exc:  # anything else escaping is the failure this test is for
            escaped.append(f"{how}: {type(exc).__module__}.{type(exc).__name__}: {exc}"[:300])
    assert not escaped, "\n".join(escaped)
