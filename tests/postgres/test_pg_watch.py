"""``PostgresStore`` change notices: each write that changes what a run looks like is
followed by a ``NOTIFY`` on the schema's channel with the run id, and ``store.watch(run_id)``
wakes on them (``LISTEN`` on a connection of its own), whichever connection or process
wrote."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest

from stargraph.checkpoint import PollingWatch, PostgresStore, RunOwner, StepRecord, watch_runs
from stargraph.checkpoint.conformance import make_run
from stargraph.errors import CheckpointError, StoreUnavailableError

DEADLINE_S = 60.0


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    with PostgresStore(pg_dsn, schema=pg_schema) as s:
        yield s


@pytest.fixture
def writer(pg_dsn: str, pg_schema: str, store: PostgresStore) -> Iterator[PostgresStore]:
    """Another store on the same schema: its own connections, as another process has."""
    with PostgresStore(pg_dsn, schema=pg_schema, application_name="other-writer") as s:
        yield s


def _notices(pg_dsn: str, channel: str, act: object) -> list[str]:
    """The payloads ``act()`` sends on ``channel``, in commit order (up to a marker the test
    sends last, so no wait guesses how long delivery takes)."""
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel}"')
        assert callable(act)
        act()
        listener.execute("SELECT pg_notify(%s, 'end-of-test')", (channel,))
        payloads: list[str] = []
        for note in listener.notifies(timeout=DEADLINE_S):
            if note.payload == "end-of-test":
                return payloads
            payloads.append(note.payload)
    raise AssertionError(f"the end marker never arrived; got {payloads}")


def test_each_write_that_changes_a_run_notifies_with_its_id(
    store: PostgresStore, pg_dsn: str
) -> None:
    owner = RunOwner(token="t1", host="h.invalid", pid=1, started_at="x", lease_s=60.0)

    def act() -> None:
        store.create_run(make_run("a"), StepRecord(step=0, snapshot={}))
        store.commit_step("a", StepRecord(step=1))
        with pytest.raises(CheckpointError):
            store.commit_step("a", StepRecord(step=1))  # refused (fenced): no notice
        store.set_status("a", "interrupted")
        store.acquire("a", owner)  # a lease taken or renewed: no notice (nothing shown moved)
        assert store.heartbeat("a", owner)
        store.set_status("a", "done", owner="t1")
        store.create_run(make_run("b"), StepRecord(step=0, snapshot={}))

    assert _notices(pg_dsn, store.channel, act) == ["a", "a", "a", "a", "b"]


def test_a_run_id_no_payload_can_carry_is_announced_as_any_run(
    store: PostgresStore, pg_dsn: str
) -> None:
    nul = "x\x00y"

    def act() -> None:
        store.create_run(make_run(nul), StepRecord(step=0, snapshot={}))
        store.commit_step(nul, StepRecord(step=1))

    assert _notices(pg_dsn, store.channel, act) == ["", ""]


def test_a_commit_on_another_connection_wakes_the_watch_of_its_run(
    store: PostgresStore, writer: PostgresStore
) -> None:
    writer.create_run(make_run("r"), StepRecord(step=0, snapshot={}))
    writer.create_run(make_run("other"), StepRecord(step=0, snapshot={}))

    async def main() -> None:
        async with store.watch("r") as watch:
            await asyncio.to_thread(writer.commit_step, "r", StepRecord(step=1))
            assert await watch.wait(DEADLINE_S) is True
            # Another run's commit does not wake it; its own does, and a watch of every run
            # wakes on either.
            await asyncio.to_thread(writer.commit_step, "other", StepRecord(step=1))
            assert await watch.wait(0.2) is False
            async with store.watch() as every:
                await asyncio.to_thread(writer.commit_step, "other", StepRecord(step=2))
                assert await every.wait(DEADLINE_S) is True
            await asyncio.to_thread(writer.set_status, "r", "done")
            assert await watch.wait(DEADLINE_S) is True

    asyncio.run(main())


def test_a_watch_holds_one_listening_connection_until_it_is_left(
    store: PostgresStore, pg_dsn: str
) -> None:
    def listening() -> int:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query = %s",
                ("stargraph-listen", f'LISTEN "{store.channel}"'),
            ).fetchone()
        assert row is not None
        return int(row[0])

    async def main() -> None:
        watch = store.watch("r")
        with pytest.raises(CheckpointError, match="not open"):
            await watch.wait(0)
        async with watch:
            assert await asyncio.to_thread(listening) == 1
        assert await asyncio.to_thread(listening) == 0

    asyncio.run(main())


def test_a_server_that_cannot_be_reached_is_a_store_unavailable_error() -> None:
    from stargraph.checkpoint._watch import ListenWatch

    watch = ListenWatch(
        "postgresql://nobody:secret-pw@127.0.0.1:9/none",  # nothing listens on port 9
        "stargraph_x",
        "r",
        where="127.0.0.1:9/none as nobody",
        password="secret-pw",
        connect_timeout=5,
        application_name="stargraph-listen",
    )

    async def main() -> None:
        with pytest.raises(StoreUnavailableError) as caught:
            async with watch:
                pass
        assert "secret-pw" not in str(caught.value)
        assert "127.0.0.1:9/none" in str(caught.value)
        assert "falls back to polling" in str(caught.value)

    asyncio.run(main())


def test_watch_runs_picks_the_stores_watch_else_polls(store: PostgresStore) -> None:
    from stargraph.checkpoint import MemoryStore
    from stargraph.checkpoint._watch import ListenWatch

    assert isinstance(watch_runs(store, "r", poll_s=1.0), ListenWatch)
    polling = watch_runs(MemoryStore(), "r", poll_s=0.01)
    assert isinstance(polling, PollingWatch)

    async def main() -> None:
        async with polling:
            assert await polling.wait(10.0) is True  # "look again" after poll_s
            assert await polling.wait(0.0) is False  # a timeout shorter than poll_s

    asyncio.run(main())
