"""A node that asks ``ctx.services`` for a name its graph was not given gets a typed error
naming the node, the service and how to give it, on a plain run as on a worker."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.errors import MissingServiceError, NodeError
from stargraph.graph import END, START, Graph


class S(BaseModel):
    total: float = 0.0


def price(state: S, ctx: Any) -> dict[str, Any]:
    return {"total": ctx.services["prices"]["tea"]}


def own_key_error(state: S, ctx: Any) -> dict[str, Any]:
    return {"total": {"tea": 1.0}["coffee"]}


def tolerant(state: S, ctx: Any) -> dict[str, Any]:
    try:
        found = ctx.services["prices"]
    except KeyError:  # what code written against a plain mapping catches
        found = {"tea": 0.5}
    return {"total": found["tea"]}


def _graph(fn: Any) -> Graph[S]:
    return Graph("svc", state=S).with_node("n", fn).with_edge(START, "n").with_edge("n", END)


def test_issue44_a_missing_service_names_the_node_the_service_and_the_fix() -> None:
    with pytest.raises(MissingServiceError) as info:
        _graph(price).compile().invoke({})
    err = info.value
    assert (err.service, err.node, err.step) == ("prices", "n", 1)
    assert "services['prices']" in str(err)
    assert "compile it with services=" in str(err)
    assert "node 'n'" in str(err)


def test_issue44_a_given_service_and_a_nodes_own_key_error_are_unchanged() -> None:
    app = _graph(price).compile(services={"prices": {"tea": 2.5}})
    assert app.invoke({}).total == 2.5
    with pytest.raises(NodeError) as info:
        _graph(own_key_error).compile().invoke({})
    assert not isinstance(info.value, MissingServiceError)
    assert isinstance(info.value.__cause__, KeyError)


def test_issue44_code_catching_key_error_around_services_still_works() -> None:
    assert _graph(tolerant).compile().invoke({}).total == 0.5
