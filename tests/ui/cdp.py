"""A small Chrome DevTools Protocol driver for Debian's ``chromium`` (headless, offline).

No selenium, no Playwright browser download: chromium is started with
``--remote-debugging-port=0``, prints its websocket address on stderr, and is driven over
that websocket (``websockets``' sync client). Every wait is a deadline-bounded poll of a
condition in the page, never a sleep guessing how fast the machine is.
"""

from __future__ import annotations

import base64
import contextlib
import json
import queue
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect

DEADLINE_S = 60.0
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class Browser:
    """One headless chromium with one page (1280x800), collecting console errors."""

    def __init__(self, chromium: str, profile: Path) -> None:
        self._stack = contextlib.ExitStack()
        self.process = subprocess.Popen(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "--window-size=1280,800",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        lines: queue.Queue[str] = queue.Queue()
        assert self.process.stderr is not None
        stderr = self.process.stderr

        def pump() -> None:
            for line in stderr:
                lines.put(line)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + DEADLINE_S
        url = None
        seen: list[str] = []
        while url is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"chromium printed no DevTools address: {''.join(seen)[-2000:]}"
            try:
                line = lines.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                assert self.process.poll() is None, "".join(seen)[-2000:]
                continue
            seen.append(line)
            match = _LISTENING.search(line)
            if match:
                url = match.group(1)
        # Entered as a context manager: the form websockets asks for from 17.1 on.
        self.ws: ClientConnection = self._stack.enter_context(
            connect(url, max_size=None, open_timeout=DEADLINE_S)
        )
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = False
    ) -> Any:
        """Send one command and return its result (events seen meanwhile are kept)."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + DEADLINE_S
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no answer to {method}"
            reply = json.loads(self.ws.recv(timeout=remaining))
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def eval(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=True,
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str) -> Any:
        """Poll ``expression`` until it is truthy (up to the deadline); return its value."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                value = self.eval(expression)
            except AssertionError:  # the page is navigating: its context went away
                value = None
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def open(self, url: str) -> None:
        """Navigate to ``url`` and wait until the page has loaded."""
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for(
            f"location.href === {json.dumps(url)} && document.readyState === 'complete'",
            f"{url} to load",
        )

    def click_and_wait_navigation(self, selector: str) -> None:
        """Click ``selector`` and wait until a new document has loaded."""
        self.eval("window.__sgOld = true")
        self.eval(f"document.querySelector({json.dumps(selector)}).click()")
        self.wait_for(
            "window.__sgOld === undefined && document.readyState === 'complete'",
            f"the page after clicking {selector}",
        )

    def screenshot(self, path: Path) -> Path:
        """A 1280x800 PNG of the viewport."""
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def overflowing(self) -> list[str]:
        """Elements that stick out past the right edge of the 1280 px viewport."""
        value = self.eval(
            """(() => {
              const out = [];
              const limit = document.documentElement.clientWidth + 1;
              if (document.documentElement.scrollWidth > limit) {
                out.push('document scrollWidth ' + document.documentElement.scrollWidth);
              }
              for (const el of document.querySelectorAll('body *')) {
                const r = el.getBoundingClientRect();
                if (r.width > 0 && r.right > limit) {
                  out.push(el.tagName + '.' + el.className + ' right=' + Math.round(r.right));
                }
              }
              return out.slice(0, 20);
            })()"""
        )
        return list(value)

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads the page logged so far."""
        self.eval("1")  # flush events that arrived before this call
        out = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
            ):
                out.append(json.dumps(params.get("args", []))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                out.append(f"{entry.get('text')} {entry.get('url', '')}")
        return out

    def close(self) -> None:
        """Stop the browser."""
        try:
            self._stack.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            pump = getattr(self, "_pump", None)
            if pump is not None:
                pump.join(DEADLINE_S)  # stderr reaches EOF once chromium has exited
            if self.process.stderr is not None:
                self.process.stderr.close()


def check_page(browser: Browser, shot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No console error, nothing past the right edge, and a screenshot kept."""
    errors = browser.console_errors()
    assert errors == [], errors
    wide = browser.overflowing()
    assert wide == [], wide
    browser.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with capsys.disabled():
        print(f"\nconsole screenshot: {shot}")
