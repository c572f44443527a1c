"""One ASGI app served by uvicorn in a thread of the test, on a free loopback port.

``stargraph serve`` (``tests/serve``), the console (``tests/ui``) and the console over
PostgreSQL (``tests/postgres``) are all served this way: a socket on port 0 bound and listening
before uvicorn starts, so tests never race for a port nor wait for the server to come up.
The stop has a deadline that only catches a hang.
"""

from __future__ import annotations

import socket
import threading
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
        options: dict[str, Any] = {"log_level": "warning"}
        options.update(config)
        self.server = uvicorn.Server(uvicorn.Config(app, **options))
        # The socket listens before uvicorn starts: requests wait in its backlog until
        # uvicorn accepts them, so nothing has to wait for the server to say it started.
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._listener]}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        """Stop serving and wait for the thread (it must stop within the deadline)."""
        if self._before_stop is not None:
            self._before_stop()
        self.server.should_exit = True
        self.thread.join(DEADLINE_S)
        self._listener.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"
