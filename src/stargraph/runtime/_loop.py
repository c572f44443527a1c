"""The event loop a sync-driven run owns for its async nodes and routers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["RunLoop"]

T = TypeVar("T")


class RunLoop:
    """The one event loop of a sync-driven run, served by a helper thread the run owns.

    Every async node and async router of the run runs on it, step after step, so an async
    client made in one step (bound to its loop) still works in a later one. The run closes
    it when it ends (:meth:`close`), cancelling whatever the run left on it.
    """

    __slots__ = ("loop", "thread")

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="stargraph-run-loop", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result on this thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Cancel what is left on the loop, stop its thread and close it."""
        loop = self.loop
        if loop.is_closed():
            return

        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await loop.shutdown_asyncgens()

        try:
            self.run(shutdown())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            self.thread.join()
            loop.close()
