"""The ``wiki`` reference skill (kind ``agent``): topic -> planned queries -> parallel
research -> a Markdown entry in which every claim cites a source.

The graph over :class:`WikiState`::

    START -> plan --Send x N--> research --(sources?)--> write -> validate --accept--> END
                                     \\                     ^          |
                                      \\                    +--retry---+
                                       +--(none)--> give_up <-give_up-+     give_up -> END

* ``plan`` (``must_stub``) asks the model for up to ``max_queries`` search queries about the
  topic (a JSON array); the router after it fans out one ``research`` task per query with
  :class:`~stargraph.graph.Send` - they run in one step, in parallel when blocking.
* ``research`` retrieves passages for its query (vector + keyword, fused), recorded in the
  run's journal; the tasks' passages are appended to ``sources``.
* ``write`` (``must_stub``) asks the model for the entry, giving it the sources' text.
* ``validate`` splits the entry into claims (sentences outside headings) and accepts it only
  if every claim cites at least one source and every citation names a retrieved source.
  An uncited claim or an unknown citation sends the entry back to ``write`` with the
  culprits while attempts remain (``budget``); then ``give_up`` ends with no entry and
  ``outcome="rejected"``. No sources at all ends with ``outcome="insufficient_context"``
  without asking the model to write.

Services: ``model``, ``docs``, ``vectors``, ``embedder`` (as for ``rag``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

import orjson
from pydantic import ConfigDict

from stargraph import reducers
from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError, SkillValidationError
from stargraph.graph import START, Graph, Send
from stargraph.llm import RequestOptions
from stargraph.runtime import RunContext
from stargraph.skills import Skill, SkillKind
from stargraph.skills.refs import _loop
from stargraph.skills.refs.retrieval import RETRIEVAL_DEFAULTS, citations, format_passages
from stargraph.skills.refs.stores import Passage

__all__ = [
    "PLAN_PROMPT",
    "WRITE_PROMPT",
    "WikiClaim",
    "WikiOutput",
    "WikiState",
    "make_wiki_skill",
    "parse_queries",
    "split_claims",
    "wiki_graph",
    "wiki_skill",
]

PLAN_PROMPT: Final = (
    "You plan research for an encyclopedia entry. Reply with only a JSON array of short "
    "search queries (strings) that together cover the topic."
)
"""The default system prompt of ``plan``."""

WRITE_PROMPT: Final = (
    "Write an encyclopedia entry in Markdown about the topic, using only the sources given. "
    "Start with a '# Title' line. End every sentence with the id of the source that supports "
    "it in square brackets, e.g. 'Paris is the capital of France [p1].' Cite only the ids "
    "given; write no sentence you cannot cite."
)
"""The default system prompt of ``write``."""

_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+(?!\[)|(?<=\])\s+(?=[A-Z0-9\"'(])")
_BULLET: Final = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_FENCE: Final = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(?P<body>.*)\n\s*```\s*$", re.DOTALL)

Outcome = Literal["written", "insufficient_context", "rejected"]


class WikiClaim(TypedModel):
    """One sentence of the entry and the sources it cites."""

    typed_error = SkillValidationError

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    """The sentence as written (citations included)."""
    sources: list[str]
    """The ids it cites."""


class WikiState(TypedModel):
    """State of the wiki graph. Start it with ``{"topic": ...}``."""

    typed_error = InvalidInputError

    topic: str = ""
    """What the entry is about."""
    queries: list[str] = []
    """The planned search queries."""
    query: str = ""
    """The query of one research task (set by its ``Send``)."""
    sources: Annotated[list[Passage], reducers.append] = []
    """Passages the research tasks retrieved (possibly repeated across queries)."""
    entry: str | None = None
    """The accepted Markdown entry (``None`` unless ``outcome == "written"``)."""
    draft: str | None = None
    """The last entry the model wrote."""
    claims: list[WikiClaim] = []
    """The accepted entry's claims, each with its citations."""
    uncited: list[str] = []
    """Claims of the last draft without a citation."""
    unknown: list[str] = []
    """Citations of the last draft that name no retrieved source."""
    attempts: int = 0
    """Drafts asked of the model so far."""
    feedback: str | None = None
    """What was wrong with the last draft."""
    verdict: _loop.Verdict | None = None
    """The last validation's decision."""
    outcome: Outcome | None = None
    """``written``, ``insufficient_context`` or ``rejected`` once the run is over."""


class WikiOutput(TypedModel):
    """The wiki skill's declared output channels."""

    typed_error = InvalidInputError

    entry: str | None = None
    """See :attr:`WikiState.entry`."""
    claims: list[WikiClaim] = []
    """See :attr:`WikiState.claims`."""
    queries: list[str] = []
    """See :attr:`WikiState.queries`."""
    sources: Annotated[list[Passage], reducers.append] = []
    """See :attr:`WikiState.sources`."""
    uncited: list[str] = []
    """See :attr:`WikiState.uncited`."""
    attempts: int = 0
    """See :attr:`WikiState.attempts`."""
    outcome: Outcome | None = None
    """See :attr:`WikiState.outcome`."""


# --------------------------------------------------------------------------- parsing


def parse_queries(text: str, topic: str, limit: int) -> list[str]:
    """The model's queries: a JSON array of strings (or ``{"queries": [...]}``, possibly in
    a code fence), else one query per non-empty line; the topic when there are none.

    >>> parse_queries('["history of Paris", "Paris landmarks"]', "Paris", 5)
    ['history of Paris', 'Paris landmarks']
    >>> parse_queries("", "Paris", 5)
    ['Paris']
    """
    fenced = _FENCE.match(text)
    body = fenced["body"] if fenced else text
    found: Any = None
    try:
        found = orjson.loads(body)
    except orjson.JSONDecodeError:
        found = [_BULLET.sub("", line).strip() for line in body.splitlines()]
    if isinstance(found, dict):
        found = found.get("queries")
    items = found if isinstance(found, list) else []
    queries = [q.strip() for q in items if isinstance(q, str) and q.strip()]
    return list(dict.fromkeys(queries))[:limit] or [topic]


def split_claims(entry: str) -> list[WikiClaim]:
    """The entry's claims: sentences of every line that is not a heading, a rule or a code
    fence, bullets stripped, each with the ids it cites.

    >>> [c.sources for c in split_claims("# Paris\\nIt is big [p1]. It is old. [p2]")]
    [['p1'], ['p2']]
    """
    claims: list[WikiClaim] = []
    for raw in entry.splitlines():
        line = _BULLET.sub("", raw).strip()
        if not line or line.startswith(("#", "```", "---", "***", "|")):
            continue
        for sentence in _SENTENCE_END.split(line):
            text = sentence.strip()
            if re.search(r"\w", re.sub(r"\[[^\]]*\]", "", text)):
                claims.append(WikiClaim(text=text, sources=citations(text)))
            elif text and claims and citations(text):
                # A citation alone after a sentence's full stop belongs to that sentence.
                last = claims[-1]
                merged = list(dict.fromkeys([*last.sources, *citations(text)]))
                claims[-1] = WikiClaim(text=f"{last.text} {text}", sources=merged)
    return claims


def _unique(passages: list[Passage]) -> list[Passage]:
    return list({p.id: p for p in passages}.values())


# --------------------------------------------------------------------------- nodes


def plan_node(state: WikiState, ctx: RunContext) -> dict[str, Any]:
    """Ask the model for search queries about the topic."""
    limit = int(ctx.config.get("max_queries", 4))
    reply = _loop.ask_with_feedback(
        ctx, PLAN_PROMPT, f"Topic: {state.topic}\nAt most {limit} queries."
    )
    return {"queries": parse_queries(reply, state.topic, limit)}


def fan_out(state: WikiState) -> list[Send]:
    """One ``research`` task per planned query."""
    return [Send("research", {"query": q}) for q in state.queries or [state.topic]]


def research_node(state: WikiState, ctx: RunContext) -> dict[str, Any]:
    """Retrieve passages for this task's query."""
    return {"sources": _loop.retrieve_query(ctx, state.query)}


def after_research(state: WikiState) -> Literal["write", "give_up"]:
    """No sources at all: nothing to write from."""
    return "write" if state.sources else "give_up"


def write_node(state: WikiState, ctx: RunContext) -> dict[str, Any]:
    """Ask the model for the entry, giving it the sources' text (and, on a retry, what was
    wrong with its last draft)."""
    text = f"Sources:\n\n{format_passages(_unique(state.sources))}\n\nTopic: {state.topic}"
    draft = _loop.ask_with_feedback(
        ctx, WRITE_PROMPT, text, previous=state.draft, feedback=state.feedback
    )
    return {"draft": draft, "attempts": state.attempts + 1}


def validate_node(state: WikiState, ctx: RunContext) -> dict[str, Any]:
    """Accept the draft only if every claim cites a retrieved source."""
    known = [p.id for p in _unique(state.sources)]
    claims = split_claims(state.draft or "")
    uncited = [c.text for c in claims if not c.sources]
    unknown = list(dict.fromkeys(s for c in claims for s in c.sources if s not in known))
    problems = []
    if not claims:
        problems.append("Your entry has no claims.")
    if uncited:
        problems.append(f"These sentences cite no source: {uncited}.")
    if unknown:
        problems.append(f"These citations name no source you were given: {unknown}.")
    out: dict[str, Any] = {"uncited": uncited, "unknown": unknown}
    if not problems:
        return {
            **out,
            "verdict": "accept",
            "feedback": None,
            "entry": state.draft,
            "claims": claims,
            "outcome": "written",
        }
    feedback = " ".join(problems) + f" Cite only these ids: {known}. Write the entry again."
    return {**out, "verdict": _loop.retry_verdict(state.attempts, ctx.config), "feedback": feedback}


def after_validate(state: WikiState) -> _loop.Verdict:
    """Route on the validation's verdict."""
    return state.verdict or "give_up"


def give_up_node(state: WikiState) -> dict[str, Any]:
    """End without an entry: no sources, or no acceptable draft within the budget."""
    outcome: Outcome = "rejected" if state.attempts else "insufficient_context"
    return {"entry": None, "claims": [], "outcome": outcome}


# --------------------------------------------------------------------------- building


def wiki_graph(
    *,
    name: str = "wiki",
    max_queries: int = 4,
    k: int = RETRIEVAL_DEFAULTS["k"],
    candidates: int = RETRIEVAL_DEFAULTS["candidates"],
    rrf_k: int = RETRIEVAL_DEFAULTS["rrf_k"],
    budget: int = 2,
    plan_prompt: str = PLAN_PROMPT,
    write_prompt: str = WRITE_PROMPT,
    model: str | None = None,
    temperature: float | None = None,
    request: RequestOptions | None = None,
    embedder: str | None = None,
) -> Graph[WikiState]:
    """The wiki agent as a :class:`~stargraph.graph.Graph`.

    ``temperature`` and ``request`` (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``,
    ``seed`` ...) fix those fields of every model call, the plan's and the writer's (and
    the graph hash).

    >>> sorted(n.id for n in wiki_graph().to_ir().nodes if n.must_stub)
    ['plan', 'write']
    """
    numbers = {"max_queries": max_queries, "k": k, "candidates": candidates, "rrf_k": rrf_k}
    numbers["budget"] = budget
    _loop.check_numbers(
        "wiki_graph", numbers, "max_queries=4, k=4, candidates=20, rrf_k=60, budget=2"
    )
    llm = _loop.llm_settings(model, temperature, request, who="wiki_graph")
    graph = (
        Graph(name, state=WikiState)
        .with_node(
            "plan",
            plan_node,
            config={**llm, "system_prompt": plan_prompt, "max_queries": max_queries},
            must_stub=True,
            writes=("queries",),
        )
        .with_node(
            "research",
            research_node,
            config=_loop.retrieval_config(k, candidates, rrf_k, embedder),
            writes=("sources",),
        )
        .with_node(
            "write",
            write_node,
            config={**llm, "system_prompt": write_prompt},
            must_stub=True,
            writes=("draft", "attempts"),
        )
        .with_edge(START, "plan")
        .with_conditional_edges("plan", fan_out, ["research"])
        .with_conditional_edges("research", after_research)
    )
    return _loop.with_retry_loop(
        graph,
        "write",
        validate=validate_node,
        after_validate=after_validate,
        give_up=give_up_node,
        budget=budget,
        validate_writes=("uncited", "unknown", "verdict", "feedback", "entry", "claims", "outcome"),
        give_up_writes=("entry", "claims", "outcome"),
    )


def make_wiki_skill(**options: Any) -> Skill:
    """:func:`wiki_graph` (with ``options``) packaged as the ``wiki`` agent skill whose
    declared outputs are :class:`WikiOutput`'s fields."""
    return _loop.reference_skill(
        wiki_graph(**options),
        name="wiki",
        kind=SkillKind.AGENT,
        description=(
            "Write a Markdown wiki entry on a topic: planned queries researched in parallel, "
            "every claim citing a retrieved source, uncited claims rejected."
        ),
        system_prompt=str(options.get("write_prompt", WRITE_PROMPT)),
        outputs=WikiOutput,
    )


wiki_skill: Final[Skill] = make_wiki_skill()
"""The ``wiki`` skill with default settings."""
