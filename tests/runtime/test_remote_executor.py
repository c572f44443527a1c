"""Branch work on another executor (``compile(executor=...)``): Ray and a process pool.

The same graphs run on the local executor and remotely must give the same final state, the
same events and the same stored steps, and replay (locally) from the remote run's record.
Ray runs as a single-machine cluster listening on 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import reducers
from stargraph.checkpoint import MemoryStore
from stargraph.errors import CompileError, InvalidWriteError, NodeError, NodeTimeoutError
from stargraph.graph import END, START, Graph, Send
from stargraph.ir import RetryPolicyIR
from stargraph.runtime import CompiledGraph, RunContext, RunFinished, SeededEntropy, SystemEntropy
from stargraph.runtime._context import entropy_from_spec, entropy_spec
from stargraph.runtime._remote import RemoteContextError
from stargraph.runtime.ray import RayExecutor, init_local

TESTS = str(Path(__file__).parents[2])  # the repository root: nodes are tests.runtime.*

# Appended to by branch bodies: in this process only when a branch ran locally.
LOCAL_CALLS: list[str] = []


class Fan(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    item: int = 0
    draws: Annotated[dict[str, str], reducers.merge] = {}


def fan_start(state: Fan) -> dict[str, Any]:
    return {"log": ["start"]}


def branch(state: Fan, ctx: RunContext) -> dict[str, Any]:
    LOCAL_CALLS.append(ctx.node)
    # Entropy drawn by position: the same in every process for a seeded run, and journaled
    # by the orchestrator in a durable one.
    drawn = f"{ctx.random():.8f}/{ctx.uuid()}/{ctx.now().isoformat()}"
    return {"log": [ctx.node], "total": int(ctx.node[1:]), "draws": {ctx.node: drawn}}


def fan_join(state: Fan) -> dict[str, Any]:
    return {"log": [f"join:{state.total}"]}


def fan20() -> Graph[Fan]:
    names = [f"b{i:02d}" for i in range(20)]
    graph = Graph("fan20", state=Fan).with_node("start", fan_start).with_node("join", fan_join)
    for name in names:
        graph = graph.with_node(name, branch, blocking=True).with_edge("start", name)
    return graph.with_edge(START, "start").with_edge(names, "join").with_edge("join", END)


def spread(state: Fan) -> list[Send]:
    return [Send("work", {"item": i}) for i in range(20)]


def work(state: Fan) -> dict[str, Any]:
    LOCAL_CALLS.append(f"work{state.item}")
    return {"log": [f"w{state.item}"], "total": state.item * state.item}


def mapreduce() -> Graph[Fan]:
    return (
        Graph("sends", state=Fan)
        .with_node("start", fan_start)
        .with_node("work", work, blocking=True)
        .with_node("join", fan_join)
        .with_edge(START, "start")
        .with_conditional_edges("start", spread, ["work"])
        .with_edge("work", "join")
        .with_edge("join", END)
    )


# --------------------------------------------------------------------------- executors


@pytest.fixture(scope="module")
def ray_executor() -> Iterator[RayExecutor]:
    # Workers import this module's nodes by path.
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
    init_local(
        num_cpus=2,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    import ray

    executor = RayExecutor()
    try:
        yield executor
    finally:
        executor.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def process_pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    pool = concurrent.futures.ProcessPoolExecutor(
        2, mp_context=multiprocessing.get_context("spawn")
    )
    yield pool
    pool.shutdown(cancel_futures=True)


@pytest.fixture(params=["process", pytest.param("ray", marks=pytest.mark.ray)])
def executor(request: pytest.FixtureRequest) -> concurrent.futures.Executor:
    name = "process_pool" if request.param == "process" else "ray_executor"
    found: concurrent.futures.Executor = request.getfixturevalue(name)
    return found


def _compile(graph: Graph[Fan], executor: concurrent.futures.Executor | None) -> CompiledGraph[Fan]:
    return graph.compile(store=MemoryStore(), entropy=lambda: SeededEntropy(3), executor=executor)


def _trace(app: CompiledGraph[Fan], run_id: str) -> list[tuple[Any, ...]]:
    return [
        (e.kind, e.step, e.node, getattr(e, "index", None), getattr(e, "writes", None))
        for e in app.stream({}, run_id=run_id)
    ]


def _steps(app: CompiledGraph[Fan], run_id: str) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json", exclude={"created_ms"}) for s in app.history(run_id)]


# --------------------------------------------------------------------------- same as local


@pytest.mark.parametrize("graph", [fan20, mapreduce])
def test_fan_out_matches_the_local_executor_and_replays(
    executor: concurrent.futures.Executor, graph: Any
) -> None:
    local = _compile(graph(), None)
    remote = _compile(graph(), executor)
    assert remote.graph_hash == local.graph_hash

    LOCAL_CALLS.clear()
    expected = _trace(local, "r")
    assert len(LOCAL_CALLS) == 20
    LOCAL_CALLS.clear()
    got = _trace(remote, "r")
    assert LOCAL_CALLS == []  # every branch ran in another process
    assert got == expected
    assert remote.get_state("r") == local.get_state("r")
    assert _steps(remote, "r") == _steps(local, "r")  # step ids, writes, next, journal
    final = remote.get_state("r")
    assert final.log[0] == "start"
    assert final.log[-1].startswith("join:")
    assert len(final.log) == 22

    # Replay runs locally from the remote run's record, and equals it.
    LOCAL_CALLS.clear()
    assert remote.replay("r") == remote.get_state("r")
    assert len(LOCAL_CALLS) == 20
    replayed = [
        (e.kind, e.step, e.node, getattr(e, "writes", None)) for e in remote.replay_stream("r")
    ]
    assert replayed == [(k, s, n, w) for k, s, n, _, w in got]


def test_async_driver_on_the_executor(process_pool: concurrent.futures.Executor) -> None:
    local = _compile(fan20(), None)
    remote = _compile(fan20(), process_pool)
    assert asyncio.run(remote.ainvoke({}, run_id="a")) == local.invoke({}, run_id="a")
    assert _steps(remote, "a") == _steps(local, "a")


def test_without_a_store_the_draws_still_match(process_pool: concurrent.futures.Executor) -> None:
    local = fan20().compile(entropy=lambda: SeededEntropy(5))
    remote = fan20().compile(entropy=lambda: SeededEntropy(5), executor=process_pool)
    assert remote.invoke({}, run_id="x") == local.invoke({}, run_id="x")


# --------------------------------------------------------------------------- limits and errors


def registered(state: Fan) -> dict[str, Any]:
    return {"log": ["r"]}


class _FixedEntropy:
    """An entropy source of the user's own: no other process can rebuild it."""

    def now(self) -> datetime:
        return datetime(2030, 1, 1, tzinfo=UTC)

    def uuid(self) -> str:
        return "00000000-0000-4000-8000-000000000000"

    def random(self) -> float:
        return 0.5


def test_an_entropy_source_of_ones_own_stays_local(
    process_pool: concurrent.futures.Executor,
) -> None:
    app = fan20().compile(store=MemoryStore(), entropy=_FixedEntropy, executor=process_pool)
    with pytest.raises(RemoteContextError) as info:
        app.invoke({}, run_id="own")
    message = str(info.value)
    assert "run uses the entropy source _FixedEntropy" in message
    assert "use SeededEntropy or SystemEntropy, or pass blocking=False" in message
    assert (info.value.run_id, info.value.step) == ("own", 2)
    assert app.get_run("own").status == "failed"


def test_entropy_travels_as_seed_and_start() -> None:
    start = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    seeded = SeededEntropy(11, start)
    spec = entropy_spec(seeded)
    assert spec == {"seed": 11, "start": "2031-05-06T07:08:09+00:00"}
    rebuilt = entropy_from_spec(spec)
    assert isinstance(rebuilt, SeededEntropy)
    position = "run\x001\x00node\x000\x000"
    assert rebuilt.uuid_at(position) == seeded.uuid_at(position)
    assert rebuilt.now_at(position, 3, 2) == seeded.now_at(position, 3, 2)
    assert entropy_spec(SystemEntropy()) == {}
    assert isinstance(entropy_from_spec({}), SystemEntropy)
    assert isinstance(entropy_from_spec(None), SystemEntropy)  # a node without a ctx
    # A source no worker can rebuild has no wire form, a subclass of a portable one too.
    assert entropy_spec(_FixedEntropy()) is None
    assert entropy_spec(type("Sub", (SeededEntropy,), {})(1, start)) is None


def test_registry_id_nodes_cannot_go_remote(process_pool: concurrent.futures.Executor) -> None:
    graph = (
        Graph("reg", state=Fan)
        .with_node("local_ok", registered, ref="ns.local")  # not blocking: stays here
        .with_node("far", registered, ref="ns.far", blocking=True)
        .with_edge(START, "local_ok")
        .with_edge(START, "far")
        .with_edge("local_ok", END)
        .with_edge("far", END)
    )
    graph.compile()  # fine without an executor
    with pytest.raises(CompileError) as info:
        graph.compile(executor=process_pool)
    message = str(info.value)
    assert "node 'far' is blocking=True" in message
    assert "'ns.far' is a registry id" in message
    assert "local_ok" not in message
    assert len(info.value.problems) == 1


def uses_once(state: Fan, ctx: RunContext) -> dict[str, Any]:
    ctx.once("mail", lambda: "sent")
    return {}


def uses_services(state: Fan, ctx: RunContext) -> dict[str, Any]:
    return {"log": [str(ctx.services)]}


def uses_interrupt(state: Fan, ctx: RunContext) -> dict[str, Any]:
    try:
        ctx.interrupt("ok?")
    except Exception:  # the signal is not an Exception: a node cannot swallow it
        return {"log": ["swallowed"]}
    return {}


def _pair(fn: Any) -> Graph[Fan]:
    return (
        Graph("pair", state=Fan)
        .with_node("a", fn, blocking=True)
        .with_node("b", fan_start, blocking=True)
        .with_edge(START, "a")
        .with_edge(START, "b")
        .with_edge("a", END)
        .with_edge("b", END)
    )


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (uses_once, "ctx.once()"),
        (uses_services, "ctx.services"),
        (uses_interrupt, "ctx.interrupt()"),
    ],
)
def test_effects_in_a_remote_node_are_a_typed_error(
    process_pool: concurrent.futures.Executor, fn: Any, what: str
) -> None:
    app = _pair(fn).compile(store=MemoryStore(), executor=process_pool)
    with pytest.raises(RemoteContextError) as info:
        app.invoke({}, run_id="e")
    assert str(info.value).startswith(
        f"node 'a' used {what} at step 1 of run 'e' while running on the executor given to "
        "compile(executor=...); remote nodes must be pure functions of state and config"
    )
    assert (info.value.run_id, info.value.step, info.value.node) == ("e", 1, "a")
    assert app.get_run("e").status == "failed"
    # The same graph without an executor runs the node here, where the effect is allowed.
    if fn is uses_once:
        _pair(fn).compile(store=MemoryStore()).invoke({})


@pytest.mark.ray
def test_once_on_ray_is_the_same_typed_error(ray_executor: RayExecutor) -> None:
    app = _pair(uses_once).compile(executor=ray_executor)
    with pytest.raises(RemoteContextError, match=r"node 'a' used ctx\.once\(\) at step 1"):
        app.invoke({})


def explode(state: Fan) -> dict[str, Any]:
    raise KeyError("boom")


def returns_list(state: Fan) -> Any:
    return ["log", 1]


def flaky(state: Fan, ctx: RunContext) -> dict[str, Any]:
    marker = Path(ctx.config["dir"]) / "tried"
    if not marker.exists():
        marker.write_text("once")
        raise ConnectionError("first attempt fails")
    return {"log": ["recovered"]}


def test_errors_and_retries_are_the_local_ones(
    process_pool: concurrent.futures.Executor, tmp_path: Path
) -> None:
    for fn, error, text in [
        (explode, NodeError, "node 'a' failed at step 1 of run 'x': KeyError: 'boom'"),
        (returns_list, InvalidWriteError, "node 'a' at step 1 of run 'x': returned list"),
    ]:
        for ex in (None, process_pool):
            with pytest.raises(error) as info:
                _pair(fn).compile(executor=ex).invoke({}, run_id="x")
            assert str(info.value).startswith(text)
    retry = RetryPolicyIR(max_attempts=2, initial_interval_s=0, jitter=False)
    graph = (
        Graph("retry", state=Fan)
        .with_node("a", flaky, blocking=True, retry=retry, config={"dir": str(tmp_path)})
        .with_node("b", fan_start, blocking=True)
        .with_edge(START, "a")
        .with_edge(START, "b")
        .with_edge("a", END)
        .with_edge("b", END)
    )
    events = list(graph.compile(executor=process_pool).stream({}))
    finished = {e.node: e for e in events if e.kind == "node_finished"}
    assert finished["a"].attempts == 2
    assert isinstance(events[-1], RunFinished)
    assert events[-1].state["log"] == ["recovered", "start"]


def fails_until_marked(state: Fan, ctx: RunContext) -> dict[str, Any]:
    LOCAL_CALLS.append(ctx.node)
    marker = Path(ctx.config["dir"]) / "fixed"
    if ctx.config.get("fragile") and not marker.exists():
        raise ConnectionError("down")
    return {"log": [ctx.node], "draws": {ctx.node: f"{ctx.random():.8f}"}}


def fragile_fan(folder: Path) -> Graph[Fan]:
    names = [f"b{i:02d}" for i in range(6)]
    graph = Graph("fragile", state=Fan).with_node("start", fan_start).with_node("join", fan_join)
    for i, name in enumerate(names):
        config = {"dir": str(folder), "fragile": i == 3}
        graph = graph.with_node(name, fails_until_marked, blocking=True, config=config)
        graph = graph.with_edge("start", name)
    return graph.with_edge(START, "start").with_edge(names, "join").with_edge("join", END)


def test_a_failed_remote_step_resumes_only_the_failed_branch(
    process_pool: concurrent.futures.Executor, tmp_path: Path
) -> None:
    # The orchestrator saved the finished siblings' writes as pending writes; on resume
    # only the failed branch goes to the executor again, and the run equals an unbroken one.
    app = _compile(fragile_fan(tmp_path), process_pool)
    with pytest.raises(NodeError, match="node 'b03' failed at step 2"):
        app.invoke({}, run_id="r")
    (tmp_path / "fixed").write_text("yes")
    LOCAL_CALLS.clear()
    resumed = app.resume("r")
    assert LOCAL_CALLS == []
    unbroken = _compile(fragile_fan(tmp_path), None)
    assert resumed == unbroken.invoke({}, run_id="r")
    assert app.replay("r") == resumed


def nap(state: Fan) -> dict[str, Any]:
    time.sleep(0.6)
    return {}


def test_timeouts_apply_to_remote_tasks(process_pool: concurrent.futures.Executor) -> None:
    graph = (
        Graph("slow", state=Fan)
        .with_node("a", nap, blocking=True, timeout_s=0.1)
        .with_node("b", fan_start, blocking=True)
        .with_edge(START, "a")
        .with_edge(START, "b")
        .with_edge("a", END)
        .with_edge("b", END)
    )
    with pytest.raises(NodeTimeoutError, match=r"node 'a' exceeded its timeout of 0\.1s at step 1"):
        graph.compile(executor=process_pool).invoke({})


# --------------------------------------------------------------------------- Ray on loopback


def _listening(pids: set[int]) -> list[str]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/net/{table}") as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    raw = bytes.fromhex(fields[1].split(":")[0])
                    # /proc prints each 32-bit word little-endian.
                    fixed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                    found.append(socket.inet_ntop(family, fixed))
    return found


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@pytest.mark.ray
def test_ray_listens_on_loopback_only(ray_executor: RayExecutor) -> None:
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    addresses = _listening(_descendants(os.getpid()))
    assert addresses  # the GCS, the raylet and the workers listen
    assert set(addresses) <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, addresses
