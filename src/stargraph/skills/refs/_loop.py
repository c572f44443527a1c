"""What the passage-citing reference skills (``rag``, ``wiki``) share: their settings, the
model call that is re-asked with feedback, and the write -> validate -> retry/give-up loop.

The node functions stay in each skill's module (the IR names them by import path, so moving
them would change the graphs' hashes); they call these helpers for the logic they share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeVar

from pydantic import BaseModel

from stargraph.graph import END, Graph
from stargraph.llm import ChatMessage, RequestOptions
from stargraph.runtime import RunContext
from stargraph.skills import CHECK, Skill, SkillKind
from stargraph.skills._services import options_config
from stargraph.skills.refs.retrieval import ask_model, retrieve
from stargraph.skills.refs.stores import Passage, StoreError

__all__ = [
    "PASSAGE_SERVICES",
    "Verdict",
    "ask_with_feedback",
    "check_numbers",
    "llm_settings",
    "reference_skill",
    "retrieval_config",
    "retrieve_query",
    "retry_verdict",
    "with_retry_loop",
]

Verdict = Literal["accept", "retry", "give_up"]
"""A validation's decision: take the draft, ask for another, or end without one."""

PASSAGE_SERVICES: Final = ("service:docs", "service:embedder", "service:model", "service:vectors")
"""The services a skill that retrieves passages and asks a model about them needs."""

_S = TypeVar("_S", bound=BaseModel)


def check_numbers(graph: str, numbers: Mapping[str, int], example: str) -> None:
    """Every number an int >= 1 and ``candidates >= k``, else a StoreError naming them all."""
    bad = any(not isinstance(v, int) or v < 1 for v in numbers.values())
    if bad or numbers["candidates"] < numbers["k"]:
        raise StoreError(
            f"{graph} needs ints >= 1 and candidates >= k, got {dict(numbers)}; e.g. {example}"
        )


def retrieval_config(k: int, candidates: int, rrf_k: int, embedder: str | None) -> dict[str, Any]:
    """A retrieving node's config (hashed): the numbers, and the embedder name if pinned."""
    config: dict[str, Any] = {"k": k, "candidates": candidates, "rrf_k": rrf_k}
    if embedder is not None:
        config["embedder"] = embedder
    return config


def llm_settings(
    model: str | None,
    temperature: float | None,
    request: RequestOptions | None = None,
    *,
    who: str = "model request options",
) -> dict[str, Any]:
    """The model settings of a node's config: only those given, so defaults stay unhashed
    (``request``: the :class:`~stargraph.llm.RequestOptions` fields that differ from theirs).
    Bad options raise :class:`~stargraph.errors.SkillValidationError` about ``who``."""
    config: dict[str, Any] = {}
    if model is not None:
        config["model"] = model
    config.update(options_config(temperature, request, subject=who))
    return config


def retrieve_query(ctx: RunContext, query: str) -> list[Passage]:
    """:func:`~stargraph.skills.refs.retrieval.retrieve` for ``query`` with the node's config;
    no passages (and no store call) for a blank query."""
    query = query.strip()
    return retrieve(ctx, query, ctx.config) if query else []


def ask_with_feedback(
    ctx: RunContext,
    default_prompt: str,
    text: str,
    *,
    previous: str | None = None,
    feedback: str | None = None,
) -> str:
    """Ask the model ``text`` under the node's ``system_prompt`` (``default_prompt`` unless
    configured); on a retry (``feedback`` about its ``previous`` reply) the model also sees
    that reply and what was wrong with it."""
    config = ctx.config
    messages = [
        ChatMessage.system(str(config.get("system_prompt", default_prompt))),
        ChatMessage.user(text),
    ]
    if feedback and previous is not None:
        messages += [ChatMessage.assistant(previous), ChatMessage.user(feedback)]
    return ask_model(ctx, messages, config)


def retry_verdict(attempts: int, config: Mapping[str, Any]) -> Verdict:
    """After a rejected draft: ``retry`` while fewer than ``config["budget"]`` (default 2)
    drafts were asked, else ``give_up``."""
    return "retry" if attempts < int(config.get("budget", 2)) else "give_up"


def with_retry_loop(
    graph: Graph[_S],
    writer: str,
    *,
    validate: Callable[..., Any],
    after_validate: Callable[..., Any],
    give_up: Callable[..., Any],
    budget: int,
    validate_writes: tuple[str, ...],
    give_up_writes: tuple[str, ...],
) -> Graph[_S]:
    """``graph`` with the loop after its ``writer`` node: ``writer -> validate``, which
    accepts (``END``), sends the draft back to ``writer`` or ends at ``give_up``."""
    return (
        graph.with_node(
            "validate",
            validate,
            config={"budget": budget},
            writes=validate_writes,
            metadata={CHECK: True},  # judges the draft by code: routing on it is no LLM's
        )
        .with_node("give_up", give_up, writes=give_up_writes)
        .with_edge(writer, "validate")
        .with_conditional_edges(
            "validate", after_validate, {"accept": END, "retry": writer, "give_up": "give_up"}
        )
        .with_edge("give_up", END)
    )


def reference_skill(
    graph: Graph[Any],
    *,
    name: str,
    kind: SkillKind,
    description: str,
    system_prompt: str,
    outputs: type[BaseModel],
    requires: tuple[str, ...] = PASSAGE_SERVICES,
    tools: tuple[str, ...] = (),
) -> Skill:
    """``graph`` packaged as reference skill ``name`` (version 1.0.0) declaring ``outputs``'
    fields as its outputs."""
    return Skill.from_graph(
        graph,
        name=name,
        version="1.0.0",
        kind=kind,
        description=description,
        tools=tools,
        system_prompt=system_prompt,
        state_schema=outputs,
        requires=requires,
    )
