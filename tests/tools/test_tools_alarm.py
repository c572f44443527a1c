"""Sync Python bodies without write/external effects run inline on the main thread, stopped
at their deadline by an interval timer; writers and other threads keep the worker thread."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from stargraph.errors import ToolTimeoutError
from stargraph.tools import Arbiter, ToolCall, tool
from stargraph.tools._workers import alarm_available, call_with_alarm

ArbiterFactory = Callable[..., Arbiter]  # the make_arbiter fixture (conftest.py)

RAN: dict[str, Any] = {}


@tool(id="demo.stuck@1.0.0", description="Loops past its deadline.", timeout_s=0.2)
def stuck() -> str:
    RAN["thread"] = threading.current_thread().name
    time.sleep(5)
    RAN["finished"] = True  # never reached: the timer stops the body
    return "late"


@tool(id="demo.echo@1.0.0", description="Echo.", side_effect="read")
def echo(text: str) -> str:
    RAN["echo_thread"] = threading.current_thread().name
    return text


@tool(id="demo.write@1.0.0", description="Writes.", side_effect="write")
def write(text: str) -> str:
    RAN["write_thread"] = threading.current_thread().name
    return text


def test_an_overrunning_read_only_body_is_really_stopped(make_arbiter: ArbiterFactory) -> None:
    RAN.clear()
    arbiter = make_arbiter(stuck)
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError, match=r"ran longer than 0\.2s"):
        arbiter.dispatch(ToolCall(tool="demo.stuck"))
    # The body would sleep 5 s; a bound far from both 0.2 s and 5 s holds on a busy machine.
    assert time.monotonic() - started < 3.0
    time.sleep(0.3)
    assert "finished" not in RAN  # stopped, not merely abandoned on a thread
    assert RAN["thread"] == threading.main_thread().name
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # handler restored
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # timer disarmed


def test_inline_only_for_effect_free_bodies_on_the_main_thread(
    make_arbiter: ArbiterFactory,
) -> None:
    RAN.clear()
    arbiter = make_arbiter(echo, write)
    assert arbiter.dispatch(ToolCall(tool="demo.echo", args={"text": "a"})).payload == "a"
    assert arbiter.dispatch(ToolCall(tool="demo.write", args={"text": "b"})).payload == "b"
    assert RAN["echo_thread"] == threading.main_thread().name
    assert RAN["write_thread"] != threading.main_thread().name  # writers keep the worker
    box: dict[str, Any] = {}

    def other() -> None:
        box["available"] = alarm_available()
        box["result"] = arbiter.dispatch(ToolCall(tool="demo.echo", args={"text": "c"}))

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert box["available"] is False
    assert box["result"].payload == "c"
    assert RAN["echo_thread"] != thread.name  # ran on a worker, not inline on `other`


def test_a_foreign_sigalrm_handler_is_left_alone() -> None:
    def mine(signum: int, frame: object) -> None:
        return None

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        assert alarm_available() is False
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert call_with_alarm(lambda: 41 + 1, 1.0) == 42
