"""The documentation builds with ``mkdocs build --strict`` (what ``make docs`` runs).

mkdocs-material and mkdocstrings come with the dev extra (and the ``docs`` extra); the test
does not skip without them, it fails, because broken docs are a broken build.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for page in (
        "index.html",
        "getting-started/index.html",
        "concepts/replay/index.html",
        "how-to/postgres/index.html",
        "reference/api/index.html",
        "reference/ir-schema/index.html",
        "reference/cli/index.html",
        "langgraph/index.html",
    ):
        assert (site / page).is_file(), page
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("CompiledGraph", "SqliteStore", "export_cassette", "get_plugin_manager"):
        assert name in api, name
    schema = (site / "reference" / "ir-schema" / "index.html").read_text(encoding="utf-8")
    assert "$schema" in schema or "&quot;properties&quot;" in schema or "properties" in schema
