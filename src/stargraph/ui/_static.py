"""The console's own script and style sheet (vendored: no CDN, no build step)."""

from __future__ import annotations

from typing import Final

__all__ = ["CSS", "ICON", "JS"]

ICON: Final = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><path fill="#1a7f37" '
    'd="M8 0l2 6h6l-5 4 2 6-5-4-5 4 2-6-5-4h6z"/></svg>'
)

JS: Final = r"""
"use strict";
// Live updates over server-sent events, and state fetched when a step's state is opened.
(function () {
  function fetchText(url, done) {
    fetch(url, {credentials: "same-origin"}).then(function (r) {
      if (!r.ok) { throw new Error(url + ": " + r.status); }
      return r.text();
    }).then(done).catch(function (e) { console.warn(String(e)); });
  }
  document.addEventListener("toggle", function (ev) {
    var el = ev.target;
    if (!el || !el.matches || !el.matches("details.state") || !el.open || el.dataset.loaded) {
      return;
    }
    el.dataset.loaded = "1";
    fetchText(el.dataset.url, function (text) { el.querySelector("pre").textContent = text; });
  }, true);
  // A child (skill) run opens into its steps, fetched once (they may hold children too).
  document.addEventListener("toggle", function (ev) {
    var el = ev.target;
    if (!el || !el.matches || !el.matches("details.child") || !el.open || el.dataset.loaded) {
      return;
    }
    el.dataset.loaded = "1";
    fetchText(el.dataset.url, function (html) {
      var box = el.querySelector(".nested");
      box.innerHTML = html;
      el.dataset.ready = "1";
    });
  }, true);
  // A child run's timeline opens nested in its parent's, fetched once.
  document.addEventListener("toggle", function (ev) {
    var el = ev.target;
    if (!el || !el.matches || !el.matches("details.tl-child") || !el.open || el.dataset.loaded) {
      return;
    }
    el.dataset.loaded = "1";
    fetchText(el.dataset.url, function (html) {
      el.querySelector(".tl-nested").innerHTML = html;
      el.dataset.ready = "1";
    });
  }, true);
  // Choosing a step: the inspector beside the graph shows its state and what it changed,
  // and the graph marks the nodes that ran in it. Until a step is chosen by hand, the
  // newest step is shown (and followed while the run goes on).
  var inspectorBox = document.getElementById("inspector");
  var timeline = document.getElementById("timeline");
  var chosenByHand = false;
  function selectStep(step) {
    if (!inspectorBox || !timeline) { return; }
    var line = timeline.querySelector("li.tl-step[data-step='" + step + "']");
    if (!line) { return; }
    timeline.querySelectorAll("li.tl-step.selected").forEach(function (li) {
      li.classList.remove("selected");
    });
    line.classList.add("selected");
    var nodes = (line.dataset.nodes || "").split(",").filter(Boolean);
    document.querySelectorAll("svg.graph g.node").forEach(function (g) {
      g.classList.toggle("selected", nodes.indexOf(g.dataset.node) >= 0);
    });
    inspectorBox.dataset.step = String(step);
    fetchText(inspectorBox.dataset.url + "?step=" + step, function (html) {
      if (inspectorBox.dataset.step !== String(step)) { return; }  // another step chosen since
      inspectorBox.innerHTML = html;
      inspectorBox.dataset.ready = String(step);
    });
  }
  function selectNewest() {
    if (!timeline) { return; }
    var lines = timeline.querySelectorAll(":scope > li.tl-step");
    if (lines.length) { selectStep(lines[lines.length - 1].dataset.step); }
  }
  document.addEventListener("click", function (ev) {
    var button = ev.target && ev.target.closest && ev.target.closest("button.tl-select");
    if (!button) { return; }
    chosenByHand = true;
    selectStep(button.dataset.step);
  });
  selectNewest();
  var live = document.body.dataset.live;
  if (!live || !window.EventSource) { return; }
  var source = new EventSource(live);
  window.sgLive = {events: 0, source: source};
  source.addEventListener("runs", function (ev) {
    window.sgLive.events += 1;
    var awaited = document.body.dataset.awaitRun;
    if (awaited) {  // a run's page opened before the run was stored
      var stored = JSON.parse(ev.data).some(function (run) { return run[0] === awaited; });
      if (stored) { source.close(); window.location.reload(); }
      return;
    }
    var table = document.querySelector("table.runs");
    if (!table) { return; }
    fetchText(table.dataset.rows, function (html) {
      document.getElementById("run-rows").innerHTML = html;
    });
  });
  // The model output in flight (runs the console continues), replaced whole each time.
  source.addEventListener("tokens", function (ev) {
    window.sgLive.tokens = (window.sgLive.tokens || 0) + 1;
    var box = document.getElementById("live-output");
    if (!box) { return; }
    var calls = JSON.parse(ev.data);
    var list = document.getElementById("live-calls");
    list.textContent = "";
    calls.forEach(function (call) {
      var msg = document.createElement("div");
      msg.className = "msg role-assistant live-call";
      msg.dataset.task = call.task + "@" + call.step;
      var who = document.createElement("div");
      who.className = "who";
      who.textContent = "assistant, streaming: " + call.task + " in step " + call.step +
        (call.run === document.body.dataset.run ? "" : " of skill run " + call.run);
      var text = document.createElement("div");
      text.className = "text";
      text.textContent = call.text;
      msg.appendChild(who);
      msg.appendChild(text);
      list.appendChild(msg);
    });
    box.hidden = calls.length === 0;
  });
  source.addEventListener("run", function (ev) {
    window.sgLive.events += 1;
    var data = JSON.parse(ev.data);
    var body = document.body;
    var shown = Number(body.dataset.lastStep);
    if (data.status !== body.dataset.status) {
      source.close();
      window.location.reload();
      return;
    }
    if (data.last_step <= shown) { return; }
    body.dataset.lastStep = String(data.last_step);
    document.getElementById("last-step").textContent = String(data.last_step);
    var rows = document.getElementById("step-rows");
    if (!rows || rows.dataset.follow !== "1") { return; }
    fetchText(body.dataset.rows + "?after=" + shown + "&upto=" + data.last_step,
      function (html) { rows.insertAdjacentHTML("beforeend", html); });
    if (timeline) {
      fetchText(timeline.dataset.url + "?after=" + shown + "&upto=" + data.last_step,
        function (html) {
          timeline.insertAdjacentHTML("beforeend", html);
          if (!chosenByHand) { selectNewest(); }
        });
    }
  });
})();
"""

CSS: Final = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;
color:#1d1d1f;background:#fff}
header{padding:.6rem 1.5rem;border-bottom:1px solid #ddd;background:#f5f5f7}
.brand{font-weight:600;color:#1d1d1f;text-decoration:none}
main{padding:1rem 1.5rem;max-width:100%}
h1{font-size:1.4rem;margin:.2rem 0 1rem;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin-top:1.6rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%;table-layout:fixed}
th,td{border:1px solid #ddd;padding:.3rem .5rem;vertical-align:top;text-align:left;
overflow-wrap:anywhere}
th{background:#f5f5f7}
table.summary{max-width:60rem}table.summary th{width:9rem}
table.runs th{width:8%}table.runs th.c-run{width:30%}table.runs th.c-time{width:13%}
table.timeline th:nth-child(1){width:4rem}table.timeline th:nth-child(2){width:13rem}
table.timeline th:nth-child(3){width:10rem}table.timeline th:nth-child(5){width:12rem}
.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f5f5f7;padding:.4rem;margin:.2rem 0;font-size:.8rem;white-space:pre-wrap;
overflow-wrap:anywhere;max-height:24rem;overflow-y:auto}
code{font-size:.85rem;overflow-wrap:anywhere}
.muted{color:#6e7781}
.status{font-weight:600;white-space:nowrap;overflow-wrap:normal}.status-done{color:#1a7f37}.status-failed{color:#cf222e}
.status-interrupted{color:#9a6700}.status-running{color:#0969da}
.status-orphaned{color:#8250df}.status-cancelled{color:#6e7781}
.status-halted{color:#bc4c00}.status-pending{color:#57606a}
.filters{display:flex;gap:1rem;flex-wrap:wrap;margin-bottom:1rem;align-items:end}
.picture{overflow-x:auto;max-width:100%}
svg.graph{max-width:100%;height:auto}
svg.graph .node rect{fill:#fff;stroke:#8c959f;stroke-width:1.2}
svg.graph .node.start rect,svg.graph .node.end rect{fill:#f5f5f7}
svg.graph .node.join rect{fill:#f5f5f7;stroke-dasharray:3 2}
svg.graph .node.next rect{fill:#fff8c5;stroke:#bf8700;stroke-width:2.5;stroke-dasharray:4 2}
svg.graph .node.ran rect{fill:#dafbe1;stroke:#1a7f37;stroke-width:2.5}
svg.graph text{font-size:13px;text-anchor:middle;fill:#1d1d1f}
svg.graph text.detail{font-size:11px;fill:#57606a}
svg.graph .cluster rect{fill:#fbf8ff;stroke:#8250df;stroke-width:1;stroke-dasharray:4 3}
svg.graph text.cluster-label{font-size:11px;text-anchor:start;fill:#8250df}
svg.graph .link{fill:none;stroke:#8c959f;stroke-width:1.2}
svg.graph .link.conditional{stroke-dasharray:5 3}svg.graph .link.rule{stroke:#bf8700}
svg.graph .link.ran{stroke:#1a7f37;stroke-width:3}
svg.graph marker path{fill:#8c959f}svg.graph marker path.ran{fill:#1a7f37}
.call{margin:.3rem 0}.call>summary{cursor:pointer}
.chat{display:flex;flex-direction:column;gap:.3rem;margin:.3rem 0}
.msg{border:1px solid #ddd;border-radius:8px;padding:.3rem .6rem;max-width:90%}
.offered{margin:.3rem 0}.offered-tool{margin:.2rem 0 .2rem .6rem}
.offered-tool.mcp{border-left:3px solid #cf222e;padding-left:.4rem}
.untrusted{color:#cf222e;font-size:.75rem;font-weight:600}
.msg .who{font-size:.75rem;color:#57606a}.msg .text{white-space:pre-wrap;overflow-wrap:anywhere}
.role-user{align-self:flex-end;background:#ddf4ff}.role-assistant{background:#f6f8fa}
.role-system{background:#fff8c5}.role-tool{background:#fbefff}
.decision{margin:.3rem 0;padding:.2rem .4rem;border-left:3px solid #bf8700;background:#fff8c5}
.interrupt{border:1px solid #d4a72c;padding:.5rem 1rem;background:#fffbe6}
.answer label{display:block;margin:.4rem 0}.answer textarea,.answer input{width:100%}
.buttons{display:flex;gap:.5rem;flex-wrap:wrap}
.pager{margin:.5rem 0}
.live-output{border:1px solid #0969da;padding:.3rem 1rem;margin-top:1rem}
.live-output h2{margin-top:.4rem}
.live-call .text::after{content:"\\2588";color:#0969da}
table.runs tr.child>td:first-child{padding-left:1.5rem}
table.runs tr.depth-2>td:first-child{padding-left:2.5rem}
table.runs tr.depth-3>td:first-child{padding-left:3.5rem}.nest{color:#8250df}
details.child{margin:.3rem 0;border-left:3px solid #8250df;padding-left:.4rem}
details.child>summary{cursor:pointer}
table.nested{font-size:.85rem}
table.nested th:nth-child(1){width:3.4rem}table.nested th:nth-child(2){width:6.5rem}
table.nested th:nth-child(3){width:6rem}table.nested th:nth-child(5){width:6rem}
table.diff th.c-step{width:4rem}
table.diff tr.differs>td,table.diff tr.changes.differs>td{background:#fff8c5}
table.diff tr.only-a>td{background:#ffebe9}table.diff tr.only-b>td,table.diff tr.inserted>td{
background:#dafbe1}
table.diff tr.changes ul{margin:.1rem 0;padding-left:1.2rem;font-size:.85rem}
table.diff tr.changes li{overflow-wrap:anywhere;font-family:ui-monospace,monospace}
.shift{padding:.3rem .6rem;border-left:3px solid #0969da;background:#ddf4ff}
table.timeline .write pre{max-height:12rem}
.studio{display:grid;grid-template-columns:minmax(0,1.1fr) minmax(0,1fr);gap:1.2rem;
align-items:start}
.pane>h2:first-child{margin-top:.6rem}
.inspector{position:sticky;top:0;max-height:100vh;overflow-y:auto;border:1px solid #ddd;
padding:0 .8rem .6rem;background:#fcfcfd}
.inspector pre{max-height:28rem}
.inspector h3{font-size:.95rem;margin:.8rem 0 .3rem}
table.state-diff{font-size:.85rem}table.state-diff th:nth-child(1){width:28%}
table.state-diff th:nth-child(2){width:5.5rem}
table.state-diff td{font-family:ui-monospace,monospace}
table.state-diff tr.added td,table.state-diff tr.appended td{background:#dafbe1}
table.state-diff tr.removed td{background:#ffebe9}
table.state-diff tr.changed td{background:#fff8c5}
ol.tl{list-style:none;padding:0;margin:.3rem 0;max-height:32rem;overflow-y:auto}
ol.tl.nested{max-height:none;margin-left:.4rem}
li.tl-step{padding:.25rem .4rem;border-left:3px solid #d0d7de;margin:.15rem 0}
li.tl-step.selected{border-left-color:#0969da;background:#ddf4ff}
button.tl-select{font:inherit;font-weight:600;border:1px solid #d0d7de;border-radius:4px;
background:#fff;cursor:pointer;padding:0 .4rem}
.tl-events{display:inline-flex;flex-wrap:wrap;gap:.25rem;vertical-align:middle}
.ev{display:inline-block;font-size:.78rem;padding:0 .35rem;border-radius:10px;
border:1px solid #d0d7de;background:#f6f8fa;overflow-wrap:anywhere}
.ev code{font-size:.75rem}
.ev-node{border-color:#1a7f37;background:#dafbe1}.ev-llm{border-color:#0969da;background:#ddf4ff}
.ev-tool{border-color:#8250df;background:#fbefff}.ev-rule{border-color:#bf8700;background:#fff8c5}
.ev-interrupt{border-color:#cf222e;background:#ffebe9}.ev-skill{border-color:#8250df;
background:#fbefff}.ev-input{background:#f5f5f7}
details.tl-child{margin:.2rem 0 .1rem 1rem;border-left:3px solid #8250df;padding-left:.4rem}
details.tl-child>summary{cursor:pointer;font-size:.85rem}
.tl-child-head{margin:.2rem 0;font-size:.85rem}
svg.graph .node.selected rect{filter:drop-shadow(0 0 3px #0969da) drop-shadow(0 0 2px #0969da)}
table.runs tr.thread>th{background:#eef1f4;font-weight:600;text-align:left}
table.runs tr[data-thread]>td:first-child{border-left:3px solid #0969da}
ul.outcome li{overflow-wrap:anywhere;font-family:ui-monospace,monospace;font-size:.85rem}
"""
