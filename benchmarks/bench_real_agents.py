"""How often agents succeed on local models: stargraph beside LangGraph, on llama.cpp's server.

``python -m benchmarks.bench_real_agents`` runs a fixed set of small tasks (:data:`TASKS`:
arithmetic through a tool, a lookup, read-then-compute, writing a file, a typed answer, a
question answered from searched notes ...) with ``K`` seeds each, on each local model served
by ``llama-server --jinja`` (``scripts/ensure_llama_server.sh`` builds it and fetches the
models), by three engines over the same server, tools, prompts and sampling settings:

* ``stargraph-react``: :func:`stargraph.skills.react.react_graph`;
* ``stargraph-agent``: :func:`stargraph.skills.agent.create_agent` over the plain functions;
* ``langgraph``: ``langgraph.prebuilt.create_react_agent`` with ``langchain_openai.ChatOpenAI``.

A run succeeds when its answer is right (:attr:`Task.check`: the number, word or file the task
asks for), not when it merely ends. The report gives, per model and engine, the success rate,
model calls, tokens and wall time. Every run is saved under ``--out`` (default
``.stargraph/bench-real-agents``): stargraph runs as cassettes, LangGraph runs as their message
transcripts, so ``--render`` re-checks the answers and prints the report offline, with no
server (stargraph's by replaying each cassette through its graph).

Fixes LangGraph needs against llama-server: none at the time of writing; a run that raises is a
failure with the error in the report.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import operator
import re
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel

ROOT: Final = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # the server helpers live with the real-model tests
    sys.path.insert(0, str(ROOT))

ENGINES: Final = ("stargraph-react", "stargraph-agent", "langgraph")
MAX_STEPS: Final = 6
"""Model calls a run may make (LangGraph: its recursion limit allows as many)."""
MAX_TOKENS: Final = 256
"""Every reply's bound: a run's length is bounded by tokens, not by a clock."""
SYSTEM: Final = (
    "You are a careful assistant. Use the tools to find facts and compute; never guess a "
    "number. When you know the answer, reply with it in one short sentence."
)

# --------------------------------------------------------------------------- the tools

_WORKSPACE: list[Path] = []
"""The current run's workspace (runs are sequential; the file tools read it)."""

PRICES: Final = {"apple": 0.75, "widget": 4.5, "gizmo": 1.25, "pear": 0.5}
WEATHER: Final = {"paris": "sunny, 21 C", "oslo": "snow, -3 C", "rome": "cloudy, 17 C"}
NOTES: Final = (
    "The staging database listens on port 5433; production uses 5432.",
    "Deploys happen on Thursdays after the 10:00 stand-up.",
    "The on-call phone number is kept in the team wiki, not in the repository.",
    "Backups of the staging database run nightly at 02:00.",
)

_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError(f"unsupported expression element {type(node).__name__}")


def calc(expression: str) -> float:
    """Evaluate an arithmetic expression such as 6*7 (numbers, + - * / and parentheses)."""
    return _evaluate(ast.parse(expression, mode="eval"))


def price_of(item: str) -> float:
    """The price in EUR of one item (apple, widget, gizmo or pear)."""
    key = item.strip().lower().removesuffix("s")
    if key not in PRICES:
        raise ValueError(f"no price for {item!r}; known items: {', '.join(PRICES)}")
    return PRICES[key]


def weather(city: str) -> str:
    """Today's weather in a city."""
    key = city.strip().lower()
    if key not in WEATHER:
        raise ValueError(f"no weather for {city!r}")
    return WEATHER[key]


def _file(path: str) -> Path:
    name = Path(path).name
    if not name or name != path.strip().removeprefix("./"):
        raise ValueError(f"{path!r}: give a plain file name such as notes.txt")
    return _WORKSPACE[-1] / name


def read_file(path: str) -> str:
    """Read a text file of the workspace."""
    return _file(path).read_text(encoding="utf-8")


def write_file(path: str, text: str) -> str:
    """Write text to a file of the workspace (replacing it)."""
    _file(path).write_text(text, encoding="utf-8")
    return f"wrote {len(text)} characters to {path}"


def search_notes(query: str) -> str:
    """Search the team's notes; returns the two notes that best match the query."""
    words = set(re.findall(r"[a-z0-9]+", query.lower()))
    scored = sorted(
        NOTES, key=lambda note: -len(words & set(re.findall(r"[a-z0-9]+", note.lower())))
    )
    return "\n".join(scored[:2])


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    f.__name__: f for f in (calc, price_of, weather, read_file, write_file, search_notes)
}

# --------------------------------------------------------------------------- the tasks


class Total(BaseModel):
    """The typed answer of the ``typed_total`` task."""

    total: float


def _numbers(text: str | None) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", (text or "").replace(",", ""))]


def says_number(expected: float) -> Callable[[Outcome, Path], bool]:
    def check(outcome: Outcome, _: Path) -> bool:
        return any(math.isclose(n, expected, abs_tol=1e-6) for n in _numbers(outcome.answer))

    return check


def says_word(word: str) -> Callable[[Outcome, Path], bool]:
    def check(outcome: Outcome, _: Path) -> bool:
        return word in (outcome.answer or "").lower()

    return check


def file_holds(name: str, text: str) -> Callable[[Outcome, Path], bool]:
    def check(outcome: Outcome, workspace: Path) -> bool:
        written = outcome.files.get(name)
        if written is None and (workspace / name).is_file():
            written = (workspace / name).read_text(encoding="utf-8")
        return written is not None and text in written.lower()

    return check


def typed_total(expected: float) -> Callable[[Outcome, Path], bool]:
    def check(outcome: Outcome, _: Path) -> bool:
        data = outcome.structured or {}
        value = data.get("total")
        return isinstance(value, int | float) and math.isclose(value, expected, abs_tol=1e-6)

    return check


@dataclass(frozen=True)
class Task:
    """One task: what the user says, the tools offered, the files given, what is right."""

    name: str
    prompt: str
    tools: tuple[str, ...]
    check: Callable[[Outcome, Path], bool] = field(repr=False)
    files: tuple[tuple[str, str], ...] = ()
    output_model: type[BaseModel] | None = None
    watch: tuple[str, ...] = ()
    """Files whose content after the run is kept in the record (for ``--render``)."""


TASKS: Final = (
    Task("multiply", "What is 17 * 23? Use the calc tool.", ("calc",), says_number(391)),
    Task(
        "divide",
        "Compute (1250 - 375) / 7 with the calc tool and tell me the result.",
        ("calc",),
        says_number(125),
    ),
    Task(
        "lookup",
        "How much does one apple cost, in EUR? Use the price_of tool.",
        ("price_of", "calc"),
        says_number(0.75),
    ),
    Task(
        "lookup_compute",
        "What do 12 pears cost in EUR? Look up the price with price_of, then multiply with calc.",
        ("price_of", "calc"),
        says_number(6),
    ),
    Task(
        "weather",
        "What is the temperature in Oslo today, in C? Use the weather tool.",
        ("weather",),
        says_number(-3),
    ),
    Task(
        "read",
        "Read notes.txt and tell me on which day of the week the meeting is.",
        ("read_file",),
        says_word("tuesday"),
        files=(("notes.txt", "The team meeting is on Tuesday at 9:30.\n"),),
    ),
    Task(
        "read_compute",
        "Read order.txt, look up the price of the item it names with price_of, and tell "
        "me the total in EUR (use calc).",
        ("read_file", "price_of", "calc"),
        says_number(22.5),
        files=(("order.txt", "5 widgets\n"),),
    ),
    Task(
        "write",
        "Write the text hello world to the file greeting.txt with write_file.",
        ("write_file",),
        file_holds("greeting.txt", "hello world"),
        watch=("greeting.txt",),
    ),
    Task(
        "compute_write",
        "Compute 12 * 12 with calc, then write the result to result.txt with write_file.",
        ("calc", "write_file"),
        file_holds("result.txt", "144"),
        watch=("result.txt",),
    ),
    Task(
        "typed_total",
        "Three items cost 4.50 EUR each. What is the total? Compute it with calc.",
        ("calc",),
        typed_total(13.5),
        output_model=Total,
    ),
    Task(
        "notes_question",
        "Which port does the staging database listen on? Search the notes with search_notes.",
        ("search_notes",),
        says_number(5433),
    ),
)
"""The fixed task set."""


@dataclass
class Outcome:
    """What one run produced and cost."""

    model: str
    engine: str
    task: str
    seed: int
    answer: str | None = None
    structured: dict[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    llm_calls: int = 0
    tool_calls: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    error: str | None = None
    success: bool = False

    @property
    def run_id(self) -> str:
        return f"{self.model}.{self.engine}.{self.task}.{self.seed}"


# --------------------------------------------------------------------------- the engines


@dataclass(frozen=True)
class Sampling:
    """The request settings every engine sends."""

    temperature: float
    seed: int
    max_tokens: int = MAX_TOKENS


class _WithOptions:
    """A chat model that puts the sampling settings on every request (``create_agent`` takes
    no request options of its own); journaled like any chat model."""

    def __init__(self, model: Any, sampling: Sampling) -> None:
        self.model = model
        self.sampling = sampling

    def _shaped(self, request: Any) -> Any:
        return request.model_copy(
            update={
                "temperature": self.sampling.temperature,
                "max_tokens": self.sampling.max_tokens,
                "extra": {**request.extra, "seed": self.sampling.seed},
            }
        )

    def bind_journal(self, journal: Any) -> Any:
        from stargraph.llm import JournaledChatModel

        return JournaledChatModel(self, journal)

    def complete(self, request: Any) -> Any:
        return self.model.complete(self._shaped(request))

    async def acomplete(self, request: Any) -> Any:
        return await self.model.acomplete(self._shaped(request))


def _stargraph_tools(names: Sequence[str]) -> list[Any]:
    from stargraph.tools import tool

    made = []
    for name in names:
        side = "write" if name == "write_file" else "read" if name == "read_file" else "none"
        made.append(tool(id=f"bench.{name}@1.0.0", side_effect=side)(FUNCTIONS[name]))
    return made


def react_graph_for(task: Task, sampling: Sampling) -> Any:
    """The ``react_graph`` of ``task`` (the same on the live run and on ``--render``)."""
    from stargraph.llm import RequestOptions, ResponseFormat
    from stargraph.skills.react import react_graph

    response = None if task.output_model is None else ResponseFormat.for_schema(task.output_model)
    return react_graph(
        name=f"bench-{task.name}",
        tools=[f"bench.{name}@1.0.0" for name in task.tools],
        system_prompt=SYSTEM,
        max_steps=MAX_STEPS,
        error_budget=3,
        output_model=task.output_model,
        temperature=sampling.temperature,
        request=RequestOptions(
            max_tokens=sampling.max_tokens,
            response_format=response,
            extra={"seed": sampling.seed},
        ),
    )


def agent_graph_for(task: Task) -> Any:
    """The ``create_agent`` graph of ``task``, uncompiled (for ``--render``)."""
    from stargraph.skills.agent import agent_graph, agent_tools

    return agent_graph(
        agent_tools([FUNCTIONS[name] for name in task.tools]),
        prompt=SYSTEM,
        response_format=task.output_model,
        max_steps=MAX_STEPS,
        error_budget=3,
    )


def _react_outcome(outcome: Outcome, final: Any) -> None:
    outcome.answer = final.final_answer
    output = getattr(final, "final_output", None)
    outcome.structured = dict(output) if output else None
    outcome.llm_calls = final.llm_steps
    outcome.tool_calls = len(final.tool_calls)
    outcome.tokens = final.usage.total_tokens


def _agent_outcome(outcome: Outcome, final: Any) -> None:
    last = final.messages[-1] if final.messages else None
    outcome.answer = None if last is None or last.role != "assistant" else last.content
    outcome.structured = final.structured_response
    outcome.llm_calls = final.llm_steps
    outcome.tool_calls = sum(len(m.tool_calls or ()) for m in final.messages)
    outcome.tokens = final.usage.total_tokens


def run_stargraph(
    engine: str, task: Task, sampling: Sampling, server: Any, out: Path, *, outcome: Outcome
) -> None:
    from stargraph.checkpoint import SqliteStore
    from stargraph.llm import OpenAIChatModel
    from stargraph.replay import export_cassette
    from stargraph.skills.agent import create_agent
    from stargraph.tools import Arbiter, ToolRegistry

    chat = OpenAIChatModel(
        server.alias,
        base_url=server.base_url,
        api_key="sk-none",
        profile="llama.cpp",
        timeout=600.0,
        max_retries=0,
    )
    workspace = _WORKSPACE[-1]
    with contextlib.closing(chat), contextlib.closing(SqliteStore(out / "runs.db")) as store:
        if engine == "stargraph-react":
            registry = ToolRegistry.build(builtins=_stargraph_tools(task.tools))
            with Arbiter(registry, workspace=workspace) as arbiter:
                app = react_graph_for(task, sampling).compile(
                    store=store, services={"model": chat, "arbiter": arbiter}
                )
                final = app.invoke({"task": task.prompt}, run_id=outcome.run_id)
            _react_outcome(outcome, final)
        else:
            agent = create_agent(
                _WithOptions(chat, sampling),
                [FUNCTIONS[name] for name in task.tools],
                prompt=SYSTEM,
                response_format=task.output_model,
                max_steps=MAX_STEPS,
                error_budget=3,
                store=store,
                workspace=workspace,
            )
            final = agent.invoke({"messages": [task.prompt]}, run_id=outcome.run_id)
            _agent_outcome(outcome, final)
        export_cassette(store, outcome.run_id, out / "cassettes" / f"{outcome.run_id}.json")


def run_langgraph(task: Task, sampling: Sampling, server: Any, out: Path, outcome: Outcome) -> None:
    from langchain_core.messages import AIMessage, messages_to_dict
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    chat = ChatOpenAI(
        model=server.alias,
        base_url=server.base_url,
        api_key="sk-none",
        temperature=sampling.temperature,
        seed=sampling.seed,
        max_tokens=sampling.max_tokens,
        timeout=600.0,
        max_retries=0,
    )
    tools = [StructuredTool.from_function(FUNCTIONS[name]) for name in task.tools]
    agent = create_react_agent(chat, tools, prompt=SYSTEM, response_format=task.output_model)
    result = agent.invoke(
        {"messages": [("user", task.prompt)]}, {"recursion_limit": 2 * MAX_STEPS + 1}
    )
    messages = result["messages"]
    transcript = messages_to_dict(messages)
    ai = [m for m in messages if isinstance(m, AIMessage)]
    outcome.answer = ai[-1].text if ai and not ai[-1].tool_calls else None
    structured = result.get("structured_response")
    outcome.structured = structured.model_dump() if isinstance(structured, BaseModel) else None
    # The structured response is one more model call, outside the message list.
    outcome.llm_calls = len(ai) + (1 if task.output_model is not None else 0)
    outcome.tool_calls = sum(len(m.tool_calls) for m in ai)
    outcome.tokens = sum((m.usage_metadata or {}).get("total_tokens", 0) for m in ai)
    path = out / "transcripts" / f"{outcome.run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"messages": transcript, "structured": outcome.structured}, indent=1),
        encoding="utf-8",
    )


@contextlib.contextmanager
def workspace_for(task: Task, root: Path) -> Iterator[Path]:
    folder = root / "workspace"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for name, text in task.files:
        (folder / name).write_text(text, encoding="utf-8")
    _WORKSPACE.append(folder)
    try:
        yield folder
    finally:
        _WORKSPACE.pop()


def run_one(
    engine: str, task: Task, model: str, seed: int, *, temperature: float, server: Any, out: Path
) -> Outcome:
    outcome = Outcome(model=model, engine=engine, task=task.name, seed=seed)
    sampling = Sampling(temperature=temperature, seed=seed)
    with workspace_for(task, out) as workspace:
        started = time.perf_counter()
        try:
            if engine == "langgraph":
                run_langgraph(task, sampling, server, out, outcome)
            else:
                run_stargraph(engine, task, sampling, server, out, outcome=outcome)
        except Exception as exc:  # a run that raises is a failed run, reported with why
            outcome.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        outcome.wall_s = time.perf_counter() - started
        for name in task.watch:
            if (workspace / name).is_file():
                outcome.files[name] = (workspace / name).read_text(encoding="utf-8")
        outcome.success = outcome.error is None and task.check(outcome, workspace)
    return outcome


# --------------------------------------------------------------------------- the server


@dataclass(frozen=True)
class Served:
    alias: str
    base_url: str


MODELS: Final = {"0.5b": ("qwen2.5-coder-0.5b", False), "1.5b": ("qwen2.5-coder-1.5b", True)}
"""``--models`` names: the alias the server answers to, and whether it is the bench extra."""


@contextlib.contextmanager
def serve(name: str, log_dir: Path) -> Iterator[Served]:
    from tests.real_model import llamaserver

    alias, extra = MODELS[name]
    model = llamaserver.BENCH_MODEL_FILE if extra else llamaserver.MODEL_FILE
    server = llamaserver.start(log_dir, model=model, alias=alias)
    try:
        yield Served(alias, server.base_url)
    finally:
        server.stop()


# --------------------------------------------------------------------------- the report


def render(rows: Sequence[Outcome]) -> str:
    """The report: per model and engine, success rate, mean model calls, tokens, wall time;
    then per task, the successes of each engine."""
    lines = [
        "| model | engine | success | runs | model calls (mean) | tokens (mean) "
        "| wall s (mean) | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r.model, r.engine) for r in rows}, key=lambda k: (k[0], ENGINES.index(k[1])))
    for model, engine in keys:
        group = [r for r in rows if (r.model, r.engine) == (model, engine)]
        won = sum(r.success for r in group)
        lines.append(
            f"| {model} | {engine} | {won}/{len(group)} ({100 * won / len(group):.0f}%) "
            f"| {len(group)} | {statistics.mean(r.llm_calls for r in group):.1f} "
            f"| {statistics.mean(r.tokens for r in group):.0f} "
            f"| {statistics.mean(r.wall_s for r in group):.1f} "
            f"| {sum(r.error is not None for r in group)} |"
        )
    lines += ["", "| model | task | " + " | ".join(ENGINES) + " |", "|---|---|---|---|---|"]
    for model in sorted({r.model for r in rows}):
        for task in TASKS:
            cells = []
            for engine in ENGINES:
                group = [
                    r for r in rows if (r.model, r.engine, r.task) == (model, engine, task.name)
                ]
                cells.append(f"{sum(r.success for r in group)}/{len(group)}" if group else "-")
            lines.append(f"| {model} | {task.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def recheck(row: Outcome, out: Path) -> Outcome:
    """The row's answer taken again from its saved record, with no server: a stargraph run
    replayed from its cassette through its graph, a LangGraph run from its transcript."""
    task = next(t for t in TASKS if t.name == row.task)
    again = Outcome(**{**asdict(row), "files": dict(row.files)})
    if row.error is not None:
        return again
    if row.engine == "langgraph":
        saved = json.loads((out / "transcripts" / f"{row.run_id}.json").read_text())
        ai = [m["data"] for m in saved["messages"] if m["type"] == "ai"]
        last = ai[-1] if ai else None
        again.answer = None if last is None or last.get("tool_calls") else _text(last["content"])
        again.structured = saved["structured"]
    else:
        from stargraph.replay import load_cassette

        cassette = load_cassette(out / "cassettes" / f"{row.run_id}.json")
        sampling = Sampling(temperature=_TEMPERATURE[-1], seed=row.seed)
        if row.engine == "stargraph-react":
            _react_outcome(again, react_graph_for(task, sampling).compile().replay(cassette))
        else:
            _agent_outcome(again, agent_graph_for(task).compile().replay(cassette))
    again.success = task.check(again, out / "no-workspace")
    return again


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


_TEMPERATURE: list[float] = []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_real_agents")
    parser.add_argument("--models", default="0.5b", help="comma-separated: 0.5b, 1.5b")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--tasks", default="", help="comma-separated task names (default all)")
    parser.add_argument("--seeds", type=int, default=3, help="K: seeds 0..K-1 per task")
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=ROOT / ".stargraph" / "bench-real-agents")
    parser.add_argument("--render", action="store_true", help="re-check and print, offline")
    args = parser.parse_args(argv)
    out: Path = args.out
    results = out / "results.json"
    if args.render:
        saved = json.loads(results.read_text(encoding="utf-8"))
        _TEMPERATURE.append(float(saved["temperature"]))
        rows = [recheck(Outcome(**row), out) for row in saved["rows"]]
        changed = [
            r.run_id for r, s in zip(rows, saved["rows"], strict=True) if r.success != s["success"]
        ]
        print(f"{saved['command']}\n\n{render(rows)}")
        if changed:
            print(f"\nre-checked from the records, these differ from the live run: {changed}")
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.db").unlink(missing_ok=True)
    shutil.rmtree(out / "cassettes", ignore_errors=True)
    shutil.rmtree(out / "transcripts", ignore_errors=True)
    engines = [e for e in args.engines.split(",") if e]
    chosen = set(filter(None, args.tasks.split(",")))
    tasks = [t for t in TASKS if not chosen or t.name in chosen]
    command = "python -m benchmarks.bench_real_agents " + " ".join(argv or sys.argv[1:])
    rows: list[Outcome] = []
    for name in args.models.split(","):
        with serve(name, out) as server:
            for task in tasks:
                for seed in range(args.seeds):
                    for engine in engines:
                        row = run_one(
                            engine,
                            task,
                            name,
                            seed,
                            temperature=args.temperature,
                            server=server,
                            out=out,
                        )
                        rows.append(row)
                        mark = "ok " if row.success else "BAD"
                        print(
                            f"{mark} {row.run_id:44} calls={row.llm_calls} tokens={row.tokens} "
                            f"{row.wall_s:5.1f}s answer={(row.answer or '')[:60]!r}"
                            + (f" error={row.error}" if row.error else ""),
                            flush=True,
                        )
                        results.write_text(
                            json.dumps(
                                {
                                    "command": command,
                                    "temperature": args.temperature,
                                    "rows": [asdict(r) for r in rows],
                                },
                                indent=1,
                            ),
                            encoding="utf-8",
                        )
    print(f"\n{command}\n\n{render(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
