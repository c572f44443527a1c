"""What the core packages put in ``sys.modules``: no server stack, no model client.

A behaviour pin, not a timing check: each case imports the core packages in a fresh
interpreter and names the modules that must not have come with them. Servers belong to
the console, the scripted server and the builtins' fake servers, which import them when
they start; the ``openai`` client comes with the first model that is built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_CORE = ("stargraph", "stargraph.llm", "stargraph.skills.react", "stargraph.tools")
_SERVERS = ("http.server", "socketserver", "wsgiref", "starlette", "uvicorn", "aiohttp")
_HEAVY = ("openai", "httpx", "pycparser", "langchain_core")


def _loaded_after(*modules: str) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return set(json.loads(done.stdout))


def _roots_in(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("module", _CORE)
def test_issue45_core_imports_no_server(module: str) -> None:
    loaded = _loaded_after(module)
    assert module in loaded
    assert _roots_in(loaded, _SERVERS) == []


def test_issue45_core_imports_no_model_client_or_c_parser() -> None:
    loaded = _loaded_after(*_CORE)
    assert _roots_in(loaded, _HEAVY) == []


# What each import leaves for later: the stores, clipspy, the tool arbiter, the model
# clients, and pydantic's plugin scan (importlib.metadata), which runs at the first schema
# built; none of them is needed to import the package.
_LEFT_FOR_LATER = {
    "stargraph": (
        "sqlite3",
        "zstandard",
        "clips",
        "importlib.metadata",
        "pickle",
        "stargraph.checkpoint._sqlite",
        "stargraph.checkpoint._watch",
    ),
    "stargraph.llm": ("importlib.metadata", "stargraph.llm._openai", "stargraph.llm._profiles"),
    "stargraph.fathom": ("clips", "stargraph.fathom._engine", "stargraph.fathom._load"),
    "stargraph.tools": ("sqlite3", "stargraph.tools._arbiter", "stargraph.tools._registry"),
    "stargraph.skills.react": (
        "clips",
        "importlib.metadata",
        "stargraph.tools._arbiter",
        "stargraph.tools._spec",
        "stargraph.llm._openai",
    ),
}


@pytest.mark.parametrize("module", sorted(_LEFT_FOR_LATER))
def test_issue45_an_import_leaves_what_it_does_not_use_for_later(module: str) -> None:
    loaded = _loaded_after(module)
    assert _roots_in(loaded, _LEFT_FOR_LATER[module]) == []


def test_issue45_what_an_import_left_comes_at_first_use() -> None:
    code = (
        "import json, sys\n"
        "from stargraph import checkpoint, fathom, llm\n"
        "before = sorted(sys.modules)\n"
        "from stargraph.checkpoint import SqliteStore\n"
        "from stargraph.llm import OPENAI\n"
        "assert fathom.RuleEngine.__module__ == 'stargraph.fathom._engine'\n"
        "assert SqliteStore.__module__ == 'stargraph.checkpoint._sqlite'\n"
        "assert OPENAI.name == 'openai'\n"
        "print(json.dumps([before, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    before, after = (set(m) for m in json.loads(done.stdout))
    assert {"clips", "sqlite3"} & before == set()
    assert {"clips", "sqlite3"} <= after
