"""The trust model's other half: IR refs name Python callables, so an IR is code;
``stargraph.refs.trusted_modules`` limits which modules a ref may resolve under (issue 25)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import CompileError, UntrustedRefError
from stargraph.examples.basics import chain_graph
from stargraph.graph import Graph
from stargraph.ir import GraphIR
from stargraph.refs import resolve_ref, trusted_modules


@pytest.fixture
def evil_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package whose import alone writes a marker file."""
    package = tmp_path / "evilpkg"
    package.mkdir()
    marker = tmp_path / "imported"
    (package / "__init__.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n\n"
        "def node(state, ctx):\n    return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


def test_an_untrusted_ref_is_refused_before_its_module_is_imported(evil_package: Path) -> None:
    with trusted_modules("stargraph"), pytest.raises(UntrustedRefError) as info:
        resolve_ref("evilpkg:node")
    assert not evil_package.exists()
    error = info.value
    assert isinstance(error, CompileError)
    assert isinstance(error, ImportError)  # callers that report unimportable refs see it
    assert str(error) == (
        "ref 'evilpkg:node' is invalid: evilpkg:node: module 'evilpkg' is not trusted; only "
        "modules under 'stargraph' are trusted here, and resolving a ref imports its module "
        "and later calls what it names (fix: load IR files only from people you trust; if "
        "this module is yours, add it to trusted_modules(...))"
    )


def test_without_a_restriction_a_ref_imports_its_module(evil_package: Path) -> None:
    """Why the restriction exists: resolving an IR's ref runs the module's code."""
    assert callable(resolve_ref("evilpkg:node"))
    assert evil_package.exists()


def test_trusted_prefixes_admit_submodules_only() -> None:
    with trusted_modules("stargraph"):
        assert resolve_ref("stargraph.examples.basics:bump") is chain_graph.__globals__["bump"]
        with pytest.raises(UntrustedRefError, match="module 'stargraphx' is not trusted"):
            resolve_ref("stargraphx:anything")


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("stargraph.refs:importlib.import_module", "'importlib' is a module reached through"),
        ("stargraph.refs:Any", "it names an object defined in 'typing'"),
        ("builtins:exec", "only exception classes may be named from builtins"),
        ("os:system", "module 'os' is not trusted"),
    ],
)
def test_a_trusted_module_is_not_a_way_into_others(ref: str, why: str) -> None:
    with trusted_modules("stargraph"), pytest.raises(UntrustedRefError, match=why):
        resolve_ref(ref)


def test_builtin_exception_classes_stay_usable_in_retry_policies() -> None:
    with trusted_modules("myapp"):
        assert resolve_ref("builtins:TimeoutError") is TimeoutError


def test_nested_restrictions_narrow() -> None:
    with trusted_modules("stargraph"), trusted_modules("stargraph.graph", "os"):
        assert resolve_ref("stargraph.graph:Graph") is Graph
        with pytest.raises(UntrustedRefError):
            resolve_ref("stargraph.refs:resolve_ref")
        with pytest.raises(UntrustedRefError):
            resolve_ref("os:getcwd")  # the outer block never trusted os


def test_the_restriction_ends_with_the_block_and_stays_in_its_thread() -> None:
    seen: list[Any] = []
    with trusted_modules("stargraph"):
        thread = threading.Thread(target=lambda: seen.append(resolve_ref("os:getcwd")))
        thread.start()
        thread.join()
    assert len(seen) == 1  # a new thread starts without the restriction
    assert callable(seen[0])
    assert callable(resolve_ref("os:getcwd"))
    with pytest.raises(ValueError, match="needs module prefixes"), trusted_modules():
        pass


def _ir_with_node_ref(ref: str) -> GraphIR:
    data = chain_graph(1).to_ir().model_dump(mode="json")
    data["nodes"][0]["ref"] = ref
    return GraphIR.model_validate(data)


def test_compiling_an_ir_under_trusted_modules_refuses_a_foreign_callable(
    evil_package: Path,
) -> None:
    """A downloaded IR whose node points at a callable outside the trusted modules does
    not compile, and nothing of the foreign module runs."""
    ir = GraphIR.from_json(_ir_with_node_ref("evilpkg:node").to_json())
    with trusted_modules("stargraph"), pytest.raises(CompileError) as info:
        Graph(ir).compile()
    assert "evilpkg:node" in str(info.value)
    assert "module 'evilpkg' is not trusted" in str(info.value)
    assert not evil_package.exists()
    with trusted_modules("stargraph"):  # an IR naming only trusted callables compiles
        Graph(GraphIR.from_json(chain_graph(2).to_ir().to_json())).compile()
