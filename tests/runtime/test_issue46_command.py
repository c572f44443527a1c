"""``Command(update=, goto=)`` from nodes, ``destinations=``, implicit END, the step budget a
node sees (``ctx.remaining_steps``) and the default ``retry_on``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Command, Graph, RetryPolicy, RunContext, RunError, Send, reducers
from stargraph.checkpoint import MemoryStore, Recording, SqliteStore
from stargraph.errors import CompileError, InvalidWriteError, NodeError
from stargraph.examples.basics import CounterState, bump
from stargraph.viz import to_mermaid


class S(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    n: int = 0


def go_c(state: S) -> Command:
    return Command(update={"log": ["a"], "n": 1}, goto="c")


def note_b(state: S) -> dict[str, Any]:
    return {"log": ["b"]}


def note_c(state: S) -> dict[str, Any]:
    return {"log": [f"c{state.n}"]}


def _commanding(fn: Any = go_c, destinations: tuple[str, ...] = ("c",)) -> Graph[S]:
    return (
        Graph("commanding", state=S)
        .with_node("a", fn, destinations=destinations)
        .with_node("b", note_b)
        .with_node("c", note_c)
        .with_edge(START, "a")
        .with_edge("a", "b")
    )


def test_issue46_command_goto_adds_to_the_edges() -> None:
    # LangGraph's semantics: goto schedules c on top of the static edge to b, in one step.
    app = _commanding().compile()
    updates = list(app.stream({}, mode="updates"))
    assert updates == [
        {"a": {"log": ["a"], "n": 1}},
        {"b": {"log": ["b"]}},
        {"c": {"log": ["c1"]}},
    ]
    assert app.invoke({}).log == ["a", "b", "c1"]


def fan_out(state: S) -> Command:
    return Command(goto=[Send("c", {"n": 5}), Send("c", {"n": 6}), END])


def test_issue46_command_goto_sends_fan_out_and_end_is_allowed() -> None:
    app = _commanding(fan_out).compile()
    assert app.invoke({}).log == ["b", "c5", "c6"]


def goto_b(state: S) -> Command:
    return Command(goto="b")


def test_issue46_goto_to_an_undeclared_destination_is_a_typed_run_error() -> None:
    with pytest.raises(RunError) as info:
        _commanding(goto_b).compile().invoke({}, run_id="r")
    message = str(info.value)
    assert "node 'a' at step 1 of run 'r'" in message
    assert "goto='b', which is not one of its declared destinations ['c']" in message
    assert "destinations=['c', 'b']" in message
    assert info.value.node == "a"


def bad_update(state: S) -> Command:
    return Command(update={"nope": 1}, goto="c")


def parent_command(state: S) -> Command:
    return Command(graph=Command.PARENT, goto="c")


def test_issue46_command_update_is_checked_like_any_write() -> None:
    with pytest.raises(InvalidWriteError, match="wrote key 'nope'"):
        _commanding(bad_update).compile().invoke({})
    with pytest.raises(RunError, match="graph="):
        _commanding(parent_command).compile().invoke({})


def test_issue46_destinations_are_in_the_ir_hash_validation_and_drawing() -> None:
    graph = _commanding()
    ir = graph.to_ir()
    assert ir.node("a").destinations == ("c",)
    # c is reached through a's destination only: not "unreachable".
    graph.compile()
    assert graph.graph_hash != _commanding(destinations=("b", "c")).graph_hash
    assert 'a -.->|"command"| c' in to_mermaid(ir)
    unknown = _commanding(destinations=("c", "zz"))
    with pytest.raises(CompileError) as info:
        unknown.compile()
    assert "/nodes/0/destinations/1: edge points at unknown node 'zz'" in str(info.value)
    undeclared = _commanding(destinations=())
    with pytest.raises(CompileError, match="node 'c' is unreachable from START"):
        undeclared.compile()


def test_issue46_a_node_without_outgoing_edges_ends_the_run() -> None:
    graph = (
        Graph("open", state=S)
        .with_node("a", note_b)
        .with_node("b", note_c)
        .with_edge(START, "a")
        .with_edge("a", "b")
    )
    assert graph.compile().invoke({}).log == ["b", "c0"]
    # Drawn as the edge to END it implies.
    assert "    b --> __end__\n" in to_mermaid(graph.to_ir())
    # The IR gains no edge: the graph hashes as it did with the END edge left out.
    assert [(e.kind, getattr(e, "target", None)) for e in graph.to_ir().edges] == [("static", "b")]


def fails_once(state: S, ctx: RunContext) -> dict[str, Any]:
    marker = Path(ctx.config["dir"]) / "failed"
    if not marker.exists():
        marker.write_text("once")
        raise ConnectionError("the first attempt fails")
    return {"log": ["slow"]}


def counted_go_c(state: S, ctx: RunContext) -> Command:
    with (Path(ctx.config["dir"]) / "runs").open("a") as f:
        f.write("a")
    return Command(update={"log": ["a"]}, goto="c")


def test_issue46_goto_of_a_finished_sibling_survives_a_failed_step(tmp_path: Path) -> None:
    # a finishes (its writes, with where it goes, saved as pending) while its sibling fails:
    # the resumed step does not run a again, and still goes where a's Command said.
    store = SqliteStore(tmp_path / "runs.db")
    config = {"dir": str(tmp_path)}
    graph = (
        Graph("resumed", state=S)
        .with_node("a", counted_go_c, config=config, destinations=["c"])
        .with_node("slow", fails_once, config=config)
        .with_node("c", note_c)
        .with_edge(START, "a")
        .with_edge(START, "slow")
    )
    app = graph.compile(store=store)
    with pytest.raises(NodeError):
        app.invoke({}, run_id="r1")
    assert app.resume("r1").log == ["a", "slow", "c0"]
    assert (tmp_path / "runs").read_text() == "a"
    replayed = app.replay(Recording.from_store(store, "r1"))
    assert replayed.log == ["a", "slow", "c0"]


def test_issue46_a_stubbed_command_node_replays_its_goto() -> None:
    store = MemoryStore()
    graph = (
        Graph("stubbed", state=S)
        .with_node("a", go_c, destinations=["c"], must_stub=True)
        .with_node("c", note_c)
        .with_edge(START, "a")
    )
    app = graph.compile(store=store)
    assert app.invoke({}, run_id="r").log == ["a", "c1"]
    assert app.replay(Recording.from_store(store, "r")).log == ["a", "c1"]


def budget(state: S, ctx: RunContext) -> dict[str, Any]:
    return {"log": [str(ctx.remaining_steps)]}


def test_issue46_remaining_steps_counts_down_as_langgraph_does() -> None:
    # LangGraph with recursion_limit=5 shows RemainingSteps 4 then 3 to a two-node chain.
    graph = (
        Graph("budget", state=S)
        .with_node("a", budget)
        .with_node("b", budget)
        .with_edge(START, "a")
        .with_edge("a", "b")
    )
    assert graph.compile(max_steps=5).invoke({}).log == ["4", "3"]
    assert graph.compile().invoke({}, max_steps=2).log == ["1", "0"]


_TRIES: list[str] = []


def raises_given(state: S, ctx: RunContext) -> dict[str, Any]:
    _TRIES.append(ctx.config["error"])
    errors: dict[str, Exception] = {
        "key": KeyError("x"),
        "value": ValueError("x"),
        "connection": ConnectionError("x"),
        "timeout": TimeoutError("x"),
        "plain": Exception("x"),
    }
    raise errors[ctx.config["error"]]


@pytest.mark.parametrize(
    ("error", "tries"),
    [("key", 1), ("value", 1), ("connection", 3), ("timeout", 3), ("plain", 3)],
)
def test_issue46_retry_by_default_skips_programming_errors(error: str, tries: int) -> None:
    _TRIES.clear()
    policy = RetryPolicy(initial_interval_s=0, jitter=False)
    graph = (
        Graph("retrying", state=S)
        .with_node("f", raises_given, retry=policy, config={"error": error})
        .with_edge(START, "f")
    )
    with pytest.raises(NodeError):
        graph.compile().invoke({})
    assert len(_TRIES) == tries


def test_issue46_an_explicit_retry_on_keeps_its_meaning_and_its_hash() -> None:
    def retrying(policy: RetryPolicy) -> Graph[CounterState]:
        return (
            Graph("retrying", state=CounterState)
            .with_node("bump", bump, retry=policy)
            .with_edge(START, "bump")
            .with_edge("bump", END)
        )

    # The hashes stargraph gave these graphs before the default changed.
    everything = retrying(RetryPolicy(retry_on=[Exception]))
    assert everything.graph_hash == (
        "sha256:fbf6fb4047c92e67a4912950640981ab701432cfeed755567e462e9795564eef"
    )
    chosen = retrying(RetryPolicy(max_attempts=4, retry_on=[ConnectionError]))
    assert chosen.graph_hash == (
        "sha256:42ca2dc0bd889ef03332e822854feb57b48c5c2c6278c4ebbd0ced7dd3f1b4bf"
    )
    # The new default means something else, so it hashes apart from "every Exception".
    assert retrying(RetryPolicy()).graph_hash != everything.graph_hash
    assert RetryPolicy().retry_on == RetryPolicy.DEFAULT_RETRY_ON


# ----------------------------------------------------------------------------- to the parent


class Review(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    verdict: str = ""


def check(state: Review) -> dict[str, Any]:
    return {"log": ["check"]}


def escalate(state: Review) -> Command:
    return Command(graph=Command.PARENT, update={"verdict": "escalate"}, goto="human")


def overreach(state: Review) -> Command:
    return Command(graph=Command.PARENT, update={"n": 3}, goto="human")


def never(state: Review) -> dict[str, Any]:
    return {"log": ["never"]}


class Desk(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    verdict: str = ""
    n: int = 0


def human(state: Desk) -> dict[str, Any]:
    return {"log": [f"human sees {state.verdict}"]}


def after(state: Desk) -> dict[str, Any]:
    return {"log": ["after"]}


def _desk(decide: Any = escalate, destinations: tuple[str, ...] = ("human",)) -> Graph[Desk]:
    from stargraph.nodes import SubgraphNode
    from stargraph.skills import Skill

    inner = (
        Graph("review", state=Review)
        .with_node("check", check)
        .with_node("decide", decide)
        .with_node("never", never)
        .with_edge(START, "check")
        .with_edge("check", "decide")
        .with_edge("decide", "never")
        .to_ir()
    )
    skill = Skill(
        name="review",
        version="1.0.0",
        kind="utility",
        description="reviews",
        state_schema=Review,
        subgraph=inner,
    )
    return (
        Graph("desk", state=Desk)
        .with_node(SubgraphNode.from_skill(skill, site="review", destinations=destinations))
        .with_node("human", human)
        .with_node("after", after)
        .with_edge(START, "review")
        .with_edge("review", "after")
    )


def test_issue46_command_to_the_parent_ends_the_child_and_routes_the_parent() -> None:
    store = MemoryStore()
    graph = _desk()
    app = graph.compile(store=store)
    final = app.invoke({}, run_id="r")
    # 'never' does not run: the child ended at the Command; the parent wrote its update
    # and went to 'human' on top of its edge to 'after'.
    assert final.log == ["check", "after", "human sees escalate"]
    assert final.verdict == "escalate"
    assert app.replay(Recording.from_store(store, "r"), stub="all") == final
    assert graph.compile().invoke({}) == final
    assert 'review__end -.->|"command"| human' in to_mermaid(graph.to_ir())
    assert graph.graph_hash != _desk(destinations=("after", "human")).graph_hash


def test_issue46_command_to_the_parent_is_held_to_the_skill_outputs_and_destinations() -> None:
    with pytest.raises(InvalidWriteError) as info:
        _desk(overreach).compile().invoke({})
    assert "updating ['n'], which the skill's outputs do not go to" in str(info.value)
    with pytest.raises(CompileError, match="node 'human' is unreachable from START"):
        _desk(destinations=()).compile()
    no_way = _desk(destinations=("after",)).with_edge("after", "human")
    with pytest.raises(RunError, match="goto='human', which is not one of its declared"):
        no_way.compile().invoke({})


def send_to_c(state: S) -> Command:
    return Command(update={"log": ["a"]}, goto=[Send("c", {"n": 7})])


def test_issue46_a_command_comes_back_from_another_process() -> None:
    import concurrent.futures
    import multiprocessing

    graph = (
        Graph("remote", state=S)
        .with_node("a", send_to_c, blocking=True, destinations=["c"])
        .with_node("b", note_b, blocking=True)
        .with_node("c", note_c)
        .with_edge(START, "a")
        .with_edge(START, "b")
    )
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=context) as pool:
        assert graph.compile(executor=pool).invoke({}).log == ["a", "b", "c7"]
