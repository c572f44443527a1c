"""``Send`` with a private payload (issue 18, item 8): a node may declare an input model.

``with_node("work", fn, input=WorkItem)``: ``fn`` receives a validated ``WorkItem`` - from
its task's ``Send`` payload, which may hold keys outside the state - and the model's import
path is part of the graph hash.
"""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from stargraph import reducers
from stargraph.checkpoint import MemoryStore, SqliteStore
from stargraph.errors import (
    CompileError,
    InvalidPayloadError,
    NodeError,
    UnreferenceableNodeError,
)
from stargraph.graph import END, START, Graph, Send
from stargraph.ir import GraphIR
from stargraph.runtime import RunContext


class Crawl(BaseModel):
    """The state: urls to crawl, what came back."""

    urls: list[str] = ["a.example", "b.example", "c.example"]
    depth: int = 1
    pages: Annotated[list[str], reducers.append] = []


class WorkItem(BaseModel):
    """One task's private input: ``url`` and ``retries`` are not state fields."""

    url: str
    retries: int = Field(default=0, ge=0)
    depth: int = 1


class OtherItem(BaseModel):
    """Another input model, for the hash."""

    url: str


SEEN: list[Any] = []
FAIL_ONCE: set[str] = set()
CALLS: list[str] = []
LOCK = threading.Lock()


def plan(state: Crawl) -> dict[str, Any]:
    return {}


def fan_out(state: Crawl) -> list[Send]:
    return [
        Send("work", {"url": url, "retries": i, "depth": state.depth})
        for i, url in enumerate(state.urls)
    ]


def work(item: WorkItem) -> dict[str, Any]:
    with LOCK:
        SEEN.append(item)
        CALLS.append(item.url)
        if item.url in FAIL_ONCE:
            FAIL_ONCE.discard(item.url)
            raise ConnectionError(f"{item.url} timed out")
    return {"pages": [f"{item.url}#{item.retries}@{item.depth}"]}


def work_ctx(item: WorkItem, ctx: RunContext) -> dict[str, Any]:
    return {"pages": [f"{item.url} at step {ctx.step} index {ctx.index}"]}


def crawl(fn: Any = work, *, model: type[BaseModel] = WorkItem, **node: Any) -> Graph[Crawl]:
    return (
        Graph("crawl", state=Crawl)
        .with_node("plan", plan)
        .with_node("work", fn, input=model, **node)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", fan_out, ["work"])
        .with_edge("work", END)
    )


@pytest.fixture(autouse=True)
def _clean() -> None:
    SEEN.clear()
    CALLS.clear()
    FAIL_ONCE.clear()


def test_a_payload_with_keys_outside_the_state_reaches_the_node() -> None:
    final = crawl().compile().invoke({"depth": 3})
    assert final.pages == ["a.example#0@3", "b.example#1@3", "c.example#2@3"]
    assert all(type(item) is WorkItem for item in SEEN)
    assert sorted(item.url for item in SEEN) == ["a.example", "b.example", "c.example"]
    # With a ctx as second argument, as for any node.
    final = crawl(work_ctx).compile().invoke({"urls": ["x", "y"]})
    assert final.pages == ["x at step 2 index 1", "y at step 2 index 2"]


def test_an_invalid_payload_is_a_typed_error_naming_node_step_and_field() -> None:
    def bad_fan_out(state: Crawl) -> list[Send]:
        return [Send("work", {"url": "ok"}), Send("work", {"url": "x", "retries": -2})]

    graph = (
        Graph("crawl", state=Crawl)
        .with_node("plan", plan)
        .with_node("work", work, input=WorkItem)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", bad_fan_out, ["work"], ref="tests.bad_fan_out")
        .with_edge("work", END)
    )
    with pytest.raises(InvalidPayloadError) as info:
        graph.compile(store=MemoryStore()).invoke({}, run_id="r")
    err = info.value
    assert (err.node, err.step, err.field, err.run_id) == ("work", 2, "retries", "r")
    assert isinstance(err, ValueError)
    message = str(err)
    assert "node 'work' at step 2 of run 'r'" in message
    assert "retries: Input should be greater than or equal to 0" in message
    assert "WorkItem" in message
    assert "x" not in CALLS, "the node never ran with the invalid input"


def test_a_missing_field_is_named_too() -> None:
    def no_url(state: Crawl) -> list[Send]:
        return [Send("work", {"retries": 1, "extra": "ignored by the model"})]

    graph = (
        Graph("crawl", state=Crawl)
        .with_node("plan", plan)
        .with_node("work", work, input=WorkItem)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", no_url, ["work"], ref="tests.no_url")
        .with_edge("work", END)
    )
    with pytest.raises(InvalidPayloadError, match=r"url: Field required") as info:
        graph.compile().invoke({})
    assert info.value.field == "url"


def test_a_send_step_that_failed_resumes_with_the_checkpointed_payloads(tmp_path: Path) -> None:
    """One task of the fan-out fails: its siblings' writes are kept, and the resumed step
    runs only the failed task, with the payload it was sent."""
    FAIL_ONCE.add("b.example")
    with SqliteStore(tmp_path / "runs.db") as store:
        app = crawl().compile(store=store)
        with pytest.raises(NodeError, match=r"b\.example timed out"):
            app.invoke({"depth": 2}, run_id="r")
        assert app.get_run("r").status == "failed"
        # Sync siblings may stop at the failure or all run (a scheduling choice).
        finished = set(CALLS) - {"b.example"}
        assert "a.example" in finished
        CALLS.clear()
        final = app.resume("r")
        assert "b.example" in CALLS
        assert not finished & set(CALLS), "finished siblings are not run again"
        assert sorted(CALLS) == sorted({"a.example", "b.example", "c.example"} - finished)
        assert final.pages == ["a.example#0@2", "b.example#1@2", "c.example#2@2"]
        assert app.replay("r") == final


def test_a_run_parked_before_a_send_step_resumes_with_its_payloads(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "runs.db") as store:
        app = crawl(interrupt_before=True).compile(store=store)
        app.invoke({"urls": ["p", "q"]}, run_id="r")
        assert app.get_run("r").status == "interrupted"
        payloads = [t.payload for t in app.history("r")[-1].next]
        assert payloads == [
            {"url": "p", "retries": 0, "depth": 1},
            {"url": "q", "retries": 1, "depth": 1},
        ]
        assert CALLS == []
    with SqliteStore(tmp_path / "runs.db") as store:  # another process, say
        app = crawl(interrupt_before=True).compile(store=store)
        final = app.resume("r")
    assert final.pages == ["p#0@1", "q#1@1"]


class Depth(BaseModel):
    """An input model of state fields only: reached by an edge, it reads them."""

    depth: int
    urls: list[str]


def summarize(item: Depth) -> dict[str, Any]:
    return {"pages": [f"{len(item.urls)} urls at depth {item.depth}"]}


def test_a_node_reached_by_an_edge_gets_the_state_fields_its_model_declares() -> None:
    graph = (
        Graph("sum", state=Crawl)
        .with_node("summarize", summarize, input=Depth)
        .with_edge(START, "summarize")
        .with_edge("summarize", END)
    )
    assert graph.compile().invoke({"depth": 4}).pages == ["3 urls at depth 4"]


def test_the_input_model_is_hashed_only_when_declared() -> None:
    with_work = crawl().graph_hash
    assert crawl(model=OtherItem).graph_hash != with_work
    plain = (
        Graph("crawl", state=Crawl)
        .with_node("plan", plan)
        .with_node("work", work)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", fan_out, ["work"])
        .with_edge("work", END)
    )
    assert plain.graph_hash != with_work
    # Without an input model the IR's hash is what it was before the field existed: the
    # field is left out of the hash view, so a document without the key hashes the same.
    doc = plain.to_ir().model_dump(mode="json")
    for node in doc["nodes"]:
        assert node.pop("input") is None
    assert GraphIR.model_validate(doc).graph_hash == plain.graph_hash
    # The model's source is part of the code hash (a changed model warns on resume).
    assert crawl().compile().code_hash != crawl(model=OtherItem).compile().code_hash


def test_an_ir_round_trip_keeps_the_input_model() -> None:
    ir = crawl().to_ir()
    assert ir.node("work").input == f"{__name__}:WorkItem"  # type: ignore[union-attr]
    again = GraphIR.from_json(ir.to_json())
    assert again.graph_hash == ir.graph_hash
    final = Graph(again, state=Crawl).compile().invoke({})
    assert final.pages == ["a.example#0@1", "b.example#1@1", "c.example#2@1"]


def test_input_models_that_cannot_work_are_compile_errors() -> None:
    with pytest.raises(CompileError, match="is not a pydantic model"):
        Graph("g", state=Crawl).with_node("work", work, input=dict)  # type: ignore[arg-type]

    class Local(BaseModel):
        url: str

    with pytest.raises(UnreferenceableNodeError, match="define the input model at module level"):
        Graph("g", state=Crawl).with_node("work", work, input=Local)

    doc = crawl().to_ir().model_dump(mode="json")
    for node in doc["nodes"]:
        if node["id"] == "work":
            node["input"] = f"{__name__}:fan_out"
    with pytest.raises(CompileError, match=r"/nodes/1/input.*is not a pydantic model"):
        Graph(GraphIR.model_validate(doc), state=Crawl).compile()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with pytest.raises(CompileError, match=r"input model and blocking=True.*blocking=False"):
            crawl(blocking=True).compile(executor=pool)
        # Not blocking: it runs in this process, with its model.
        assert len(crawl().compile(executor=pool).invoke({}).pages) == 3
