"""A SkillSpec machine on PostgreSQL: the same final state as without a store, and a resume
of a run whose second step failed (the store cells of the other backends are in
``tests/skills/machine/test_issue44_machine_with_stores.py``)."""

# Fixtures are imported from test_machine_helpers (no conftest there) and then requested as
# arguments, which pyflakes reads as redefinitions.
# ruff: noqa: F811

from __future__ import annotations

from typing import Any

import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.errors import LLMError
from stargraph.llm import OpenAIChatModel
from stargraph.skills.machine import skillspec_graph
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter
from tests.skills.machine.test_issue44_machine_with_stores import SCRIPT
from tests.skills.machine.test_machine_helpers import (  # noqa: F401 -- fixtures
    QUERIES,
    _reset,
    arbiter,
    chat,
    server,
    small_spec,
)

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)


def _final(app: Any) -> dict[str, Any]:
    return dict(app.invoke({"input": {"topic": "x"}}, run_id="run-1").model_dump(mode="json"))


def test_issue44_machine_runs_and_resumes_on_postgres(
    pg_dsn: str,
    pg_schema: str,
    server: ScriptedOpenAIServer,
    chat: OpenAIChatModel,
    arbiter: Arbiter,
) -> None:
    services = {"model": chat, "arbiter": arbiter}
    server.set_script(SCRIPT)
    expected = _final(skillspec_graph(small_spec()).compile(services=services))
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        server.set_script(SCRIPT)
        app = skillspec_graph(small_spec()).compile(services=services, store=store)
        assert _final(app) == expected
        server.set_script([SCRIPT[0], Reply.error(500, "upstream down")])
        with pytest.raises(LLMError):
            app.invoke({"input": {"topic": "x"}}, run_id="run-2")
        QUERIES.clear()
        server.set_script(SCRIPT[1:])
        assert app.resume("run-2").model_dump(mode="json") == expected
        assert QUERIES == []
