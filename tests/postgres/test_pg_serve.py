"""``stargraph serve`` on PostgreSQL, driven by LangGraph's own client: the acceptance
scenario of ``tests/serve`` on a real server, and several servers sharing one database -
runs made through one are run by the workers of another, streamed through either, each run
run once and each event stored once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from langgraph_sdk import get_client, get_sync_client

from tests.serve import graphs
from tests.serve.support import InThread
from tests.serve.test_issue50_serve import check_review, drive_review

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)


@pytest.fixture
def servers(pg_dsn: str, pg_schema: str) -> Iterator[Any]:
    started: list[InThread] = []

    def start(**options: Any) -> InThread:
        server = InThread([graphs.review, graphs.counter], pg_dsn, schema=pg_schema, **options)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def test_issue50_pg_langgraph_client_drives_a_thread_through_an_interrupt(servers: Any) -> None:
    server = servers()
    check_review(asyncio.run(drive_review(server.url)))


def test_issue50_pg_two_servers_share_the_runs_each_run_once(servers: Any, tmp_path: Path) -> None:
    front = servers(workers=0)  # takes requests, runs nothing
    back = servers(workers=2)  # runs what the front queued

    async def main() -> list[tuple[str, list[int], list[int]]]:
        async with get_client(url=front.url) as a, get_client(url=back.url) as b:

            async def one(i: int) -> tuple[str, list[int], list[int]]:
                client = a if i % 2 else b
                tid = (await client.threads.create())["thread_id"]
                parts = [
                    p
                    async for p in client.runs.stream(
                        tid, "counter", input={}, stream_mode="values"
                    )
                ]
                ids = [int(p.id) for p in parts if p.id is not None]
                last = parts[-1].data
                return tid, ids, last["steps"]

            return await asyncio.gather(*(one(i) for i in range(12)))

    done = asyncio.run(main())
    with get_sync_client(url=front.url) as client:
        for tid, ids, steps in done:
            assert steps == [1, 2, 3, 4, 5]
            assert ids == sorted(set(ids)), f"an event came twice on {tid}: {ids}"
            (listed,) = client.runs.list(tid)
            run = cast(dict[str, Any], listed)  # with stargraph's own key, beside LangGraph's
            assert run["status"] == "success"
            assert run["stargraph"]["attempts"] == 1  # claimed once, by one server
