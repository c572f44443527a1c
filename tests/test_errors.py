"""The one exception tree (STYLE 4): every class under StargraphError, split compile/run."""

from __future__ import annotations

import inspect

import pytest

from stargraph import errors
from stargraph.errors import (
    CompileError,
    GraphHashMismatch,
    Problem,
    RunError,
    StargraphError,
    UsageError,
)


def _classes() -> list[type[BaseException]]:
    return [
        obj
        for name in errors.__all__
        if inspect.isclass(obj := getattr(errors, name))
        and issubclass(obj, BaseException)
        and not issubclass(obj, Warning)
    ]


def test_every_error_is_compile_run_or_usage() -> None:
    for cls in _classes():
        assert issubclass(cls, StargraphError)
        if cls is not StargraphError:
            branches = [issubclass(cls, b) for b in (CompileError, RunError, UsageError)]
            assert branches.count(True) == 1, cls
        assert cls.__doc__, cls


def test_issue23_store_and_graphviz_errors_are_usage_errors_not_run_errors() -> None:
    # Neither happens while a run executes: a store refusing its input, no `dot` installed.
    for cls in (errors.StoreError, errors.GraphvizNotFoundError):
        assert issubclass(cls, UsageError), cls
        assert not issubclass(cls, RunError), cls
    assert issubclass(errors.StoreError, ValueError)
    assert issubclass(errors.GraphvizNotFoundError, FileNotFoundError)


def test_issue23_compile_error_at_raises_one_located_problem() -> None:
    err = errors.SkillValidationError.at("/name", "empty name", "name the skill", subject="x")
    assert type(err) is errors.SkillValidationError
    assert err.problems == (Problem("/name", "empty name", "name the skill"),)
    assert str(err) == "x is invalid: /name: empty name (fix: name the skill)"
    # Without a subject, each class keeps its own default.
    assert errors.PluginLoadError.at("/p", "broken").subject == "plugin setup"
    assert CompileError.at("/p", "broken").subject == "graph"


def test_issue23_replay_divergence_error_declares_its_fields() -> None:
    err = errors.ReplayDivergenceError(
        "diverged",
        run_id="r",
        step=2,
        node="n",
        call_index=0,
        fingerprint="a",
        recorded_fingerprint="b",
    )
    assert (err.call_index, err.fingerprint, err.recorded_fingerprint) == (0, "a", "b")
    assert (err.run_id, err.step, err.node) == ("r", 2, "n")
    bare = errors.ReplayDivergenceError("the graph scheduled other nodes")
    assert (bare.call_index, bare.fingerprint, bare.recorded_fingerprint) == (None, None, None)


def test_issue23_tool_errors_declare_their_failure() -> None:
    import pickle
    import re
    from pathlib import Path

    from stargraph.tools import ToolFailure, failure_of

    failure = ToolFailure(code="path_escape", tool="fs.read@1.0.0", message="m", hint="h")
    err = errors.ToolNotAllowedError("refused", node="act", failure=failure)
    assert (err.failure, err.node, str(err)) == (failure, "act", "refused")
    assert failure_of(err) is failure
    back = pickle.loads(pickle.dumps(err))  # a process pool sends errors back pickled
    assert (type(back), back.failure, back.node) == (errors.ToolNotAllowedError, failure, "act")
    bare = errors.LockTimeoutError("busy")
    assert bare.failure is None
    assert (failure_of(bare).code, failure_of(bare).message) == ("lock_timeout", "busy")
    # Nobody sets it from outside the class.
    src = Path(errors.__file__).parent
    pattern = re.compile(r"setattr\([^)]*failure|getattr\([^)]*\"failure\"")
    found = [str(p) for p in src.rglob("*.py") if pattern.search(p.read_text(encoding="utf-8"))]
    assert found == []


def test_issue23_lane_busy_is_a_deprecated_alias_of_lane_busy_error() -> None:
    assert "LaneBusy" not in errors.__all__
    with pytest.warns(
        DeprecationWarning, match=r"errors\.LaneBusy is deprecated; use .*LaneBusyError"
    ):
        from stargraph.errors import LaneBusy
    assert LaneBusy is errors.LaneBusyError
    with pytest.raises(AttributeError, match="no attribute 'LaneBusier'"):
        _ = errors.LaneBusier


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


def test_issue23_run_errors_take_their_location_and_refuse_unknown_keywords() -> None:
    from stargraph.errors import ChatDataError, InvalidPayloadError, RunCancelledError

    cancelled = RunCancelledError("stopped", run_id="r", step=3, reason="SIGINT")
    assert (cancelled.run_id, cancelled.step, cancelled.node, cancelled.reason) == (
        "r",
        3,
        None,
        "SIGINT",
    )
    payload = InvalidPayloadError("bad", field="x.y", node="n")
    assert (payload.field, payload.node, payload.run_id) == ("x.y", "n", None)
    with pytest.raises(TypeError, match="feild"):
        InvalidPayloadError("bad", feild="x")  # type: ignore[call-arg]
    chat = ChatDataError("no role")
    assert isinstance(chat, RunError)
    assert isinstance(chat, ValueError)
    assert (str(chat), chat.subject, chat.run_id) == (
        "chat data is invalid: : no role",
        "chat data",
        None,
    )
