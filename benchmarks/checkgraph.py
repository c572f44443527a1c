"""The graph ``bench_check`` records and checks: a skill subgraph, a ``Send`` fan-out and
model calls through the model service, in two versions.

``build("base")`` plans a document (one model call), drafts its parts in a ``Send`` fan-out
(one call per part, run in parallel), mounts a ``research`` skill (a subgraph: look up, one
call, then condense) and summarizes (one call): 3 + :data:`PARTS` model requests per run, in
four rounds. ``build("prompt")`` is the one-node edit: ``summarize``'s prompt changed.

``benchmarks.checkgraph:current`` is what ``stargraph check --graph`` loads in each worker:
the version ``$CHECKGRAPH_VARIANT`` with a model at ``$OPENAI_BASE_URL``. The module is
always imported as ``benchmarks.checkgraph`` (never run as a script): node references name
the module, and are part of every region's hash.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import BaseModel

from stargraph import reducers
from stargraph.graph import END, START, Graph, Send
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel
from stargraph.nodes import SubgraphNode
from stargraph.runtime import CompiledGraph, RunContext, SeededEntropy
from stargraph.skills import Skill, SkillKind

VARIANTS = ("base", "prompt")
PARTS = 3
"""The ``Send`` fan-out's width: parts drafted in parallel."""


class Part(BaseModel):
    part: str


class Research(BaseModel):
    topic: str = ""
    facts: Annotated[list[str], reducers.append] = []
    digest: str = ""


class ResearchOut(BaseModel):
    digest: str = ""


class Doc(BaseModel):
    topic: str = ""
    parts: list[str] = []
    drafts: Annotated[list[str], reducers.append] = []
    digest: str = ""
    summary: str = ""


def ask(ctx: RunContext, text: str) -> str:
    """One model call through the graph's model service."""
    reply = ctx.services["model"].complete(ChatRequest(messages=(ChatMessage.user(text),)))
    return str(reply.message.content or "")


def plan(state: Doc, ctx: RunContext) -> dict[str, Any]:
    ask(ctx, f"{ctx.config['prompt']} {state.topic}")
    return {"parts": [f"{state.topic}-{i}" for i in range(PARTS)]}


def fan_out(state: Doc) -> list[Send]:
    return [Send("draft", {"part": part}) for part in state.parts]


def draft(job: Part, ctx: RunContext) -> dict[str, Any]:
    return {"drafts": [ask(ctx, f"{ctx.config['prompt']} {job.part}")]}


def lookup(state: Research, ctx: RunContext) -> dict[str, Any]:
    return {"facts": [ask(ctx, f"{ctx.config['prompt']} {state.topic}")]}


def condense(state: Research) -> dict[str, Any]:
    return {"digest": " | ".join(state.facts)}


def summarize(state: Doc, ctx: RunContext) -> dict[str, Any]:
    return {"summary": ask(ctx, f"{ctx.config['prompt']} {state.digest} / {len(state.drafts)}")}


def research_skill() -> Skill:
    """The mounted skill: a two-node subgraph."""
    graph = (
        Graph("research", state=Research)
        .with_node("lookup", lookup, config={"prompt": "Find facts about"})
        .with_node("condense", condense)
        .with_edge(START, "lookup")
        .with_edge("lookup", "condense")
        .with_edge("condense", END)
    )
    return Skill.from_graph(
        graph,
        name="research",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="looks the topic up and condenses what it found",
        state_schema=ResearchOut,
    )


def build(variant: str = "base") -> Graph[Any]:
    """The graph of version ``variant`` (one of :data:`VARIANTS`)."""
    if variant not in VARIANTS:
        raise SystemExit(f"checkgraph: no variant {variant!r}; pick one of {VARIANTS}")
    summary_prompt = "Summarize briefly:" if variant == "prompt" else "Summarize:"
    return (
        Graph("check-bench", state=Doc)
        .with_node("plan", plan, config={"prompt": "Plan a document on"})
        .with_node("draft", draft, input=Part, config={"prompt": "Draft the part"})
        .with_node(SubgraphNode.from_skill(research_skill(), site="research"))
        .with_node("summarize", summarize, config={"prompt": summary_prompt})
        .with_edge(START, "plan")
        .with_conditional_edges("plan", fan_out, ["draft"])
        .with_edge("draft", "research")
        .with_edge("research", "summarize")
        .with_edge("summarize", END)
    )


def compile_version(variant: str, base_url: str, **options: Any) -> CompiledGraph[Any]:
    """``build(variant)`` compiled with a model at ``base_url`` and seeded entropy."""
    model = OpenAIChatModel("scripted-model", base_url=base_url, api_key="sk-bench")
    return compile_with(variant, model, **options)


def compile_with(variant: str, model: Any, **options: Any) -> CompiledGraph[Any]:
    """``build(variant)`` compiled with ``model`` as its model service and seeded entropy."""
    return build(variant).compile(
        services={"model": model}, entropy=lambda: SeededEntropy(0), **options
    )


def echo(request: ChatRequest) -> str:
    """An in-memory model's answer: the prompt, echoed (what the scripted server of
    ``bench_check`` answers too)."""
    return "re: " + str(request.messages[-1].content)


def current() -> CompiledGraph[Any]:
    """The version ``$CHECKGRAPH_VARIANT`` with a model at ``$OPENAI_BASE_URL``."""
    return compile_version(
        os.environ.get("CHECKGRAPH_VARIANT", "base"),
        os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
    )
