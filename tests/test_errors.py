"""The one exception tree (STYLE 4): every class under StargraphError, split compile/run."""

from __future__ import annotations

import inspect

from stargraph import errors
from stargraph.errors import (
    CompileError,
    GraphHashMismatch,
    Problem,
    RunError,
    StargraphError,
)


def _classes() -> list[type[BaseException]]:
    return [
        obj
        for name in errors.__all__
        if inspect.isclass(obj := getattr(errors, name))
        and issubclass(obj, BaseException)
        and not issubclass(obj, Warning)
    ]


def test_every_error_is_compile_or_run_time() -> None:
    for cls in _classes():
        assert issubclass(cls, StargraphError)
        if cls is not StargraphError:
            assert issubclass(cls, CompileError) != issubclass(cls, RunError), cls
        assert cls.__doc__, cls


def test_errors_also_subclass_the_builtin_they_resemble() -> None:
    assert issubclass(CompileError, ValueError)
    assert issubclass(RunError, RuntimeError)
    assert issubclass(errors.RunNotFoundError, LookupError)
    assert issubclass(errors.NodeTimeoutError, TimeoutError)


def test_docstring_tree_names_every_class() -> None:
    doc = errors.__doc__ or ""
    for cls in _classes():
        assert cls.__name__ in doc, f"{cls.__name__} missing from the tree in errors.py"


def test_compile_error_lists_every_problem() -> None:
    err = CompileError([Problem("/a", "first", "do x"), Problem("/b", "second")])
    assert str(err) == "graph has 2 problems:\n  - /a: first (fix: do x)\n  - /b: second"
    assert CompileError("plain").problems == (Problem("", "plain"),)


def test_graph_hash_mismatch_message() -> None:
    err = GraphHashMismatch(run_id="r-1", stored="sha256:aa", current="sha256:bb")
    assert str(err) == (
        "run 'r-1' was recorded by graph sha256:aa but this graph is sha256:bb; resume it "
        "with the graph that made it, or pass migration=... to resume() to accept the new "
        "graph explicitly"
    )
    assert (err.stored, err.current, err.run_id) == ("sha256:aa", "sha256:bb", "r-1")


def test_warnings_have_their_own_root() -> None:
    assert issubclass(errors.CodeHashWarning, errors.StargraphWarning)
    assert issubclass(errors.StargraphWarning, UserWarning)
    assert not issubclass(errors.StargraphWarning, StargraphError)
