"""An agent store whose file or directory cannot be used is a typed error naming the file.

Issue 25 item 12 (unreadable skill/agent directories escaped as raw exceptions): the store
let ``FileExistsError`` and ``sqlite3`` errors out of its constructor.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from stargraph.agents import AgentStore
from stargraph.errors import LifecycleError


def test_a_store_under_a_file_names_the_store(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("not a directory")
    path = tmp_path / "plain" / "agents.db"
    with pytest.raises(LifecycleError) as info:
        AgentStore(path)
    assert str(info.value).startswith(f"cannot open the agent store {str(path)!r}: ")
    assert str(info.value).endswith(
        "; its directory must exist (or be creatable) and be readable and writable"
    )


def test_a_store_on_a_directory_names_the_store(tmp_path: Path) -> None:
    with pytest.raises(LifecycleError, match=r"cannot open the agent store .*unable to open"):
        AgentStore(tmp_path)


def test_a_store_on_a_file_that_is_not_a_database_names_the_store(tmp_path: Path) -> None:
    path = tmp_path / "agents.db"
    path.write_bytes(b"this is not SQLite " * 64)
    with pytest.raises(LifecycleError) as info:
        AgentStore(path)
    assert str(info.value) == (
        f"cannot open the agent store {str(path)!r}: file is not a database; is it an agent "
        "store made by stargraph? Pass another path, or move this file away"
    )
    # A good path still works, and the store is usable.
    with AgentStore(tmp_path / "ok" / "agents.db") as store:
        assert store.agents() == []
