"""SIGKILL of ``stargraph serve`` mid-run: the next server on the same database resumes the
run from its last committed step, and a stream reconnecting with ``Last-Event-ID``
continues from its last event, with no event lost or sent twice.

Both servers are the CLI in processes of their own (``stargraph serve ... --db``), so the
kill leaves what a crash leaves: a run row ``running`` under a dead owner, a stargraph run
``running`` under a dead lease."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.serve.support import DEADLINE_S, InProcess, sse


def test_issue50_sigkill_mid_run_resumes_on_restart_and_the_stream_continues(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "runs.db")
    gate = tmp_path / "gate"
    first = InProcess("tests/serve/graphs.py:held", "--db", db, "--workers", "1")
    try:
        with httpx.Client(base_url=first.url, timeout=DEADLINE_S) as http:
            tid = http.post("/threads", json={}).json()["thread_id"]
            body = {"assistant_id": "held", "input": {"gate": str(gate)}, "stream_mode": "updates"}
            lines: list[str] = []
            with http.stream("POST", f"/threads/{tid}/runs/stream", json=body) as res:
                location = res.headers["location"]
                for line in res.iter_lines():
                    lines.append(line)
                    if any(e == "updates" and "first" in d for _, e, d in sse(lines)):
                        break  # step 1 is committed; `hold` waits for the gate
        before = sse(lines)
        first.kill()
    finally:
        first.close()
    gate.touch()
    second = InProcess("tests/serve/graphs.py:held", "--db", db, "--workers", "1")
    try:
        with httpx.Client(base_url=second.url, timeout=DEADLINE_S) as http:
            last = str(before[-1][0])
            with http.stream("GET", location, headers={"Last-Event-ID": last}) as res:
                after = sse([*res.iter_lines(), ""])
            with http.stream("GET", location) as res:
                whole = sse([*res.iter_lines(), ""])
            base = location.partition("?")[0]
            with http.stream("GET", base) as res:  # every mode
                every = [i for i, _, _ in sse([*res.iter_lines(), ""])]
            run = http.get(base.removesuffix("/stream")).json()
            state = http.get(f"/threads/{tid}/state").json()
    finally:
        second.close()
    assert before + after == whole, "an event was lost or sent twice"
    assert every == list(range(len(every))), "the stored events have a gap"
    updates = [json.loads(d) for _, e, d in before + after if e == "updates"]
    assert [next(iter(u)) for u in updates] == ["first", "hold", "after"]
    assert run["status"] == "success"
    assert run["stargraph"]["attempts"] == 2  # claimed by the killed server, then by the next
    assert state["values"]["log"] == ["first", "hold", "after"]  # `first` ran once
