"""Messages with ids, the ``add_messages`` reducer and ``MessagesState`` (issue 46)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stargraph import END, START, Graph, reducers
from stargraph.checkpoint import MemoryStore
from stargraph.errors import ChatDataError, InvalidWriteError, RunError
from stargraph.llm import ChatMessage, ChatRequest, ToolCall
from stargraph.messages import (
    REMOVE_ALL_MESSAGES,
    Message,
    MessagesState,
    RemoveMessage,
    add_messages,
)
from tests.grid.features import Talk, messages_graph


def _msg(content: str, id: str | None = None, role: Any = "user") -> Message:
    return Message(role=role, content=content, id=id)


def test_issue46_add_messages_appends_replaces_in_place_and_removes_by_id() -> None:
    history = [_msg("a", "1"), _msg("b", "2"), _msg("c", "3")]
    out = add_messages(history, [_msg("B", "2"), _msg("d", "4"), RemoveMessage(id="1")])
    assert [(m.id, m.content) for m in out] == [("2", "B"), ("3", "c"), ("4", "d")]
    # Earlier values are never changed in place (checkpoints of them stay as they were).
    assert [m.content for m in history] == ["a", "b", "c"]


def test_issue46_remove_all_clears_and_keeps_what_follows() -> None:
    history = [_msg("a", "1"), _msg("b", "2")]
    out = add_messages(history, [_msg("x", "9"), RemoveMessage(id=REMOVE_ALL_MESSAGES), "fresh"])
    assert [m.content for m in out] == ["fresh"]
    assert add_messages(history, [RemoveMessage(id=REMOVE_ALL_MESSAGES)]) == []


def test_issue46_removing_an_unknown_id_is_a_typed_error_naming_it() -> None:
    with pytest.raises(InvalidWriteError, match=r"RemoveMessage\(id='nope'\).*'1'"):
        add_messages([_msg("a", "1")], [RemoveMessage(id="nope")])


def test_issue46_ids_are_derived_from_content_and_place() -> None:
    out = add_messages([], ["hi", "hi"])
    again = add_messages([], ["hi", "hi"])
    assert [m.id for m in out] == [m.id for m in again]
    assert out[0].id != out[1].id, "equal messages at two places must not share an id"
    assert all(m.id and m.id.startswith("msg-") for m in out)


def test_issue46_ids_are_the_same_in_another_process() -> None:
    code = (
        "from stargraph.messages import add_messages\n"
        "print([m.id for m in add_messages([], ['hi', {'role': 'assistant', 'content': 'yo'}])])"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": ":".join(sys.path)},
        ).stdout
        for seed in ("1", "2")
    }
    assert runs == {str([m.id for m in add_messages([], ["hi", _assistant("yo")])]) + "\n"}


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


_MESSAGES = st.lists(
    st.builds(
        _msg,
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.sampled_from(["1", "2", "3"])),
        st.sampled_from(["user", "assistant"]),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(current=_MESSAGES, update=_MESSAGES)
def test_issue46_merging_a_merged_list_again_changes_nothing(
    current: list[Message], update: list[Message]
) -> None:
    merged = add_messages(add_messages([], current), update)
    # What a subgraph does when it returns the whole history it was given.
    assert add_messages(merged, merged) == merged
    assert len({m.id for m in merged}) == len(merged)


def test_issue46_message_is_a_chat_message_whose_id_stays_off_the_wire() -> None:
    call = ToolCall(id="c1", name="f", arguments='{"x": 1}')
    plain = ChatMessage.assistant("ok", [call])
    with_id = Message.from_chat(plain, id="m1")
    assert isinstance(with_id, ChatMessage)
    assert with_id.as_chat() == plain
    assert with_id.to_openai() == plain.to_openai()
    assert (
        ChatRequest(messages=(with_id,)).fingerprint()
        == ChatRequest(messages=(plain,)).fingerprint()
    )


def test_issue46_openai_dicts_round_trip() -> None:
    wire = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    message = Message.from_openai(wire)
    assert message.tool_calls == (ToolCall(id="c1", name="f", arguments="{}"),)
    assert message.to_openai() == wire
    parts = Message.from_openai({"role": "user", "content": [{"type": "text", "text": "hi"}]})
    assert parts.content == "hi"


def test_issue46_langchain_messages_round_trip() -> None:
    from langchain_core import messages as lc

    ai = lc.AIMessage(content="", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c1"}], id="a")
    cases = [lc.HumanMessage("hi", id="h"), lc.SystemMessage("be brief", id="s"), ai]
    cases.append(lc.ToolMessage("42", tool_call_id="c1", id="t"))
    for original in cases:
        ours = Message.from_langchain(original)
        assert ours.id == original.id
        back = ours.to_langchain()
        assert type(back) is type(original)
        assert back.content == original.content
        assert back.id == original.id
    assert Message.from_langchain(ai).tool_calls[0].arguments == '{"x":1}'
    assert Message.from_langchain(ai).to_langchain() == ai
    # A write may hold LangChain objects, removal markers included.
    merged = add_messages([], [lc.HumanMessage("a", id="1"), lc.HumanMessage("b", id="2")])
    assert [m.id for m in add_messages(merged, [lc.RemoveMessage(id="1")])] == ["2"]


def test_issue46_langchain_of_no_chat_role_is_refused() -> None:
    from langchain_core import messages as lc

    # LangChain's free-role ChatMessage (type "chat") maps to no role of ours: named, with
    # the types that do convert.
    with pytest.raises(ChatDataError, match=r"type 'chat' has no chat role.*'human'"):
        Message.from_langchain(lc.ChatMessage(content="x", role="critic"))


def test_issue46_messages_do_not_import_langchain() -> None:
    code = (
        "import sys\n"
        "from stargraph.messages import add_messages, MessagesState\n"
        "add_messages([], ['hi'])\n"
        "print('langchain_core' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_issue46_the_reducer_has_a_stable_id_in_the_ir() -> None:
    ir = messages_graph().to_ir()
    field = next(f for f in ir.state.fields if f.name == "messages")
    assert field.reducer == "add_messages"
    assert reducers.BUILTIN_REDUCERS["add_messages"] is add_messages


def test_issue46_input_messages_get_ids_and_markers_apply() -> None:
    state = MessagesState.model_validate({"messages": ["a", {"role": "user", "content": "b"}]})
    assert all(m.id for m in state.messages)
    assert state.messages[0].id == add_messages([], ["a"])[0].id


def test_issue46_a_subgraph_returning_the_whole_history_does_not_duplicate_it() -> None:
    store = MemoryStore()
    app = messages_graph().compile(store=store)
    final = app.invoke({"messages": ["hi", "hi"]}, run_id="talk")
    contents = [(m.role, m.content) for m in final.messages]
    # The first "hi" removed by id, the greeting corrected in place, the child's history
    # merged without a copy of the parent's, then the closing word.
    assert contents == [
        ("user", "hi"),
        ("assistant", "hello"),
        ("assistant", "child saw 3"),
        ("user", "thanks"),
    ]
    assert final.turns == 3
    # The store gives the same messages back, ids included, and replay reproduces them.
    assert store.get_run("talk").status == "done"
    assert app.get_state("talk") == final
    replayed = app.replay("talk", stub="all")
    assert isinstance(replayed, Talk)
    assert replayed == final


def _writes_unknown_removal(state: MessagesState) -> dict[str, Any]:
    return {"messages": [RemoveMessage(id="ghost")]}


def test_issue46_a_node_removing_an_unknown_id_fails_the_run_with_the_id() -> None:
    app = (
        Graph("ghost", state=MessagesState)
        .with_node("drop", _writes_unknown_removal)
        .with_edge(START, "drop")
        .with_edge("drop", END)
        .compile()
    )
    with pytest.raises(RunError, match="ghost"):
        app.invoke({"messages": ["hi"]})


def test_issue46_a_chat_message_written_becomes_a_message_with_an_id() -> None:
    (merged,) = add_messages([], [ChatMessage.tool("c1", "42", name="calc")])
    assert type(merged) is Message
    assert (merged.role, merged.tool_call_id, merged.name, merged.content) == (
        "tool",
        "c1",
        "calc",
        "42",
    )
    assert merged.id is not None


@settings(max_examples=60, deadline=None)
@given(
    messages=_MESSAGES,
    calls=st.lists(st.tuples(st.text(max_size=5), st.text(max_size=20)), max_size=2),
)
def test_issue46_messages_round_trip_through_json(
    messages: list[Message], calls: list[tuple[str, str]]
) -> None:
    tool_calls = [ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)]
    state = MessagesState(messages=[*messages, Message.assistant(None, tool_calls)])
    again = MessagesState.model_validate_json(state.model_dump_json(exclude_defaults=True))
    assert again == state


def test_issue46_role_constructors_make_messages_and_take_an_id() -> None:
    made = [
        Message.system("s", id="1"),
        Message.user("u", id="2"),
        Message.assistant("a", id="3"),
        Message.tool("c1", "t", name="f", id="4"),
    ]
    assert all(type(m) is Message for m in made)
    assert [(m.role, m.id) for m in made] == [
        ("system", "1"),
        ("user", "2"),
        ("assistant", "3"),
        ("tool", "4"),
    ]
