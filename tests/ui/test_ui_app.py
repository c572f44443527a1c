"""The run console's pages, gate and actions, through Starlette's in-process test client.

Runs are real: the graphs of ``ui_graphs`` run on a SQLite store and the console reads that
store. Browser behaviour (live updates, clicks, layout) is in ``test_ui_browser.py``.
"""

from __future__ import annotations

import html
import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.errors import RunNotFoundError
from stargraph.examples.basics import mapreduce_graph
from stargraph.testing import Reply
from stargraph.ui import UiSettings, create_app
from tests.ui.ui_graphs import (
    GATES,
    HeldServer,
    approval_graph,
    letter_graph,
    letter_model,
    loop_graph,
    scripted_model,
    trip_graph,
)

LOCAL = "http://127.0.0.1:8765"


def _client(store: SqliteStore, apps: list[Any], **settings: Any) -> TestClient:
    app = create_app(store, graphs=apps, settings=UiSettings(**settings))
    return TestClient(app, base_url=settings.pop("base_url", LOCAL))


def _approval(store: SqliteStore, run_id: str = "order-1") -> Any:
    app = approval_graph().compile(store=store, services={"model": scripted_model()})
    app.invoke({"item": "widget", "api_key": "sk-live-0123456789"}, run_id=run_id)
    assert app.get_run(run_id).status == "interrupted"
    return app


def _wait_status(store: SqliteStore, run_id: str, status: str) -> None:
    deadline = time.monotonic() + 60
    while store.get_run(run_id).status != status:
        assert time.monotonic() < deadline, store.get_run(run_id)
        time.sleep(0.02)


def test_runs_list_filters_and_totals_tokens(store: SqliteStore) -> None:
    approval = _approval(store)
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 2}, run_id="loop-1")
    client = _client(store, [approval, loop])
    page = client.get("/")
    assert page.status_code == 200
    assert 'href="/runs/order-1"' in page.text
    assert 'href="/runs/loop-1"' in page.text
    row = re.search(r'<tr data-run="order-1">(.*?)</tr>', page.text)
    assert row is not None
    assert "interrupted" in row.group(1)
    assert ">150<" in row.group(1)  # 120 prompt + 30 completion tokens of the model call
    only_done = client.get("/?status=done").text
    assert "loop-1" in only_done
    assert "order-1" not in only_done
    only_approval = client.get("/?graph=approval").text
    assert "order-1" in only_approval
    assert "/runs/loop-1" not in only_approval
    future = client.get("/?since=2999-01-01T00:00").text
    assert "/runs/order-1" not in future


def test_run_page_shows_chat_path_masking_and_durations(store: SqliteStore) -> None:
    approval = _approval(store)
    client = _client(store, [approval])
    page = client.get("/runs/order-1")
    assert page.status_code == 200
    text = page.text
    # The model conversation is rendered as chat messages, escaped, not as a JSON dump.
    assert 'class="msg role-system"' in text
    assert 'class="msg role-user"' in text
    assert "Write a note for one widget." in text
    assert "One widget, please &lt;b&gt;soon&lt;/b&gt;." in text
    assert '"role": "user"' not in text
    # The credential in the state is masked wherever it would appear.
    assert "sk-live-0123456789" not in text
    assert "[redacted:api_key]" in text
    state = client.get("/runs/order-1/state?step=1")
    assert "sk-live-0123456789" not in state.text
    assert "[redacted:api_key]" in state.text
    # The path that ran: START -> draft is highlighted, finish (not run yet) is not.
    assert re.search(r'<g class="node node ran" data-node="draft">', text)
    assert re.search(r'<g class="node node" data-node="finish">', text)
    assert 'class="link solid ran"' in text
    assert re.search(r"1x, [\d,]+ ms", text)  # per-node count and time
    assert "send this order?" in text
    assert 'id="approve"' in text


def test_send_payloads_and_rule_free_steps_render(store: SqliteStore) -> None:
    app = mapreduce_graph().compile(store=store)
    app.invoke({"limit": 3}, run_id="mr")
    text = _client(store, [app]).get("/runs/mr").text
    assert text.count("Send payload") == 3
    assert "work[2]" in text


def test_a_long_run_is_paginated(store: SqliteStore) -> None:
    app = loop_graph().compile(store=store, max_steps=500)
    app.invoke({"limit": 120}, run_id="long")
    client = _client(store, [app])
    last = client.get("/runs/long").text
    shown = [int(s) for s in re.findall(r'<tr class="step" id="step-(\d+)"', last)]
    assert shown == list(range(71, 121))  # the newest 50 steps
    first = client.get("/runs/long?page=0").text
    assert first.count('<tr class="step"') == 50
    assert 'href="/runs/long?page=2"' in first
    rows = client.get("/runs/long/rows?after=110&upto=115").text
    assert [int(s) for s in re.findall(r'data-step="(\d+)"', rows)] == [111, 112, 113, 114, 115]


def test_non_loopback_bind_without_token_refuses_everything(store: SqliteStore) -> None:
    client = _client(store, [], host="0.0.0.0")
    response = client.get("/", headers={"host": "10.0.0.5:8765"})
    assert response.status_code == 403
    assert "--token" in response.text


def test_token_is_required_on_every_request(store: SqliteStore) -> None:
    _approval(store)
    client = _client(store, [], host="0.0.0.0", token="s3cret-token")
    for path in ("/", "/runs/order-1", "/runs/order-1/events", "/static/ui.js"):
        assert client.get(path).status_code == 401, path
    wrong = client.get("/", headers={"authorization": "Bearer s3cret-tokeX"})
    assert wrong.status_code == 401
    ok = client.get("/", headers={"authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200
    assert "order-1" in ok.text
    # A link with ?token= sets the cookie and drops the token from the address bar.
    fresh = _client(store, [], host="0.0.0.0", token="s3cret-token")
    hop = fresh.get("/?token=s3cret-token&status=interrupted", follow_redirects=False)
    assert hop.status_code == 303
    assert hop.headers["location"] == "/?status=interrupted"
    assert fresh.get("/runs/order-1").status_code == 200  # the cookie carries it now


def test_loopback_console_refuses_foreign_host_names(store: SqliteStore) -> None:
    client = _client(store, [])
    assert client.get("/").status_code == 200
    rebound = client.get("/", headers={"host": "evil.example:8765"})
    assert rebound.status_code == 403


def _form(client: TestClient, run_id: str) -> dict[str, str]:
    page = client.get(f"/runs/{run_id}").text
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match is not None
    return {"csrf": match.group(1)}


def test_cross_site_post_is_refused(store: SqliteStore) -> None:
    approval = _approval(store)
    client = _client(store, [approval])
    form = {**_form(client, "order-1"), "action": "approve"}
    foreign = client.post(
        "/runs/order-1/answer", data=form, headers={"origin": "http://evil.example"}
    )
    assert foreign.status_code == 403
    assert "cross-site" in foreign.text
    no_origin = client.post("/runs/order-1/answer", data=form)
    assert no_origin.status_code == 403
    # Same origin but no CSRF token (a form forged elsewhere and replayed) is refused too.
    forged = client.post(
        "/runs/order-1/answer", data={"action": "approve"}, headers={"origin": LOCAL}
    )
    assert forged.status_code == 403
    assert "CSRF" in forged.text
    assert store.get_run("order-1").status == "interrupted"


def test_approve_resumes_the_run(store: SqliteStore) -> None:
    approval = _approval(store)
    client = _client(store, [approval])
    form = {**_form(client, "order-1"), "action": "approve", "reason": "fine"}
    response = client.post(
        "/runs/order-1/answer", data=form, headers={"origin": LOCAL}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    _wait_status(store, "order-1", "done")
    assert approval.get_state("order-1").answer == {"approved": True, "reason": "fine"}


def test_edit_and_reject_answers(store: SqliteStore) -> None:
    approval = _approval(store, "order-2")
    _approval(store, "order-3")
    client = _client(store, [approval])
    edit = {**_form(client, "order-2"), "action": "edit", "value": '{"amount": 7}'}
    response = client.post("/runs/order-2/answer", data=edit, headers={"origin": LOCAL})
    assert response.status_code == 200
    reject = {**_form(client, "order-3"), "action": "reject", "reason": "too dear"}
    client.post("/runs/order-3/answer", data=reject, headers={"origin": LOCAL})
    _wait_status(store, "order-2", "done")
    _wait_status(store, "order-3", "done")
    assert approval.get_state("order-2").answer == {"approved": True, "value": {"amount": 7}}
    assert approval.get_state("order-3").answer == {"approved": False, "reason": "too dear"}


def test_read_only_hides_and_refuses_actions(store: SqliteStore) -> None:
    approval = _approval(store)
    client = _client(store, [approval], read_only=True)
    page = client.get("/runs/order-1").text
    assert 'id="approve"' not in page
    assert "send this order?" in page
    refused = client.post(
        "/runs/order-1/answer", data={"action": "approve"}, headers={"origin": LOCAL}
    )
    assert refused.status_code == 403


def test_event_stream_reports_new_steps(store: SqliteStore) -> None:
    gate = GATES["sse"] = threading.Semaphore(0)
    app = loop_graph().compile(store=store)
    worker = threading.Thread(
        target=app.invoke, args=({"limit": 2, "gate": "sse"},), kwargs={"run_id": "live"}
    )
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while True:  # the run exists once step 0 is committed
            try:
                store.get_run("live")
                break
            except RunNotFoundError:  # not stored yet
                assert time.monotonic() < deadline
                time.sleep(0.02)
        client = _client(store, [app], poll_s=0.05)
        events: list[dict[str, Any]] = []
        with client.stream("GET", "/runs/live/events") as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if len(events) == 1:
                        gate.release()  # let step 1 commit, then step 2
                        gate.release()
                    if events[-1]["status"] == "done":
                        break
        steps = [e["last_step"] for e in events]
        assert steps == sorted(steps)
        assert steps[-1] == 2
        assert events[0]["status"] == "running"
    finally:
        gate.release(2)
        worker.join(60)
    assert not worker.is_alive()


def _sse(stream: Any) -> Iterator[tuple[str, Any]]:
    """``(event, data)`` of a server-sent event stream."""
    event = "message"
    for line in stream.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            event = "message"


LETTER = "Dear Ada, sk-live-0123456789 ships on Monday. Regards, Bob"
SHOWN = LETTER.replace("sk-live-0123456789", "[redacted:shop_key]")  # as the page shows it


def test_tokens_of_a_run_the_console_continues_stream_to_its_page(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STARGRAPH_SECRET_SHOP_KEY", "sk-live-0123456789")
    # The server sends the role chunk and three words (the last a secret), then holds.
    with HeldServer([Reply.text(LETTER)], hold_after=4) as server:
        app = letter_graph().compile(store=store, services={"model": letter_model(server)})
        app.invoke({"to": "Ada"}, run_id="letter-1")
        # A stream lasts 30 s: a console that never sends tokens fails the test, not hangs it.
        client = _client(store, [app], poll_s=0.05, stream_s=30.0)
        page = client.get("/runs/letter-1").text
        assert 'id="live-output"' in page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        answered = _post(
            client, "/runs/letter-1/answer", {"csrf": csrf.group(1), "action": "approve"}
        )
        assert answered.status_code == 303
        assert server.held.wait(60), "the model call never started"
        partial: list[Any] = []
        with client.stream("GET", "/runs/letter-1/events") as stream:
            for event, data in _sse(stream):
                if event == "tokens" and data:
                    partial = data
                    break
        # The reply so far, masked, while the model call is still open.
        assert partial == [
            {"run": "letter-1", "step": 2, "task": "write", "text": "Dear Ada, [redacted:shop_key]"}
        ]
        assert store.get_run("letter-1").status == "running"
        tokens: list[str] = []
        with client.stream("GET", "/runs/letter-1/events") as stream:
            for event, data in _sse(stream):
                if event != "tokens":
                    continue
                tokens.append(data[0]["text"] if data else "")
                if len(tokens) == 1:
                    server.release.set()  # the rest of the reply streams
                elif not data:
                    break  # the step committed: its text left the live box
        _wait_status(store, "letter-1", "done")
    assert app.get_state("letter-1").text == LETTER
    # The text grew as tokens came (a stream that woke once for several shows them at once)
    # and was dropped once its step committed: the step's record has the whole reply.
    shown = [t for t in tokens if t]
    assert shown[0] == "Dear Ada, [redacted:shop_key]"
    assert all(SHOWN.startswith(t) for t in shown)
    assert [len(t) for t in shown] == sorted({len(t) for t in shown})
    assert tokens[-1] == ""
    web = client.app
    assert isinstance(web, Starlette)
    assert web.state.console.live.of("letter-1") == []


# --------------------------------------------------------------------------- fork, replay


def _post(client: TestClient, path: str, form: dict[str, str]) -> Any:
    return client.post(path, data=form, headers={"origin": LOCAL}, follow_redirects=False)


def _fork_form(client: TestClient, run_id: str, step: int) -> dict[str, str]:
    page = client.get(f"/runs/{run_id}/fork?step={step}")
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    state = re.search(
        r'<textarea name="state" id="fork-state" rows="16">(.*?)</textarea>', page.text, re.S
    )
    assert csrf is not None
    assert state is not None
    return {"csrf": csrf.group(1), "step": str(step), "state": html.unescape(state.group(1))}


def _edited(form: dict[str, str], **changes: Any) -> dict[str, str]:
    state = json.loads(form["state"])
    state.update(changes)
    return {**form, "state": json.dumps(state)}


def test_fork_from_a_step_with_an_edited_state_then_continue_it(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 3}, run_id="loop-1")
    client = _client(store, [loop])
    page = client.get("/runs/loop-1").text
    assert 'href="/runs/loop-1/fork?step=1"' in page
    form = _fork_form(client, "loop-1", 1)
    assert json.loads(form["state"]) == {
        "gate": "",
        "limit": 3,
        "log": ["tick 1"],
        "n": 1,
        "tag": "",
    }
    response = _post(client, "/runs/loop-1/fork", {**_edited(form, limit=5), "action": "fork"})
    assert response.status_code == 303, response.text
    new_id = response.headers["location"].removeprefix("/runs/")
    assert new_id.startswith("loop-1~fork1-")
    fork = store.get_run(new_id)
    assert (fork.parent_run_id, fork.parent_step, fork.status) == ("loop-1", 1, "pending")
    # Only the changed field is written, as the fork's step 2, by __update__.
    update = store.get_steps(new_id, start=2, end=2)[0]
    assert [(w.node, w.writes) for w in update.writes] == [("__update__", {"limit": 5})]
    fork_page = client.get(f"/runs/{new_id}").text
    assert 'id="continue"' in fork_page
    assert f'href="/diff?a=loop-1&amp;b={new_id}"' in fork_page
    csrf = re.search(r'name="csrf" value="([^"]+)"', fork_page)
    assert csrf is not None
    go = _post(client, f"/runs/{new_id}/continue", {"csrf": csrf.group(1)})
    assert go.status_code == 303, go.text
    _wait_status(store, new_id, "done")
    state = loop.get_state(new_id)
    assert (state.n, state.limit) == (5, 5)
    assert state.log == [f"tick {i}" for i in range(1, 6)]
    assert loop.get_state("loop-1").n == 3  # the parent is untouched
    # Once continued it is no longer offered.
    assert 'id="continue"' not in client.get(f"/runs/{new_id}").text


def test_counterfactual_replay_is_compiled_graph_replay(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 3}, run_id="loop-1")
    expected = loop.replay("loop-1", from_step=2, mutate={"limit": 4}, new_run_id="by-api")
    client = _client(store, [loop])
    form = _edited(_fork_form(client, "loop-1", 1), limit=4)
    response = _post(client, "/runs/loop-1/fork", {**form, "action": "counterfactual"})
    assert response.status_code == 303, response.text
    new_id = response.headers["location"].removeprefix("/runs/")
    assert new_id.startswith("loop-1~from2-")
    _wait_status(store, new_id, "done")
    assert loop.get_state(new_id) == expected
    ours = [(s.step, [(w.node, w.writes) for w in s.writes]) for s in store.get_steps(new_id)]
    theirs = [(s.step, [(w.node, w.writes) for w in s.writes]) for s in store.get_steps("by-api")]
    assert ours == theirs


def test_fork_writes_through_reducers_and_keeps_masked_secrets(store: SqliteStore) -> None:
    approval = _approval(store)
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 2}, run_id="loop-1")
    client = _client(store, [approval, loop])
    # The state shown masks the key; leaving it as shown does not write the placeholder.
    form = _fork_form(client, "order-1", 1)
    assert json.loads(form["state"])["api_key"] == "[redacted:api_key]"
    response = _post(
        client, "/runs/order-1/fork", {**_edited(form, item="gadget"), "action": "fork"}
    )
    assert response.status_code == 303, response.text
    new_id = response.headers["location"].removeprefix("/runs/")
    forked = approval.get_state(new_id)
    assert (forked.item, forked.api_key) == ("gadget", "sk-live-0123456789")
    # A reducer field cannot be set whole; its writes box goes through the reducer.
    loop_form = _fork_form(client, "loop-1", 1)
    whole = _post(client, "/runs/loop-1/fork", {**_edited(loop_form, log=["x"]), "action": "fork"})
    assert whole.status_code == 400
    assert "'log' merges writes through a reducer" in whole.text
    added = _post(
        client, "/runs/loop-1/fork", {**loop_form, "writes": '{"log": ["note"]}', "action": "fork"}
    )
    assert added.status_code == 303, added.text
    assert loop.get_state(added.headers["location"].removeprefix("/runs/")).log == [
        "tick 1",
        "note",
    ]


def test_fork_refuses_bad_edits(store: SqliteStore) -> None:
    approval = _approval(store)
    client = _client(store, [approval])
    form = _fork_form(client, "order-1", 1)
    cases = {
        "not JSON": ({**form, "state": "{"}, "not JSON"),
        "unknown field": (_edited(form, colour="red"), "['colour'], which are not fields"),
        "masked kept inside a change": (
            _edited(form, answer={"key": "[redacted:api_key]"}),
            "still holds a masked value",
        ),
        "bad type": (_edited(form, done="not a bool"), "done"),
        "step out of range": ({**form, "step": "99"}, "there is no step 99"),
    }
    for what, (bad, message) in cases.items():
        response = _post(client, "/runs/order-1/fork", {**bad, "action": "fork"})
        assert response.status_code == 400, what
        assert message in response.text, (what, response.text)
    assert [r.run_id for r in store.list_runs()] == ["order-1"]  # nothing was made


def test_fork_actions_need_same_origin_csrf_and_no_read_only(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 2}, run_id="loop-1")
    client = _client(store, [loop])
    form = {**_fork_form(client, "loop-1", 1), "action": "counterfactual"}
    foreign = client.post("/runs/loop-1/fork", data=form, headers={"origin": "http://evil.example"})
    assert foreign.status_code == 403
    forged = _post(client, "/runs/loop-1/fork", {**form, "csrf": "guessed"})
    assert forged.status_code == 403
    assert "CSRF" in forged.text
    read_only = _client(store, [loop], read_only=True)
    assert "fork / replay from here" not in read_only.get("/runs/loop-1").text
    form_page = read_only.get("/runs/loop-1/fork?step=1")
    assert form_page.status_code == 403
    assert "--read-only" in form_page.text
    assert _post(read_only, "/runs/loop-1/fork", form).status_code == 403
    # A console without the graph shows the run but offers no fork.
    blind = _client(store, [])
    assert "fork / replay from here" not in blind.get("/runs/loop-1").text
    assert "does not have the graph" in blind.get("/runs/loop-1/fork?step=1").text
    assert [r.run_id for r in store.list_runs()] == ["loop-1"]


# --------------------------------------------------------------------------- diff


def _pairs(page: str) -> list[tuple[str, str, str]]:
    return re.findall(r'<tr class="pair ([a-z-]+)" data-a="(\d*)" data-b="(\d*)">', page)


def test_diff_aligns_a_counterfactual_after_its_inserted_update(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 3}, run_id="a")
    # As `stargraph replay a --from-step 2 --set n=5` does: steps 0..1 copied, the update is
    # step 2 of b, and b's step 3 runs what a ran as its step 2.
    loop.replay("a", from_step=2, mutate={"n": 5}, new_run_id="b")
    client = _client(store, [loop])
    page = client.get("/diff?a=a&b=b").text
    assert _pairs(page) == [
        ("same", "0", "0"),
        ("same", "1", "1"),
        ("inserted", "", "2"),
        ("differs", "2", "3"),  # tick after step 1 in both: n 2 vs 6; by number it was 2 vs 2
        ("only-a", "3", ""),
    ]
    assert "B is a fork of A after step 1 with an update as its step 2" in page
    assert "tick n: A = 2  B = 6" in page
    assert "tick log: A = [&quot;tick 2&quot;]  B = [&quot;tick 6&quot;]" in page
    assert "final state n: A = 3  B = 6" in page
    # The same pair the other way round: A is now the fork.
    reverse = client.get("/diff?a=b&b=a").text
    assert ("differs", "3", "2") in _pairs(reverse)
    assert ("inserted", "2", "") in _pairs(reverse)
    assert "A is a fork of B after step 1" in reverse


def test_diff_of_identical_runs_folds_and_does_not_shift(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 4}, run_id="a")
    loop.resume(loop.fork("a", 1, new_run_id="b"))  # no update: nothing inserted
    page = _client(store, [loop]).get("/diff?a=a&b=b").text
    assert 'id="verdict">The runs are the same.<' in page
    assert "5 steps the same" in page
    assert "is a fork of" not in page


def _diff_pairs(page: str) -> list[tuple[str, str]]:
    return re.findall(r'<tr class="pair [a-z-]+" data-a="(\d*)" data-b="(\d*)">', page)


def test_a_long_diff_is_paginated(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store, max_steps=300)
    loop.invoke({"limit": 120}, run_id="a")
    loop.invoke({"limit": 120, "tag": "!"}, run_id="b")  # every step differs
    client = _client(store, [loop])
    first = client.get("/diff?a=a&b=b").text
    assert _diff_pairs(first) == [(str(n), str(n)) for n in range(50)]
    assert 'id="verdict">121 of 121 aligned steps differ.<' in first
    assert "(121 lines, 3 pages)" in first
    assert 'href="/diff?a=a&amp;b=b&amp;page=2">101-121</a>' in first
    last = client.get("/diff?a=a&b=b&page=2").text
    assert _diff_pairs(last) == [(str(n), str(n)) for n in range(100, 121)]
    assert 'id="verdict">121 of 121 aligned steps differ.<' in last  # over all pages
    assert '<a class="first-change" href="/diff?a=a&amp;b=b&amp;page=0">' in last
    assert client.get("/diff?a=a&b=b&page=99").text == last  # past the end: the last page


def test_a_long_diffs_pages_count_a_fold_of_identical_steps_as_one_line(
    store: SqliteStore,
) -> None:
    loop = loop_graph().compile(store=store, max_steps=300)
    loop.invoke({"limit": 150}, run_id="a")
    loop.fork("a", 100, update={"tag": "!"}, new_run_id="b")
    client = _client(store, [loop])
    before = client.get("/diff?a=a&b=b").text  # the fork not run yet: steps of A only
    assert ("101", "") in _diff_pairs(before)
    loop.resume("b")  # a diff is kept while neither run changes: this one did
    # 52 lines: steps 0-100 folded, the fork's update (inserted), then 50 differing pairs.
    page = client.get("/diff?a=a&b=b").text
    assert '<tr class="pair same-run"><td class="num">0-100</td>' in page
    pairs = _diff_pairs(page)
    assert pairs[0] == ("", "101")
    assert pairs[1:] == [(str(n), str(n + 1)) for n in range(101, 149)]
    assert "(52 lines, 2 pages)" in page
    rest = client.get("/diff?a=a&b=b&page=1").text
    assert _diff_pairs(rest) == [("149", "150"), ("150", "151")]


def test_diff_masks_secrets_and_reports_missing_runs(store: SqliteStore) -> None:
    approval = _approval(store)
    approval.invoke({"item": "gadget", "api_key": "sk-live-0123456789"}, run_id="order-2")
    client = _client(store, [approval])
    page = client.get("/diff?a=order-1&b=order-2")
    assert page.status_code == 200
    assert "sk-live-0123456789" not in page.text
    assert "input item: A = &quot;widget&quot;  B = &quot;gadget&quot;" in page.text
    assert _pairs(page.text)[0] == ("differs", "0", "0")
    missing = client.get("/diff?a=order-1&b=nope")
    assert missing.status_code == 404
    assert "nope" in missing.text
    assert 'action="/diff"' in client.get("/diff").text
    assert 'href="/diff"' in client.get("/").text


# --------------------------------------------------------------------------- child runs


def _child_urls(page: str) -> list[str]:
    return re.findall(r'<details class="child" data-url="([^"]+)">', page)


def test_child_runs_are_nested_under_the_step_that_ran_them(store: SqliteStore) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({}, run_id="t1")
    client = _client(store, [trip])
    page = client.get("/runs/t1").text
    assert _child_urls(page) == ["/runs/t1%3A%3Ahotel%401.0/nested"]
    step_2 = re.search(r'<tr class="step" id="step-2".*?</tr>', page, re.S)
    assert step_2 is not None
    assert "t1::hotel@1.0" in step_2.group(0)  # under the hotel write of step 2
    nested = client.get("/runs/t1%3A%3Ahotel%401.0/nested")
    assert nested.status_code == 200
    steps = re.findall(r'<tr class="step" id="step-(\d+)"', nested.text)
    assert steps == ["0", "1", "2"]
    assert "look at hotels in Oslo" in nested.text
    assert "booked Oslo" in nested.text
    assert 'href="/runs/t1%3A%3Ahotel%401.0">open this run' in nested.text
    assert "fork / replay from here" not in nested.text
    # The child's own page names its parent and draws the skill's graph from the parent's.
    child = client.get("/runs/t1::hotel@1.0").text
    assert 'skill run of</th><td><a href="/runs/t1">t1</a>' in child
    ran = re.findall(r'<g class="node node ran" data-node="([^"]+)">', child)
    assert sorted(ran) == ["book", "look"]
    state = client.get("/runs/t1%3A%3Ahotel%401.0/state?step=2").text
    assert '"booked": true' in state
    assert client.get("/runs/t1%3A%3Aother%402.0/nested").status_code == 404


def test_a_waiting_child_run_shows_under_the_next_task(store: SqliteStore) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({"confirm": True}, run_id="t2")
    client = _client(store, [trip])
    page = client.get("/runs/t2").text
    assert _child_urls(page) == ["/runs/t2%3A%3Ahotel%401.0/nested"]
    task = re.search(r'<div class="task"><code>hotel</code>(.*?)</div>', page, re.S)
    assert task is not None
    assert "t2::hotel@1.0" in task.group(1)
    nested = client.get("/runs/t2%3A%3Ahotel%401.0/nested").text
    assert "status-interrupted" in nested


def test_a_fork_shows_the_child_runs_of_its_copied_steps(store: SqliteStore) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({}, run_id="t1")
    trip.resume(trip.fork("t1", 2, update={"city": "Bergen"}, new_run_id="t1b"))
    trip.resume(trip.fork("t1", 1, update={"city": "Bergen"}, new_run_id="t1c"))
    client = _client(store, [trip])
    # Step 2 of t1b is a copy: its hotel ran in t1, whose child run holds its steps.
    assert _child_urls(client.get("/runs/t1b").text) == ["/runs/t1%3A%3Ahotel%401.0/nested"]
    # t1c re-ran hotel itself, in its step 3 (after its update, step 2): its first run there.
    assert _child_urls(client.get("/runs/t1c").text) == ["/runs/t1c%3A%3Ahotel%401.0/nested"]
    assert "booked Bergen" in client.get("/runs/t1c%3A%3Ahotel%401.0/nested").text
