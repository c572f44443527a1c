"""The ``autoresearch`` reference skill (kind ``agent``): a ReAct loop with web fetch and
passage retrieval that must end in a structured, source-checked :class:`Report`.

The graph over :class:`AutoresearchState` has two nodes::

    START -> research (the ReAct primitive, mounted as a subgraph) -> verify -> END

* ``research`` is :func:`stargraph.skills.react.react_skill` with the tools
  ``choir.http.fetch@1.0.0`` and ``refs.retrieve@1.0.0`` and ``output_model=Report``: its
  final answer must be a JSON :class:`Report` (the loop sends invalid answers back to the
  model, within its error budget).
* ``verify`` checks every source of every claim against what the agent actually saw: a URL
  it fetched successfully (HTTP status below 400) or a passage id a retrieval returned. A
  report citing anything else is rejected (``outcome="unsupported"``, the culprits in
  ``unsupported``), so an invented source never reaches the caller as a claim.

Tools cannot reach ``ctx.services`` (a ``ToolContext`` carries workspace, secrets and
deadline only), so the retrieval tool is a closure bound to the stores when the arbiter is
built: :func:`research_arbiter` (or :func:`retrieval_tool` for a registry of your own)::

    arbiter = research_arbiter(docs=docs, vectors=vectors, embedder=embedder, workspace=tmp)
    app = autoresearch_graph().compile(services={"model": chat, "arbiter": arbiter})
    app.invoke({"task": "What do we know about X?"}).report
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Annotated, Any, Final, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError, SkillValidationError, ToolError
from stargraph.graph import END, START, Graph
from stargraph.llm import RequestOptions
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill, SkillKind
from stargraph.skills.react import ReactOutput, ToolCallRecord, react_skill
from stargraph.skills.refs._loop import reference_skill
from stargraph.skills.refs.embed import Embedder
from stargraph.skills.refs.retrieval import RETRIEVAL_DEFAULTS, hybrid_search
from stargraph.skills.refs.stores import DocumentStore, Passage, VectorStore
from stargraph.tools import (
    Arbiter,
    PythonTool,
    ToolOutput,
    ToolRegistry,
    Workspace,
    builtin_tools,
    tool,
)

__all__ = [
    "AUTORESEARCH_PROMPT",
    "FETCH_TOOL",
    "RETRIEVE_TOOL",
    "AutoresearchOutput",
    "AutoresearchState",
    "Claim",
    "Report",
    "autoresearch_graph",
    "autoresearch_skill",
    "make_autoresearch_skill",
    "research_arbiter",
    "retrieval_tool",
    "sources_seen",
    "unbound_retrieval_tool",
]

FETCH_TOOL: Final = "choir.http.fetch@1.0.0"
"""The built-in HTTP fetch tool."""
RETRIEVE_TOOL: Final = "refs.retrieve@1.0.0"
"""The passage retrieval tool (:func:`retrieval_tool`)."""

AUTORESEARCH_PROMPT: Final = (
    "You research a question. Use the retrieval tool to search the passage corpus and the "
    "fetch tool to read web pages. Then report your findings as claims. Every claim lists "
    "its sources: the exact URLs you fetched or the passage ids retrieval returned. Cite "
    "nothing you did not fetch or retrieve."
)
"""The default system prompt of the research loop."""

_HTTP_STATUS: Final = re.compile(r"^HTTP (\d{3}) ")
_RETRIEVED: Final = re.compile(r"^retrieved (\d+) passages?: ?(.*)$")


class Claim(TypedModel):
    """One finding and where it comes from."""

    typed_error = SkillValidationError

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1, description="The claim, one or two sentences.")
    sources: list[str] = Field(
        min_length=1, description="URLs fetched or passage ids retrieved that support it."
    )


class Report(TypedModel):
    """The structured result of a research run."""

    typed_error = SkillValidationError

    model_config = ConfigDict(frozen=True, extra="forbid")

    claims: list[Claim] = Field(min_length=1, description="The findings, each with sources.")


Outcome = Literal["reported", "unsupported", "no_report"]


# BaseModel is named again (ReactOutput is one) so that linters know the list defaults are
# pydantic field defaults, copied per instance, not shared class attributes.
class AutoresearchState(ReactOutput, BaseModel):
    """State of the autoresearch graph. Start it with ``{"task": ...}``.

    The ReAct loop's declared outputs (:class:`~stargraph.skills.react.ReactOutput`, whose
    fields this model inherits) come back into the same channels; ``task`` goes in, and the
    rest are what ``verify`` concludes.
    """

    task: str = ""
    """The research question."""
    report: Report | None = None
    """The verified report (``None`` unless ``outcome == "reported"``)."""
    outcome: Outcome | None = None
    """``reported``, ``unsupported`` (a source the agent never saw) or ``no_report`` (the
    loop stopped without a valid report)."""
    unsupported: list[str] = []
    """Sources cited in the report that the agent never fetched or retrieved."""
    sources: list[str] = []
    """What the agent saw: URLs fetched successfully and passage ids retrieved, in order."""


class AutoresearchOutput(TypedModel):
    """The autoresearch skill's declared output channels."""

    typed_error = InvalidInputError

    report: Report | None = None
    """See :attr:`AutoresearchState.report`."""
    outcome: Outcome | None = None
    """See :attr:`AutoresearchState.outcome`."""
    unsupported: list[str] = []
    """See :attr:`AutoresearchState.unsupported`."""
    sources: list[str] = []
    """See :attr:`AutoresearchState.sources`."""
    final_answer: str | None = None
    """See :attr:`AutoresearchState.final_answer`."""


# --------------------------------------------------------------------------- tools


def _retrieve(search: Callable[[str], list[Passage]]) -> PythonTool:
    """The ``refs.retrieve@1.0.0`` tool over ``search``: one manifest, bound or not."""

    @tool(id=RETRIEVE_TOOL, side_effect="read", timeout_s=30)
    def retrieve_passages(
        query: Annotated[str, Field(min_length=1, description="What to search for.")],
    ) -> ToolOutput:
        """Search the passage corpus (keywords and meaning); return the best passages with
        their ids, which you cite as sources."""
        found = search(query)
        ids = ", ".join(p.id for p in found)
        return ToolOutput(
            summary=f"retrieved {len(found)} passages: {ids}",
            payload=[p.model_dump() for p in found],
        )

    return retrieve_passages


def retrieval_tool(
    *,
    docs: DocumentStore,
    vectors: VectorStore,
    embedder: Embedder,
    k: int = RETRIEVAL_DEFAULTS["k"],
    candidates: int = RETRIEVAL_DEFAULTS["candidates"],
    rrf_k: int = RETRIEVAL_DEFAULTS["rrf_k"],
) -> PythonTool:
    """The ``refs.retrieve@1.0.0`` tool bound to these stores (a closure: tools do not see
    run services). Its summary names the ids it returned, so a verifier can read them from
    the tool-call records even when the payload went to an artifact store."""
    return _retrieve(
        lambda query: hybrid_search(
            query,
            docs=docs,
            vectors=vectors,
            embedder=embedder,
            k=k,
            candidates=candidates,
            rrf_k=rrf_k,
        )
    )


def _not_bound(query: str) -> list[Passage]:
    raise ToolError(
        f"{RETRIEVE_TOOL} is registered but bound to no passage store; build the arbiter "
        "with research_arbiter(docs=..., vectors=..., embedder=..., workspace=...) or put "
        "retrieval_tool(docs=..., vectors=..., embedder=...) in your tool registry"
    )


def unbound_retrieval_tool() -> PythonTool:
    """``refs.retrieve@1.0.0`` as the built-in plugin registers it: the same manifest as
    :func:`retrieval_tool` (so registries know the tool and its side effect), bound to no
    store; a call is a :class:`~stargraph.errors.ToolError` saying how to bind it."""
    return _retrieve(_not_bound)


def research_arbiter(
    *,
    docs: DocumentStore,
    vectors: VectorStore,
    embedder: Embedder,
    workspace: Workspace | str | os.PathLike[str],
    **options: Any,
) -> Arbiter:
    """An :class:`~stargraph.tools.Arbiter` holding the built-in tools and the retrieval
    tool bound to these stores; ``options`` go to ``Arbiter`` (close it when done)."""
    registry = ToolRegistry.build(
        builtins=[*builtin_tools(), retrieval_tool(docs=docs, vectors=vectors, embedder=embedder)]
    )
    return Arbiter(registry, workspace=workspace, **options)


# --------------------------------------------------------------------------- verify


def sources_seen(tool_calls: list[ToolCallRecord]) -> list[str]:
    """URLs fetched with an HTTP status below 400 and passage ids retrieved, in order."""
    seen: dict[str, None] = {}
    for record in tool_calls:
        if record.status != "success":
            continue
        if record.tool == FETCH_TOOL:
            status = _HTTP_STATUS.match(record.summary)
            try:
                url = orjson.loads(record.arguments).get("url")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if status and int(status.group(1)) < 400 and isinstance(url, str):
                seen[url] = None
        elif record.tool == RETRIEVE_TOOL:
            found = _RETRIEVED.match(record.summary)
            if found and found.group(2):
                seen.update(dict.fromkeys(found.group(2).split(", ")))
    return list(seen)


def verify_node(state: AutoresearchState) -> dict[str, Any]:
    """Accept the report only if every source of every claim was fetched or retrieved."""
    seen = sources_seen(state.tool_calls)
    out: dict[str, Any] = {"sources": seen, "report": None, "unsupported": []}
    if not state.done or state.final_output is None:
        return {**out, "outcome": "no_report"}
    try:
        report = Report.model_validate(state.final_output)
    except SkillValidationError:
        return {**out, "outcome": "no_report"}
    known = set(seen)
    unsupported = list(
        dict.fromkeys(s for claim in report.claims for s in claim.sources if s not in known)
    )
    if unsupported:
        return {**out, "outcome": "unsupported", "unsupported": unsupported}
    return {**out, "outcome": "reported", "report": report}


# --------------------------------------------------------------------------- building


def autoresearch_graph(
    *,
    name: str = "autoresearch",
    system_prompt: str = AUTORESEARCH_PROMPT,
    model: str | None = None,
    max_steps: int = 8,
    error_budget: int = 3,
    temperature: float | None = None,
    request: RequestOptions | None = None,
) -> Graph[AutoresearchState]:
    """The autoresearch agent as a :class:`~stargraph.graph.Graph`: the ReAct loop
    (``max_steps`` model calls at most, ``error_budget`` failures) mounted at site
    ``research``, then ``verify``. ``temperature`` and ``request``
    (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``, ``seed`` ...) fix those fields
    of every model call the loop makes.

    >>> [n.id for n in autoresearch_graph().to_ir().nodes]
    ['research', 'verify']
    """
    loop = react_skill(
        name=f"{name}-loop",
        description="The autoresearch tool loop.",
        model=model,
        tools=[FETCH_TOOL, RETRIEVE_TOOL],
        system_prompt=system_prompt,
        max_steps=max_steps,
        error_budget=error_budget,
        output_model=Report,
        temperature=temperature,
        request=request,
    )
    return (
        Graph(name, state=AutoresearchState)
        .with_node(SubgraphNode.from_skill(loop, site="research", max_steps=4 * max_steps + 4))
        .with_node("verify", verify_node, writes=("sources", "report", "unsupported", "outcome"))
        .with_edge(START, "research")
        .with_edge("research", "verify")
        .with_edge("verify", END)
    )


def make_autoresearch_skill(**options: Any) -> Skill:
    """:func:`autoresearch_graph` (with ``options``) packaged as the ``autoresearch`` agent
    skill whose declared outputs are :class:`AutoresearchOutput`'s fields."""
    return reference_skill(
        autoresearch_graph(**options),
        name="autoresearch",
        kind=SkillKind.AGENT,
        description=(
            "Research a question with web fetch and passage retrieval; return a structured "
            "report whose every claim cites a source the agent fetched or retrieved."
        ),
        tools=(FETCH_TOOL, RETRIEVE_TOOL),
        system_prompt=str(options.get("system_prompt", AUTORESEARCH_PROMPT)),
        outputs=AutoresearchOutput,
        requires=("service:arbiter", "service:model"),
    )


autoresearch_skill: Final[Skill] = make_autoresearch_skill()
"""The ``autoresearch`` skill with default settings."""
