"""Graph input/output models and private channels."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from stargraph import Graph
from stargraph.checkpoint import MemoryStore
from stargraph.errors import CompileError, InvalidInputError
from stargraph.ir import GraphIR
from tests.runtime.boundarynodes import Answer, Desk, Question, desk_graph


def test_issue46_output_model_filters_what_invoke_returns() -> None:
    result: Any = desk_graph(input=Question, output=Answer).compile().invoke({"question": "q"})
    assert isinstance(result, Answer)
    assert result.model_dump() == {"answer": "DRAFT OF Q"}


def test_issue46_input_model_refuses_keys_it_does_not_declare() -> None:
    app = desk_graph(input=Question).compile()
    with pytest.raises(InvalidInputError, match=r"keys \['answer'\] that the graph's input model"):
        app.invoke({"question": "q", "answer": "forged"})
    with pytest.raises(InvalidInputError, match="does not fit the graph's input model Question"):
        app.invoke({})


def test_issue46_private_channel_is_seen_only_by_nodes_that_declare_it() -> None:
    state: Any = desk_graph().compile().invoke({"question": "q"})
    assert isinstance(state, Desk)
    assert state.seen == "''"  # peek declares nothing private: it saw the default
    assert state.answer == "DRAFT OF Q"  # write declares the draft in its input model
    assert state.draft == ""  # and the output never holds it


def test_issue46_private_channel_is_kept_in_the_checkpoint_and_refused_as_input() -> None:
    app = desk_graph().compile(store=MemoryStore())
    app.invoke({"question": "q"}, run_id="r")
    assert app.get_state("r").draft == "draft of q"
    with pytest.raises(InvalidInputError, match=r"sets \['draft'\], private channels"):
        app.invoke({"question": "q", "draft": "forged"})


def test_issue46_input_and_output_models_are_in_the_ir_and_the_hash() -> None:
    plain = desk_graph().graph_hash
    both = desk_graph(input=Question, output=Answer)
    assert len({plain, desk_graph(input=Question).graph_hash, both.graph_hash}) == 3
    ir = GraphIR.from_json(both.to_ir().to_json())
    assert (ir.input_model, ir.output_model) == (
        "tests.runtime.boundarynodes:Question",
        "tests.runtime.boundarynodes:Answer",
    )
    again: Any = Graph(ir).compile().invoke({"question": "z"})
    assert again == Answer(answer="DRAFT OF Z")
    assert [f.name for f in ir.state.fields if f.private] == ["draft"]


class Stranger(BaseModel):
    """Names a field the state lacks and the private draft."""

    draft: str
    mood: str


def test_issue46_boundary_models_must_name_public_state_fields() -> None:
    with pytest.raises(CompileError) as info:
        desk_graph(output=Stranger).compile()
    message = str(info.value)
    assert "field 'mood', which is not a channel of the state Desk" in message
    assert "field 'draft', a private channel" in message
