"""Docstring examples are tests too (STYLE 10): every ``>>>`` example in the package runs.

Collected here rather than with ``--doctest-modules``, which would also import every
``conftest.py`` as a module named ``conftest`` and trip over the several test folders that
each have one.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import stargraph

# Modules whose import needs a running service or starts one are not collected for
# doctests: their examples are documentation of a server-side API (none today).
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(stargraph.__path__, prefix="stargraph.")
    if not info.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        if test.examples:
            runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {name}"


def test_examples_exist() -> None:
    finder = doctest.DocTestFinder(exclude_empty=True)
    count = sum(
        len(t.examples)
        for name in MODULES
        for t in finder.find(importlib.import_module(name), name)
    )
    assert count >= 25  # the package documents itself with runnable examples
