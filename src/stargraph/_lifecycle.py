"""With-block support for the library's closeable objects and background servers.

Models, streams, the fake servers and the local services each used to spell out the same
``__enter__``/``__exit__`` pair; they inherit it from here instead. :class:`ServerThread` is
the one way a loopback HTTP server is served from (and stopped in) a background thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

if TYPE_CHECKING:
    # Only named in annotations: importing the server stack here would put it on the import
    # path of every model and store that inherits :class:`Closing`.
    from http.server import ThreadingHTTPServer

__all__ = ["Closing", "ServerThread", "Started"]

T = TypeVar("T")


class Closing:
    """Closed at the end of a ``with`` block: ``__enter__`` returns the object itself and
    ``__exit__`` calls :meth:`close`."""

    def close(self) -> None:
        """Release what the object holds (subclasses define it; it must be idempotent)."""
        raise NotImplementedError

    def close_if_raises(self, setup: Callable[[], T]) -> T:
        """``setup()``, which opens or starts what the object holds; when it raises, the
        object is closed before the error propagates, so nothing it had opened stays open."""
        try:
            return setup()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Started(Closing):
    """Started at the beginning of a ``with`` block and closed at its end. A start that fails
    half way is closed before the error propagates, so nothing it started keeps running."""

    def start(self) -> Self:
        """Start serving (subclasses define it; starting a started object does nothing)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.close_if_raises(self.start)


class ServerThread:
    """``httpd`` (bound to a port of 127.0.0.1) serving in a daemon thread named ``name``
    until :meth:`stop`."""

    def __init__(self, httpd: ThreadingHTTPServer, *, name: str) -> None:
        self.httpd = httpd
        """The server; its handlers reach their owner through attributes set on it."""
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            # How often serve_forever looks for shutdown(): short, so close() is quick.
            kwargs={"poll_interval": 0.05},
            name=name,
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The port the server is bound to."""
        return int(self.httpd.server_address[1])

    def stop(self) -> None:
        """Stop serving, close the socket and join the serving thread (and, with
        ``block_on_close``, every handler thread)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()
