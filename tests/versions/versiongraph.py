"""A graph with a skill subgraph and a ``Send`` fan-out, in versions (issue 48's tests).

``build(variant)`` returns the graph: ``base``; ``unrelated`` (a node added before
everything, writing a channel of its own: every later step moves by one); ``prompt`` (the
``summarize`` node's prompt edited); ``skill`` (the skill's ``lookup`` prompt edited: the
skill's IR changes); ``tail`` (the skill's last node, ``condense``, edited: its digest ends
with a full stop). Every model call goes to the model service (``OpenAIChatModel`` against
the scripted server, whose replies echo the prompt, so a changed prompt changes the reply).

For the CLI, ``versiongraph:current`` is the version named by ``$VERSIONGRAPH_VARIANT``, with
a model at ``$OPENAI_BASE_URL`` (a dead address when unset: a model call then fails). The
module is imported as ``versiongraph`` (its directory on ``sys.path``) in the tests and the
workers alike: node references name the module, and are part of every region's hash.
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
from stargraph.testing import RecordedRequest, Reply

VARIANTS = ("base", "unrelated", "prompt", "skill", "tail")


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


class AuditedDoc(Doc):
    audit: str = ""


def ask(ctx: RunContext, text: str) -> str:
    """One model call through the graph's model service."""
    reply = ctx.services["model"].complete(ChatRequest(messages=(ChatMessage.user(text),)))
    return str(reply.message.content or "")


def echo(request: RecordedRequest) -> Reply:
    """The scripted server's answer: the prompt, echoed."""
    body = request.body or {}
    return Reply.text("re: " + str(body["messages"][-1]["content"]))


def plan(state: Doc, ctx: RunContext) -> dict[str, Any]:
    ask(ctx, f"{ctx.config['prompt']} {state.topic}")
    return {"parts": [f"{state.topic}-{i}" for i in range(3)]}


def fan_out(state: Doc) -> list[Send]:
    return [Send("draft", {"part": part}) for part in state.parts]


def draft(job: Part, ctx: RunContext) -> dict[str, Any]:
    return {"drafts": [ask(ctx, f"{ctx.config['prompt']} {job.part}")]}


def lookup(state: Research, ctx: RunContext) -> dict[str, Any]:
    return {"facts": [ask(ctx, f"{ctx.config['prompt']} {state.topic}")]}


def condense(state: Research, ctx: RunContext) -> dict[str, Any]:
    return {"digest": " | ".join(state.facts) + ctx.config["end"]}


def summarize(state: Doc, ctx: RunContext) -> dict[str, Any]:
    return {"summary": ask(ctx, f"{ctx.config['prompt']} {state.digest} / {len(state.drafts)}")}


def audit(state: AuditedDoc) -> dict[str, Any]:
    return {"audit": f"checked {state.topic}"}


def summary_length(final: dict[str, Any]) -> float:
    """A score of a new final state (``stargraph check --score versiongraph:summary_length``)."""
    return float(len(final["summary"]))


def research_skill(prompt: str, end: str = "") -> Skill:
    graph = (
        Graph("research", state=Research)
        .with_node("lookup", lookup, config={"prompt": prompt})
        .with_node("condense", condense, config={"end": end})
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
    assert variant in VARIANTS, variant
    summary_prompt = "Summarize briefly:" if variant == "prompt" else "Summarize:"
    lookup_prompt = "Find three facts about" if variant == "skill" else "Find facts about"
    end = "." if variant == "tail" else ""
    state: type[Doc] = AuditedDoc if variant == "unrelated" else Doc
    graph = (
        Graph("versions", state=state)
        .with_node("plan", plan, config={"prompt": "Plan a document on"})
        .with_node("draft", draft, input=Part, config={"prompt": "Draft the part"})
        .with_node(SubgraphNode.from_skill(research_skill(lookup_prompt, end), site="research"))
        .with_node("summarize", summarize, config={"prompt": summary_prompt})
        .with_conditional_edges("plan", fan_out, ["draft"])
        .with_edge("draft", "research")
        .with_edge("research", "summarize")
        .with_edge("summarize", END)
    )
    if variant == "unrelated":
        return graph.with_node("audit", audit).with_edge(START, "audit").with_edge("audit", "plan")
    return graph.with_edge(START, "plan")


def compile_version(variant: str, base_url: str, **options: Any) -> CompiledGraph[Any]:
    """``build(variant)`` compiled with a model at ``base_url`` and seeded entropy."""
    model = OpenAIChatModel("scripted-model", base_url=base_url, api_key="sk-test")
    return build(variant).compile(
        services={"model": model}, entropy=lambda: SeededEntropy(0), **options
    )


def current() -> CompiledGraph[Any]:
    """The version ``$VERSIONGRAPH_VARIANT`` with a model at ``$OPENAI_BASE_URL`` (what
    ``stargraph check --graph versiongraph:current`` loads, in each worker process)."""
    return compile_version(
        os.environ.get("VERSIONGRAPH_VARIANT", "base"),
        os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
    )
