"""One ASGI app served by uvicorn in a thread of the test, on a free loopback port.

``stargraph serve`` (``tests/serve``), the console (``tests/ui``) and the console over
PostgreSQL (``tests/postgres``) are all served this way: port 0, the address read back from
the bound socket, so tests never race for a port. Waits have a deadline that only catches a
hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

import uvicorn

DEADLINE_S: Final = 60.0


class UvicornThread:
    """``app`` served by uvicorn in a daemon thread; ``url`` is ``http://127.0.0.1:PORT``.

    ``before_stop`` runs first in :meth:`close` (the console sets its closing flag there, so
    its event streams end and uvicorn's graceful shutdown does not wait on them)."""

    def __init__(
        self,
        app: Any,
        *,
        before_stop: Callable[[], None] | None = None,
        **config: Any,
    ) -> None:
        self.app = app
        self._before_stop = before_stop
        options: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "log_level": "warning"}
        options.update(config)
        self.server = uvicorn.Server(uvicorn.Config(app, **options))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + DEADLINE_S
        while not self.server.started:
            assert self.thread.is_alive(), "uvicorn stopped before it started"
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        """Stop serving and wait for the thread (it must stop within the deadline)."""
        if self._before_stop is not None:
            self._before_stop()
        self.server.should_exit = True
        self.thread.join(DEADLINE_S)
        assert not self.thread.is_alive(), "uvicorn did not stop"
