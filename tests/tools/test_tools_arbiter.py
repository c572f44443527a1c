"""The dispatch pipeline (B3, B8, B9, B10, B11; ARCHITECTURE invariant 8)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from stargraph.errors import (
    LockTimeoutError,
    ToolArgumentError,
    ToolError,
    ToolNotAllowedError,
    ToolTimeoutError,
)
from stargraph.llm import ToolCall as LLMToolCall
from stargraph.tools import (
    Arbiter,
    CommitEntry,
    CommitRecord,
    InMemoryCommitLog,
    LockManager,
    LockRequest,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolResult,
    failure_of,
    tool,
)

ArbiterFactory = Callable[..., Arbiter]  # the make_arbiter fixture (conftest.py)


class FindArgs(BaseModel):
    query: str
    limit: int = 5


def forbidden_body() -> Any:
    @tool(id="demo.forbidden@1.0.0", description="Must never run.", locks=("file:{path}:X",))
    def forbidden(path: str, n: int = 0) -> None:
        pytest.fail("the tool body was entered")

    return forbidden


class SpyLocks(LockManager):
    """Counts acquisitions, so a test can prove nothing was locked."""

    def __init__(self) -> None:
        super().__init__()
        self.acquired = 0

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        self.acquired += 1
        return super().acquire(*args, **kwargs)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("call", "error", "status", "message"),
    [
        (
            ToolCall(tool="demo.forbidden", args={"path": "a", "n": "1"}),
            ToolArgumentError,
            "invalid",
            "tool 'demo.forbidden@1.0.0' got invalid arguments: n: Input should be a valid "
            "integer (fix: call the tool again with arguments that match its parameters schema)",
        ),
        (
            ToolCall(tool="demo.forbidden", args={"n": 1, "extra": True}),
            ToolArgumentError,
            "invalid",
            "tool 'demo.forbidden@1.0.0' got invalid arguments: path: Field required; extra: "
            "Extra inputs are not permitted (fix: call the tool again with arguments that match "
            "its parameters schema)",
        ),
        (
            ToolCall(tool="demo.forbiden", args={"path": "a"}),
            ToolArgumentError,
            "invalid",
            "unknown tool 'demo.forbiden': no such tool; did you mean ['demo.forbidden']? "
            "(fix: call one of the tools offered in this step)",
        ),
        (
            ToolCall(tool="demo.forbidden", args={"path": "a"}, node="act", state="draft",
                     allowed=("choir.fs.read", "demo.other.*")),
            ToolNotAllowedError,
            "denied",
            "tool 'demo.forbidden@1.0.0' is not allowed in node 'act' (state 'draft') "
            "(fix: call one of ['choir.fs.read', 'demo.other.*'])",
        ),
        (
            ToolCall(tool="demo.forbidden", args={"path": "../outside.txt"}),
            ToolNotAllowedError,
            "denied",
            "tool 'demo.forbidden@1.0.0' refused path='../outside.txt': it contains '..'; the "
            "workspace root is the only place file tools may touch (fix: pass a relative path "
            "inside the workspace without '..' or symlinks leaving it)",
        ),
    ],
)  # fmt: skip
def test_a_refused_call_never_reaches_the_body_and_locks_nothing(
    make_arbiter: ArbiterFactory, call: ToolCall, error: type[ToolError], status: str, message: str
) -> None:
    spy = SpyLocks()
    arbiter = make_arbiter(forbidden_body(), locks=spy)
    with pytest.raises(error) as info:
        arbiter.dispatch(call)
    assert str(info.value) == message
    assert spy.acquired == 0
    assert spy.snapshot() == {}
    # The refusal is audited (B3: "failure logged").
    (record,) = arbiter.commit_log.records()
    assert record.status == status
    assert record.artifact_ref is None
    # ... and it converts to what the model sees.
    result = ToolResult.from_error(info.value, call_id="c1")
    assert result.status == status
    assert result.error is not None
    assert result.error.message == message


@pytest.mark.parametrize(
    ("verdicts", "default_allow", "allowed"),
    [
        ((None,), True, True),
        ((None,), False, False),
        ((True,), False, True),
        ((True, False), True, False),
        ((False, True), True, False),
        ((), True, True),
    ],
)
def test_policy_hooks_deny_override_and_abstain(
    make_arbiter: ArbiterFactory,
    verdicts: tuple[bool | None, ...],
    default_allow: bool,
    allowed: bool,
) -> None:
    entered: list[int] = []

    @tool(id="demo.guarded@1.0.0", description="Guarded.")
    def guarded(n: int) -> None:
        entered.append(n)

    hooks = [lambda call, v=v: v for v in verdicts]
    arbiter = make_arbiter(guarded, policies=hooks, default_allow=default_allow)
    call = ToolCall(tool="demo.guarded", args={"n": 1})
    if allowed:
        arbiter.dispatch(call)
        assert entered == [1]
    else:
        with pytest.raises(ToolNotAllowedError, match="refused by authorize_action policy"):
            arbiter.dispatch(call)
        assert entered == []
        assert failure_of_last(arbiter) == "denied"


def failure_of_last(arbiter: Any) -> str:
    return str(arbiter.commit_log.records()[-1].status)


def test_a_policy_that_raises_fails_closed(make_arbiter: ArbiterFactory) -> None:
    def broken(call: ToolCall) -> bool:
        raise KeyError("oops")

    arbiter = make_arbiter(forbidden_body(), policies=[broken])
    with pytest.raises(ToolNotAllowedError) as info:
        arbiter.dispatch(ToolCall(tool="demo.forbidden", args={"path": "a"}))
    assert str(info.value) == (
        "tool 'demo.forbidden@1.0.0' refused by authorize_action policy "
        "test_a_policy_that_raises_fails_closed.<locals>.broken: raised KeyError: 'oops'"
    )
    assert failure_of(info.value).code == "policy_denied"


def test_policy_sees_canonical_id_and_normalised_arguments(make_arbiter: ArbiterFactory) -> None:
    seen: list[ToolCall] = []

    @tool(id="demo.args@2.0.0", description="Args.", locks=("file:{path}:S",))
    def args_tool(path: str, limit: int = 7) -> None:
        return None

    arbiter = make_arbiter(args_tool, policies=[seen.append])
    arbiter.dispatch(ToolCall(tool="demo__args__v2_0_0", args={"path": "x"}, lane="edge"))
    assert seen[0].tool == "demo.args@2.0.0"
    assert seen[0].args == {"path": "x", "limit": 7}
    assert seen[0].lane == "edge"


# --------------------------------------------------------------------------- order


def test_pipeline_order_validate_policy_lock_execute_commit_release(
    make_arbiter: ArbiterFactory,
) -> None:
    trace: list[str] = []
    locks = LockManager()

    class TracingLog(InMemoryCommitLog):
        def append(self, entry: CommitEntry) -> CommitRecord:
            trace.append(f"commit(locks held: {bool(locks.snapshot())})")
            return super().append(entry)

    @tool(id="demo.step@1.0.0", description="Step.", locks=("file:{path}:X",))
    def step(path: str) -> str:
        trace.append(f"execute(holds {sorted(locks.snapshot())})")
        return "done"

    def policy(call: ToolCall) -> None:
        trace.append(f"policy(locks held: {bool(locks.snapshot())})")

    arbiter = make_arbiter(step, locks=locks, commit_log=TracingLog(), policies=[policy])
    result = arbiter.dispatch(ToolCall(tool="demo.step", args={"path": "./notes//a.txt"}))
    trace.append(f"returned(locks held: {bool(locks.snapshot())})")
    assert trace == [
        "policy(locks held: False)",
        "execute(holds ['file:notes/a.txt', 'workspace'])",
        "commit(locks held: True)",
        "returned(locks held: False)",
    ]
    assert result.status == "success"
    assert result.summary == "done"


# --------------------------------------------------------------------------- concurrency


def run_concurrently(fn: Callable[[], Any], count: int = 2) -> None:
    errors: list[BaseException] = []

    def wrapped() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrapped) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert not any(thread.is_alive() for thread in threads)


@pytest.mark.parametrize(("mode", "parallel"), [("S", True), ("X", False)])
def test_shared_tools_run_in_parallel_and_exclusive_tools_serialise(
    make_arbiter: ArbiterFactory, mode: str, parallel: bool
) -> None:
    spans: list[tuple[float, float]] = []

    @tool(id="demo.hold@1.0.0", description="Hold.", locks=(f"file:{{path}}:{mode}",))
    def hold(path: str) -> None:
        start = time.monotonic()
        time.sleep(0.3)
        spans.append((start, time.monotonic()))

    arbiter = make_arbiter(hold)
    run_concurrently(lambda: arbiter.dispatch(ToolCall(tool="demo.hold", args={"path": "f.txt"})))
    (_s1, e1), (s2, _e2) = sorted(spans)
    overlap = s2 < e1
    assert overlap is parallel, spans


def test_100_concurrent_pairs_locking_ab_and_ba_through_dispatch_all_finish(
    make_arbiter: ArbiterFactory,
) -> None:
    @tool(id="demo.pair@1.0.0", description="Pair.", locks=("res:{first}:X", "res:{second}:X"))
    def pair(first: str, second: str) -> None:
        time.sleep(0.0005)

    arbiter = make_arbiter(pair, lock_timeout=20)
    calls = iter(
        [{"first": "A", "second": "B"}, {"first": "B", "second": "A"}] * 100  # 100 pairs
    )
    lock = threading.Lock()

    def call() -> None:
        with lock:
            args = next(calls)
        arbiter.dispatch(ToolCall(tool="demo.pair", args=args))

    run_concurrently(call, count=200)
    records = arbiter.commit_log.records()
    assert len(records) == 200
    assert {r.status for r in records} == {"success"}
    assert arbiter.locks.snapshot() == {}


def test_path_aliases_lock_the_same_file(make_arbiter: ArbiterFactory) -> None:
    spans: list[tuple[float, float]] = []

    @tool(id="demo.edit@1.0.0", description="Edit.", locks=("file:{path}:X",))
    def edit(path: str) -> None:
        start = time.monotonic()
        time.sleep(0.2)
        spans.append((start, time.monotonic()))

    arbiter = make_arbiter(edit)
    paths = iter(["a.txt", "./a.txt"])
    lock = threading.Lock()

    def call() -> None:
        with lock:
            path = next(paths)
        arbiter.dispatch(ToolCall(tool="demo.edit", args={"path": path}))

    run_concurrently(call)
    (_, e1), (s2, _) = sorted(spans)
    assert s2 >= e1


@pytest.mark.parametrize("is_async", [False, True])
def test_a_timed_out_call_releases_its_locks(make_arbiter: ArbiterFactory, is_async: bool) -> None:
    if is_async:

        @tool(id="demo.slow@1.0.0", description="Slow.", locks=("workspace:X",), timeout_s=0.2)
        async def slow() -> None:
            await asyncio.sleep(5)

    else:

        @tool(id="demo.slow@1.0.0", description="Slow.", locks=("workspace:X",), timeout_s=0.2)
        def slow(ctx: ToolContext) -> None:
            ctx.cancelled.wait(5)  # a cooperative body stops when the arbiter gives up

    @tool(id="demo.quick@1.0.0", description="Quick.", locks=("file:{path}:X",))
    def quick(path: str) -> str:
        return "ran"

    arbiter = make_arbiter(slow, quick, lock_timeout=10.0)
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError) as info:
        arbiter.dispatch(ToolCall(tool="demo.slow"))
    # The body would wait 5 s; a bound far from both 0.2 s and 5 s holds on a busy machine.
    assert time.monotonic() - started < 3.0
    stopped = (
        "tool 'demo.slow@1.0.0' ran longer than 0.2s; it was stopped and its locks were released"
    )
    if not is_async:
        # A sync body without effects runs inline under the timer: really stopped.
        assert str(info.value) == stopped
        assert arbiter.locks.snapshot() == {}
    # An async body stops on its own event loop's timeout; should its worker be slower than
    # the grace, its locks are released when it has stopped: the next call waits for that.
    assert arbiter.dispatch(ToolCall(tool="demo.quick", args={"path": "a"})).summary == "ran"
    statuses = [r.status for r in arbiter.commit_log.records()]
    assert statuses in (["timeout", "success"], ["timeout", "late_error", "success"])
    assert (str(info.value) == stopped) is (len(statuses) == 2)


def test_a_body_exception_is_committed_released_and_typed(make_arbiter: ArbiterFactory) -> None:
    @tool(id="demo.boom@1.0.0", description="Boom.", locks=("r:X",))
    def boom() -> None:
        raise ZeroDivisionError("division by zero")

    arbiter = make_arbiter(boom)
    with pytest.raises(ToolError) as info:
        arbiter.dispatch(ToolCall(tool="demo.boom", call_id="call_9"))
    assert str(info.value) == "tool 'demo.boom@1.0.0' failed: ZeroDivisionError: division by zero"
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert arbiter.locks.snapshot() == {}
    (record,) = arbiter.commit_log.records()
    assert (record.status, record.call_id) == ("error", "call_9")


def test_lock_timeout_is_typed_audited_and_runs_nothing(make_arbiter: ArbiterFactory) -> None:
    arbiter = make_arbiter(forbidden_body(), lock_timeout=0.05)
    holder = arbiter.locks.acquire([LockRequest("workspace", "X")], owner="other-call")
    with pytest.raises(LockTimeoutError) as info:
        arbiter.dispatch(ToolCall(tool="demo.forbidden", args={"path": "a"}, call_id="c7"))
    assert str(info.value) == (
        "demo.forbidden@1.0.0#c7 could not acquire [file:a:X, workspace:IX] within 0.05s; "
        "held by: other-call (workspace:X) (fix: retry later, raise lock_timeout, or make the "
        "holder finish sooner)"
    )
    assert failure_of(info.value).tool == "demo.forbidden@1.0.0"
    assert arbiter.commit_log.records()[-1].status == "denied"
    arbiter.locks.release(holder)


# --------------------------------------------------------------------------- results


def test_results_are_normalised_and_payloads_content_addressed(
    make_arbiter: ArbiterFactory,
) -> None:
    @tool(id="demo.data@1.0.0", description="Data.")
    def data(size: int) -> ToolOutput | dict[str, Any] | None:
        if size < 0:
            return None
        if size == 0:
            return {"rows": [1, 2]}
        return ToolOutput(summary=f"{size} bytes", payload="x" * size)

    arbiter = make_arbiter(data, inline_limit=100)
    small = arbiter.dispatch(ToolCall(tool="demo.data", args={"size": 0}))
    assert (small.summary, small.payload) == ('{"rows":[1,2]}', {"rows": [1, 2]})
    assert small.artifact_ref is not None
    assert orjson.loads(arbiter.artifacts.get(small.artifact_ref)) == {"rows": [1, 2]}
    large = arbiter.dispatch(ToolCall(tool="demo.data", args={"size": 5000}))
    assert large.payload is None
    assert large.summary == "5000 bytes"
    assert large.artifact_ref is not None
    assert orjson.loads(arbiter.artifacts.get(large.artifact_ref)) == "x" * 5000
    empty = arbiter.dispatch(ToolCall(tool="demo.data", args={"size": -1}))
    assert (empty.summary, empty.artifact_ref) == ("ok", None)
    records = arbiter.commit_log.records()
    assert [r.artifact_ref for r in records] == [small.artifact_ref, large.artifact_ref, None]
    assert arbiter.commit_log.verify_chain() is None


@pytest.mark.parametrize(
    ("exposure", "edge", "core"),
    [("both", True, True), ("edge", True, False), ("core", False, True), ("none", False, False)],
)
def test_exposure_routes_results_to_lanes(
    make_arbiter: ArbiterFactory, exposure: Any, edge: bool, core: bool
) -> None:
    @tool(id="demo.seen@1.0.0", description="Seen.", exposure=exposure)
    def seen() -> dict[str, str]:
        return {"secret_plan": "world domination"}

    arbiter = make_arbiter(seen)
    result = arbiter.dispatch(ToolCall(tool="demo.seen", call_id="call_1"))
    assert (result.visible_to("edge"), result.visible_to("core")) == (edge, core)
    for lane, visible in (("edge", edge), ("core", core)):
        message = result.to_tool_message(lane)
        assert message["role"] == "tool"
        assert message["tool_call_id"] == "call_1"
        assert ("world domination" in message["content"]) is visible
    # Exposure "none" still logs the call (B10).
    assert arbiter.commit_log.records()[0].artifact_ref == result.artifact_ref


def test_prompt_mask_shows_only_status_summary_and_ref(make_arbiter: ArbiterFactory) -> None:
    @tool(id="demo.masked@1.0.0", description="Masked.", prompt_mask=True)
    def masked() -> ToolOutput:
        return ToolOutput(summary="3 documents", payload={"docs": ["long text"] * 3})

    arbiter = make_arbiter(masked)
    result = arbiter.dispatch(ToolCall(tool="demo.masked", call_id="c"))
    assert result.prompt_view() == {
        "status": "success",
        "summary": "3 documents",
        "artifact_ref": result.artifact_ref,
    }
    assert "long text" not in result.to_tool_message("core")["content"]
    assert result.artifact_ref is not None
    assert orjson.loads(arbiter.artifacts.get(result.artifact_ref)) == {"docs": ["long text"] * 3}


def test_external_side_effects_get_an_audit_record(make_arbiter: ArbiterFactory) -> None:
    @tool(id="demo.post@1.0.0", description="Post.", side_effect="external")
    def post(to: str, body: str) -> str:
        return "sent"

    arbiter = make_arbiter(post)
    arbiter.dispatch(ToolCall(tool="demo.post", args={"to": "a@b.c", "body": "hi"}, lane="edge"))
    call, audit = arbiter.commit_log.records()
    assert (call.kind, audit.kind) == ("call", "audit")
    assert audit.args_hash == call.args_hash
    assert audit.artifact_ref is not None
    document = orjson.loads(arbiter.artifacts.get(audit.artifact_ref))
    assert document["args"] == {"to": "a@b.c", "body": "hi"}
    assert document["side_effect"] == "external"
    assert document["lane"] == "edge"
    assert document["result_ref"] == call.artifact_ref


def test_args_model_tools_dispatch(make_arbiter: ArbiterFactory) -> None:
    @tool(id="demo.find@1.0.0", description="Find.", args_model=FindArgs)
    def find(args: FindArgs) -> list[str]:
        return [args.query] * args.limit

    arbiter = make_arbiter(find)
    result = arbiter.dispatch(ToolCall(tool="demo.find", args={"query": "q", "limit": 2}))
    assert result.payload == ["q", "q"]


# --------------------------------------------------------------------------- asyncio


def test_adispatch_runs_async_and_sync_tools(make_arbiter: ArbiterFactory) -> None:
    @tool(id="demo.aecho@1.0.0", description="Async echo.", locks=("file:{path}:S",))
    async def aecho(path: str) -> str:
        await asyncio.sleep(0)
        return f"a:{path}"

    @tool(id="demo.secho@1.0.0", description="Sync echo.")
    def secho(text: str) -> str:
        return f"s:{text}"

    arbiter = make_arbiter(aecho, secho)

    async def main() -> list[str]:
        results = await asyncio.gather(
            arbiter.adispatch(ToolCall(tool="demo.aecho", args={"path": "p"})),
            arbiter.adispatch(ToolCall(tool="demo.secho", args={"text": "t"})),
        )
        return [r.summary for r in results]

    assert asyncio.run(main()) == ["a:p", "s:t"]
    # Sync dispatch of an async tool works too.
    assert arbiter.dispatch(ToolCall(tool="demo.aecho", args={"path": "q"})).summary == "a:q"


def test_adispatch_refuses_like_dispatch(make_arbiter: ArbiterFactory) -> None:
    arbiter = make_arbiter(forbidden_body())
    with pytest.raises(ToolNotAllowedError):
        asyncio.run(arbiter.adispatch(ToolCall(tool="demo.forbidden", args={"path": "/etc/x"})))


# --------------------------------------------------------------------------- model channel


def test_from_openai_accepts_the_wire_shape_and_llm_tool_calls(
    make_arbiter: ArbiterFactory,
) -> None:
    @tool(id="demo.add@1.0.0", description="Add.")
    def add(a: int, b: int) -> int:
        return a + b

    arbiter = make_arbiter(add)
    wire = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "demo__add__v1_0_0", "arguments": '{"a": 1, "b": 2}'},
    }
    call = ToolCall.from_openai(wire, lane="edge", node="act", allowed=["demo.add"])
    assert (call.tool, call.args, call.call_id, call.lane) == (
        "demo__add__v1_0_0",
        {"a": 1, "b": 2},
        "call_1",
        "edge",
    )
    assert arbiter.dispatch(call).summary == "3"
    flat = LLMToolCall(id="call_2", name="demo__add__v1_0_0", arguments='{"a": 2, "b": 2}')
    assert arbiter.dispatch(ToolCall.from_openai(flat)).summary == "4"


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [('{"a": 1', "arguments are not valid JSON"), ("[1, 2]", "arguments must be a JSON object")],
)
def test_from_openai_rejects_malformed_arguments(arguments: str, problem: str) -> None:
    wire = {"id": "c", "function": {"name": "demo__add__v1_0_0", "arguments": arguments}}
    with pytest.raises(ToolArgumentError, match=problem) as info:
        ToolCall.from_openai(wire)
    assert failure_of(info.value).fields[0].field == "<arguments>"


def test_registry_llm_tools_follow_the_allowlist(make_arbiter: ArbiterFactory) -> None:
    arbiter = make_arbiter(forbidden_body())
    assert [t["function"]["name"] for t in arbiter.registry.llm_tools(["demo.*"])] == [
        "demo__forbidden__v1_0_0"
    ]
    assert arbiter.registry.llm_tools(["choir.*"]) == []


def test_B21_a_tool_holding_its_own_mutex_never_runs_twice_at_once(
    make_arbiter: ArbiterFactory,
) -> None:
    # The per-tool mutex is no special mechanism: the lock tool:<name>:X, which the tool
    # declares; calls with different arguments still take turns.
    inside = 0
    most = 0
    held: list[dict[str, Any]] = []
    guard = threading.Lock()
    arbiter: Arbiter

    @tool(id="demo.once@1.0.0", description="Never twice.", locks=("tool:demo.once:X",))
    def once(n: int) -> None:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        held.append(dict(arbiter.locks.snapshot()))
        with guard:
            inside -= 1

    arbiter = make_arbiter(once)
    numbers = iter(range(4))
    with_next = threading.Lock()

    def call() -> None:
        with with_next:
            n = next(numbers)
        result = arbiter.dispatch(ToolCall(tool="demo.once", args={"n": n}))
        assert result.status == "success"

    run_concurrently(call, count=4)
    assert most == 1
    assert len(held) == 4
    assert all(list(snapshot) == ["tool:demo.once"] for snapshot in held), held
    assert all(len(snapshot["tool:demo.once"]) == 1 for snapshot in held), held
    assert all(snapshot["tool:demo.once"][0][1] == "X" for snapshot in held), held
    assert arbiter.locks.snapshot() == {}
