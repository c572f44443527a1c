"""Observability plugins: OpenTelemetry spans and JSON-lines event logs.

Both are ordinary plugins implementing the hooks ``on_event``, ``before_tool_call`` and
``after_tool_call`` (:mod:`stargraph.plugin.hookspecs`). Register one with a plugin manager
and hand that manager to the graph (run events) and to the registry's arbiter (tool calls)::

    from stargraph.plugin import Registry, get_plugin_manager
    from stargraph.telemetry import JsonLinesObserver, OtelObserver

    pm = get_plugin_manager(plugins=[OtelObserver(), JsonLinesObserver("events.jsonl")])
    app = graph.compile(plugins=pm, services={"arbiter": Registry.build(pm).arbiter(ws)})

* :class:`OtelObserver` (needs the ``otel`` extra: ``pip install 'stargraph[otel]'``) emits
  one span per run, per step, per node execution and per tool call, nested in that order
  (a subgraph's run nests under the node that ran it). Names and attributes follow the
  OpenTelemetry GenAI semantic conventions where they apply: a run is an
  ``invoke_workflow`` operation (``gen_ai.conversation.id`` is the run id), a tool call an
  ``execute_tool`` operation with ``gen_ai.tool.name``/``gen_ai.tool.call.id``; stargraph's
  own facts (step, node, graph hash, rule decisions) are ``stargraph.*`` attributes and
  span events. Tool arguments and results are content, recorded only with
  ``capture_content=True``, as the conventions ask.
* :class:`JsonLinesObserver` needs nothing: one JSON object per line for every run event
  (``event.model_dump``), and for every tool call (``tool_call``/``tool_result``), each
  with ``ts_ms``.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, Final

from stargraph._lifecycle import Closing
from stargraph.plugin.hookspecs import hookimpl

__all__ = ["JsonLinesObserver", "OtelObserver"]

_INSTRUMENTATION: Final = "stargraph"
_INSTALL_HINT: Final = (
    "OtelObserver needs the OpenTelemetry SDK: pip install 'stargraph[otel]' (or opentelemetry-sdk)"
)


def _otel(module: str) -> Any:
    """Import an OpenTelemetry module at run time (the ``otel`` extra is optional)."""
    try:
        return importlib.import_module(f"opentelemetry.{module}")
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("stargraph")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _tool_fields(call: Any) -> dict[str, Any]:
    return {
        "tool": str(getattr(call, "tool", "")),
        "call_id": getattr(call, "call_id", None),
        "lane": getattr(call, "lane", None),
        "node": getattr(call, "node", None),
        "state": getattr(call, "state", None),
    }


class _Once:
    """Which event objects were seen already: a subgraph's events reach the observers twice
    (from the child run, then bubbled up by the parent) as the very same objects. Holds the
    last ``size`` events, so an id is not reused while it is remembered."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._held: OrderedDict[int, Any] = OrderedDict()

    def first(self, event: Any) -> bool:
        """True the first time ``event`` (this object) is seen."""
        key = id(event)
        if key in self._held and self._held[key] is event:
            return False
        self._held[key] = event
        if len(self._held) > self._size:
            self._held.popitem(last=False)
        return True


class OtelObserver:
    """A plugin emitting OpenTelemetry spans for runs, steps, nodes and tool calls.

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace``); ``workflow``
    names the runs (``gen_ai.workflow.name``, and the run span ``invoke_workflow NAME``);
    ``capture_content`` records tool arguments and results (off by default: they may hold
    user data). Raises ``ImportError`` with the install command when the SDK is missing.
    """

    def __init__(
        self,
        tracer_provider: Any = None,
        *,
        workflow: str | None = None,
        capture_content: bool = False,
    ) -> None:
        trace = _otel("trace")
        self._trace = trace
        self._status = trace.Status
        self._code = trace.StatusCode
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self.tracer = provider.get_tracer(_INSTRUMENTATION, _version())
        self.workflow = workflow
        self.capture_content = capture_content
        self._lock = threading.Lock()
        self._once = _Once()
        self._pending: dict[str, tuple[str, dict[str, Any], int]] = {}
        self._runs: dict[str, Any] = {}
        self._steps: dict[tuple[str, int], Any] = {}
        self._nodes: dict[tuple[str, str, int], Any] = {}
        self._tools: dict[int, Any] = {}

    # ------------------------------------------------------------------ spans

    def _start(
        self, name: str, parent: Any, attributes: Mapping[str, Any], kind: Any = None
    ) -> Any:
        context = self._trace.set_span_in_context(parent) if parent is not None else None
        options: dict[str, Any] = {"context": context, "attributes": dict(attributes)}
        if kind is not None:
            options["kind"] = kind
        return self.tracer.start_span(name, **options)

    def _parent_node(self, node: str | None) -> Any:
        """The newest open node span of ``node`` (a subgraph site, or a tool's caller)."""
        if node is None:
            return None
        found = [span for (_, name, _), span in self._nodes.items() if name == node]
        return found[-1] if found else None

    def _run(self, run_id: str, path: tuple[str, ...]) -> Any:
        """The run's span, started on the run's first event after ``run_started`` (which
        may not carry the path yet) with the start time of ``run_started``: a subgraph's
        run nests under the node span of its site, ``path[-1]``."""
        span = self._runs.get(run_id)
        if span is None and run_id in self._pending:
            name, attributes, start = self._pending.pop(run_id)
            attributes["stargraph.path"] = list(path)
            parent = self._parent_node(path[-1]) if path else None
            context = self._trace.set_span_in_context(parent) if parent is not None else None
            span = self.tracer.start_span(
                name, context=context, attributes=attributes, start_time=start
            )
            self._runs[run_id] = span
        return span

    def _step(self, run_id: str, step: int) -> Any:
        key = (run_id, step)
        span = self._steps.get(key)
        if span is None:
            for (rid, other), open_span in list(self._steps.items()):
                if rid == run_id and other != step:
                    open_span.end()
                    del self._steps[(rid, other)]
            span = self._start(
                f"step {step}",
                self._runs.get(run_id),
                {"stargraph.run_id": run_id, "stargraph.step": step},
            )
            self._steps[key] = span
        return span

    def _end_run(self, run_id: str, error: tuple[str, str] | None = None) -> None:
        for node_key in [k for k in self._nodes if k[0] == run_id]:
            span = self._nodes.pop(node_key)
            if error is not None:
                span.set_status(self._status(self._code.ERROR, error[1]))
            span.end()
        for key in [k for k in self._steps if k[0] == run_id]:
            self._steps.pop(key).end()
        self._pending.pop(run_id, None)
        span = self._runs.pop(run_id, None)
        if span is None:
            return
        if error is not None:
            span.set_attribute("error.type", error[0])
            span.set_status(self._status(self._code.ERROR, error[1]))
        span.end()

    # ------------------------------------------------------------------ hooks

    @hookimpl
    def on_event(self, event: Any) -> None:
        """Open and close the run, step and node spans as the run's events arrive."""
        kind = getattr(event, "kind", None)
        run_id = str(getattr(event, "run_id", ""))
        step = int(getattr(event, "step", 0))
        with self._lock:
            if not self._once.first(event):
                return
            path = tuple(getattr(event, "path", ()))
            if kind == "run_started":
                attributes: dict[str, Any] = {
                    "gen_ai.operation.name": "invoke_workflow",
                    "gen_ai.conversation.id": run_id,
                    "stargraph.run_id": run_id,
                    "stargraph.graph_hash": event.graph_hash,
                    "stargraph.resumed": bool(event.resumed),
                }
                if self.workflow:
                    attributes["gen_ai.workflow.name"] = self.workflow
                name = f"invoke_workflow {self.workflow}" if self.workflow else "invoke_workflow"
                self._pending[run_id] = (name, attributes, time.time_ns())
                return
            run = self._run(run_id, path)
            if kind == "node_started":
                key = (run_id, str(event.node), int(event.index))
                self._nodes[key] = self._start(
                    f"node {event.node}",
                    self._step(run_id, step),
                    {
                        "stargraph.run_id": run_id,
                        "stargraph.step": step,
                        "stargraph.node": str(event.node),
                        "stargraph.node.index": int(event.index),
                        "stargraph.node.attempt": int(event.attempt),
                    },
                )
            elif kind == "node_finished":
                span = self._nodes.pop((run_id, str(event.node), int(event.index)), None)
                if span is not None:
                    span.set_attribute("stargraph.node.attempts", int(event.attempts))
                    span.set_attribute("stargraph.node.writes", sorted(event.writes))
                    span.end()
            elif kind == "step_completed":
                span = self._steps.pop((run_id, step), None)
                if span is not None:
                    span.set_attribute("stargraph.step.nodes", list(event.nodes))
                    span.set_attribute("stargraph.step.next", list(event.next))
                    span.end()
            elif kind == "rule_decided":
                target = self._steps.get((run_id, step)) or run
                if target is not None:
                    details = {
                        "stargraph.rule.decision": event.decision,
                        "stargraph.rule.name": event.rule,
                        "stargraph.rule.target": event.target,
                        "stargraph.rule.reason": event.reason,
                        "stargraph.step": step,
                    }
                    target.add_event(
                        "rule_decided", {k: v for k, v in details.items() if v is not None}
                    )
            elif kind == "run_interrupted":
                if run is not None:
                    run.set_attribute("stargraph.status", "interrupted")
                    run.add_event("run_interrupted", {"stargraph.interrupt": _dumps(event.payload)})
                self._end_run(run_id)
            elif kind == "run_finished":
                if run is not None:
                    run.set_attribute("stargraph.status", event.status)
                    if event.stopped_by:
                        run.set_attribute("stargraph.stopped_by", event.stopped_by)
                    if event.stop_reason:
                        run.set_attribute("stargraph.stop_reason", event.stop_reason)
                    run.set_status(self._status(self._code.OK))
                self._end_run(run_id)
            elif kind == "run_failed":
                if run is not None:
                    run.set_attribute("stargraph.status", "failed")
                self._end_run(run_id, (str(event.error_type), str(event.error)))
            elif kind == "run_cancelled":
                if run is not None:
                    run.set_attribute("stargraph.status", "cancelled")
                    run.set_attribute("stargraph.stopped_by", str(event.reason))
                self._end_run(run_id)

    @hookimpl
    def before_tool_call(self, call: Any) -> None:
        """Open an ``execute_tool`` span, under the calling node's span when there is one."""
        fields = _tool_fields(call)
        name = fields["tool"].partition("@")[0]
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
        }
        for key, attribute in (
            ("call_id", "gen_ai.tool.call.id"),
            ("lane", "stargraph.lane"),
            ("node", "stargraph.node"),
            ("state", "stargraph.skill_state"),
        ):
            if fields[key] is not None:
                attributes[attribute] = str(fields[key])
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _dumps(getattr(call, "args", {}))
        with self._lock:
            parent = self._parent_node(fields["node"])
            kind = self._trace.SpanKind.INTERNAL
            self._tools[id(call)] = self._start(f"execute_tool {name}", parent, attributes, kind)

    @hookimpl
    def after_tool_call(self, call: Any, result: Any, error: Any) -> None:
        """Close the call's span with the tool's id, status and, on failure, the error."""
        with self._lock:
            span = self._tools.pop(id(call), None)
        if span is None:
            return
        if result is not None:
            tool_id = str(getattr(result, "tool", ""))
            if tool_id:
                # The call may name the tool by its LLM function name; the result has its id.
                name = tool_id.partition("@")[0]
                span.update_name(f"execute_tool {name}")
                span.set_attribute("gen_ai.tool.name", name)
                span.set_attribute("stargraph.tool.id", tool_id)
            status = str(getattr(result, "status", ""))
            span.set_attribute("stargraph.tool.status", status)
            if self.capture_content:
                span.set_attribute(
                    "gen_ai.tool.call.result",
                    _dumps({"summary": result.summary, "payload": result.payload}),
                )
            if status != "success":
                span.set_attribute("error.type", status)
                span.set_status(self._status(self._code.ERROR, str(result.summary)))
        if error is not None:
            span.set_attribute("error.type", type(error).__name__)
            span.set_status(self._status(self._code.ERROR, str(error)))
        span.end()

    def close(self) -> None:
        """End every span still open (runs cut short, tool calls that never returned)."""
        with self._lock:
            for run_id in list(self._pending):
                self._run(run_id, ())
            for run_id in list(self._runs):
                self._end_run(run_id)
            for step_key in list(self._steps):
                self._steps.pop(step_key).end()
            for node_key in list(self._nodes):
                self._nodes.pop(node_key).end()
            for call in list(self._tools):
                self._tools.pop(call).end()


class JsonLinesObserver(Closing):
    """A plugin writing every run event and tool call as one JSON object per line.

    ``path`` is a file (appended to; parent directories are created) or an open text
    stream. Run events are written as ``event.model_dump(mode="json")`` (``kind``,
    ``run_id``, ``step``, ``path``, ``node`` ...); tool calls as ``{"kind": "tool_call",
    tool, call_id, lane, node, state, args}`` and ``{"kind": "tool_result", ..., status,
    summary}`` (or ``error``). Every line has ``ts_ms``, milliseconds since the epoch.
    Thread safe; each line is flushed as it is written.

    >>> import io
    >>> from stargraph.runtime import StepCompleted
    >>> out = io.StringIO()
    >>> JsonLinesObserver(out).on_event(StepCompleted(run_id="r", step=1, nodes=("a",), next=()))
    >>> line = json.loads(out.getvalue())
    >>> line["kind"], line["run_id"], line["nodes"]
    ('step_completed', 'r', ['a'])
    """

    def __init__(self, path: str | os.PathLike[str] | IO[str]) -> None:
        self._lock = threading.Lock()
        self._once = _Once()
        if isinstance(path, str | os.PathLike):
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.path: Path | None = target
            self._file: IO[str] = target.open("a", encoding="utf-8")
            self._owned = True
        else:
            self.path = None
            self._file = path
            self._owned = False

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(
            {"ts_ms": time.time_ns() // 1_000_000, **record},
            ensure_ascii=False,
            sort_keys=True,
            default=str,
        )
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    @hookimpl
    def on_event(self, event: Any) -> None:
        """Write a run event (once, though a subgraph's events arrive twice)."""
        with self._lock:
            if not self._once.first(event):
                return
        dump = getattr(event, "model_dump", None)
        record = dump(mode="json") if callable(dump) else {"kind": type(event).__name__}
        self._write(record)

    @hookimpl
    def before_tool_call(self, call: Any) -> None:
        """Write a ``tool_call`` line."""
        self._write({"kind": "tool_call", **_tool_fields(call), "args": getattr(call, "args", {})})

    @hookimpl
    def after_tool_call(self, call: Any, result: Any, error: Any) -> None:
        """Write a ``tool_result`` line: the result's status and summary, or the error."""
        record: dict[str, Any] = {"kind": "tool_result", **_tool_fields(call)}
        if result is not None:
            record.update(
                tool_id=getattr(result, "tool", None),
                status=getattr(result, "status", None),
                summary=getattr(result, "summary", None),
            )
        if error is not None:
            record.update(status="error", error=f"{type(error).__name__}: {error}")
        self._write(record)

    def close(self) -> None:
        """Close the file (a stream passed in is left open)."""
        with self._lock:
            if self._owned and not self._file.closed:
                self._file.close()
