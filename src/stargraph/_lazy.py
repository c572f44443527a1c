"""Package re-exports imported when first read, not when the package is imported (PEP 562).

A package lists where each public name lives; :func:`exports` gives the module-level
``__getattr__`` and ``__dir__`` that import that module at the first read of the name and
keep the value as a plain attribute of the package from then on. A program pays for the
parts it uses: ``from stargraph.tools import ToolResult`` does not import the arbiter, and
``import stargraph.fathom`` does not load clipspy until an engine is made.

Type checkers do not run ``__getattr__``, so each package also imports the same names under
``if TYPE_CHECKING:``; ``tests/test_issue45_imports.py`` checks that the two lists agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["exports"]


def exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``, whose lazy names ``where`` maps to the
    module that defines each (relative to the package, e.g. ``"._arbiter"``), or to
    ``"module:name"`` when the package exports it under another name."""

    def getattr_(name: str) -> object:
        found = where.get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = found.partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        # Kept on the package: later reads are plain attribute reads, not this call.
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return getattr_, dir_
