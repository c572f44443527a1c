"""Several tasks of one step interrupt: the run waits on all of them, each with a derived id,
and one ``resume(run_id, response={id: answer, ...})`` answers them all; the tasks that
finished are not run again."""

from __future__ import annotations

import asyncio
import operator
import re
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import END, START, Command, Graph, RunContext, interrupt_of
from stargraph.checkpoint import MemoryStore
from stargraph.errors import InvalidInputError, RunNotResumableError
from stargraph.runtime._interrupts import interrupt_id

CALLS: list[str] = []


class Two(BaseModel):
    said: Annotated[list[str], operator.add] = []


def left(state: Two, ctx: RunContext) -> dict[str, Any]:
    return {"said": [f"left:{ctx.interrupt('left?')}"]}


def right(state: Two, ctx: RunContext) -> dict[str, Any]:
    return {"said": [f"right:{ctx.interrupt({'ask': 'right?'})}"]}


def quiet(state: Two) -> dict[str, Any]:
    CALLS.append("quiet")
    return {"said": ["quiet"]}


def _app(store: MemoryStore) -> Any:
    graph = Graph("two_asks", state=Two)
    for name, fn in (("left", left), ("right", right), ("quiet", quiet)):
        graph = graph.with_node(name, fn).with_edge(START, name).with_edge(name, END)
    return graph.compile(store=store)


def test_issue46_every_interrupt_of_a_step_is_pending_with_a_derived_id() -> None:
    store = MemoryStore()
    result = _app(store).invoke({}, run_id="r2")
    waiting = interrupt_of(result)
    assert waiting is not None
    pending = waiting.pending
    assert [(q.node, q.payload) for q in pending] == [
        ("left", "left?"),
        ("right", {"ask": "right?"}),
    ]
    assert [q.id for q in pending] == [
        interrupt_id("r2", 1, "left", 0, 0),
        interrupt_id("r2", 1, "right", 0, 0),
    ]
    stored = store.get_run("r2").interrupt
    assert stored["id"] == pending[0].id
    assert [other["id"] for other in stored["also"]] == [pending[1].id]


def test_issue46_one_resume_answers_every_pending_interrupt() -> None:
    store = MemoryStore()
    app = _app(store)
    CALLS.clear()
    first = interrupt_of(app.invoke({}, run_id="r3"))
    assert first is not None
    answers = {q.id: str(q.node).upper() for q in first.pending}
    done = app.resume("r3", response=answers)
    assert interrupt_of(done) is None
    assert sorted(done.said) == ["left:LEFT", "quiet", "right:RIGHT"]
    assert CALLS == ["quiet"]  # the finished sibling was not run again
    assert store.get_run("r3").status == "done"


def test_issue46_the_stream_marker_lists_every_pending_interrupt() -> None:
    app = _app(MemoryStore())
    chunks = list(app.stream({}, run_id="r4", mode="updates"))
    marker = chunks[-1]["__interrupt__"]
    assert [q.node for q in marker] == ["left", "right"]
    assert all(q.id for q in marker)


@pytest.mark.parametrize(
    ("response", "culprit"),
    [
        ("one answer", "waits on 2 interrupts"),
        ({"nope": 1}, "['nope'] not pending"),
        ("first only", "no answer for"),
    ],
)
def test_issue46_answers_that_do_not_match_the_pending_ids_are_refused(
    response: Any, culprit: str
) -> None:
    store = MemoryStore()
    app = _app(store)
    waiting = interrupt_of(app.invoke({}, run_id="r5"))
    assert waiting is not None
    ids = [q.id for q in waiting.pending]
    if response == "first only":
        response = {ids[0]: "x"}
    with pytest.raises(InvalidInputError, match=re.escape(culprit)) as caught:
        app.resume("r5", response=response)
    assert all(str(i) in str(caught.value) for i in ids)  # names the pending ones
    assert store.get_run("r5").status == "interrupted"  # nothing was answered
    assert sorted(app.resume("r5", response=dict.fromkeys(ids, "y")).said) == [
        "left:y",
        "quiet",
        "right:y",
    ]


def test_issue46_a_resume_without_answers_names_every_pending_id() -> None:
    app = _app(MemoryStore())
    waiting = interrupt_of(app.invoke({}, run_id="r6"))
    assert waiting is not None
    with pytest.raises(RunNotResumableError) as caught:
        app.resume("r6")
    assert all(str(q.id) in str(caught.value) for q in waiting.pending)


class One(BaseModel):
    answer: str = ""


def ask(state: One, ctx: RunContext) -> dict[str, Any]:
    return {"answer": str(ctx.interrupt("name?"))}


def _one(store: MemoryStore) -> Any:
    return (
        Graph("one_ask", state=One)
        .with_node("ask", ask)
        .with_edge(START, "ask")
        .with_edge("ask", END)
        .compile(store=store)
    )


def test_issue46_a_lone_interrupt_takes_a_plain_answer_or_one_keyed_by_its_id() -> None:
    app = _one(MemoryStore())
    waiting = interrupt_of(app.invoke({}, run_id="p"))
    assert waiting is not None
    assert waiting.id is not None
    assert app.resume("p", response={waiting.id: "Ada"}).answer == "Ada"
    app.invoke({}, run_id="q")
    # A mapping keyed otherwise is the answer itself, as before interrupts had ids.
    assert app.resume("q", response={"name": "Ada"}).answer == "{'name': 'Ada'}"


def test_issue46_a_run_stored_without_interrupt_ids_resumes_as_before() -> None:
    store = MemoryStore()
    app = _one(store)
    app.invoke({}, run_id="old")
    stored = dict(store.get_run("old").interrupt)
    del stored["id"]  # what a run interrupted before interrupts had ids holds
    store.set_status("old", "interrupted", interrupt=stored)
    waiting = interrupt_of(app.invoke({}, run_id="other"))
    assert waiting is not None
    assert app.resume("old", response="Ada").answer == "Ada"


def test_issue46_command_resume_as_input_answers_a_thread_s_waiting_turn() -> None:
    app = _one(MemoryStore())
    waiting = interrupt_of(app.invoke({}, thread_id="t"))
    assert waiting is not None
    done = app.invoke(Command(resume="Ada"), thread_id="t")
    assert done.answer == "Ada"
    assert interrupt_of(done) is None
    assert [r.status for r in app.get_thread("t")] == ["done"]


def test_issue46_command_resume_as_input_answers_several_interrupts_of_a_run() -> None:
    app = _app(MemoryStore())
    waiting = interrupt_of(app.invoke({}, run_id="c1"))
    assert waiting is not None
    answers = {q.id: "ok" for q in waiting.pending}
    assert sorted(app.invoke(Command(resume=answers), run_id="c1").said) == [
        "left:ok",
        "quiet",
        "right:ok",
    ]


def test_issue46_command_resume_as_input_streams_the_resumed_run() -> None:
    app = _one(MemoryStore())
    app.invoke({}, run_id="s1")
    values = list(app.stream(Command(resume="Bo"), run_id="s1", mode="values"))
    assert values[-1].answer == "Bo"


def test_issue46_command_resume_as_input_of_ainvoke_and_astream() -> None:
    app = _one(MemoryStore())
    app.invoke({}, run_id="a1")
    app.invoke({}, run_id="a2")

    async def both() -> tuple[Any, list[Any]]:
        first = await app.ainvoke(Command(resume="Cy"), run_id="a1")
        items = [v async for v in app.astream(Command(resume="Di"), run_id="a2", mode="values")]
        return first, items

    first, items = asyncio.run(both())
    assert first.answer == "Cy"
    assert items[-1].answer == "Di"
    assert app.get_run("a2").status == "done"


@pytest.mark.parametrize(
    ("command", "where", "culprit"),
    [
        (Command(resume="x", update={"answer": "y"}), {"run_id": "b1"}, "only resumes"),
        (Command(resume="x"), {}, "pass run_id="),
        (Command(update={"answer": "y"}), {"run_id": "b1"}, "only resumes"),
    ],
)
def test_issue46_a_command_input_that_resumes_nothing_is_refused(
    command: Command, where: dict[str, Any], culprit: str
) -> None:
    store = MemoryStore()
    app = _one(store)
    app.invoke({}, run_id="b1")
    with pytest.raises(InvalidInputError, match=re.escape(culprit)):
        app.invoke(command, **where)
    assert store.get_run("b1").status == "interrupted"
