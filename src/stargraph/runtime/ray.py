"""Branch work on a Ray cluster: ``graph.compile(executor=RayExecutor())``.

:class:`RayExecutor` is a standard :class:`concurrent.futures.Executor` over Ray tasks, so it
plugs into the same seam as a ``ProcessPoolExecutor`` or Dask's ``client.get_executor()``
(see ``stargraph.runtime._remote``): the ``blocking=True`` sync tasks of fan-out and ``Send``
steps run as Ray tasks, while the orchestrating process alone validates, merges and
checkpoints, so runs stay deterministic and replay locally.

Install with the ``ray`` extra. Connect to a cluster yourself (``ray.init(address=...)``)
before the first run, or start a single-machine one listening on the loopback interface only
with :func:`init_local`; the executor never starts or stops a cluster on its own.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import Any

from stargraph.errors import RayUnavailableError

__all__ = ["RayExecutor", "RayUnavailableError", "init_local"]

# Ray reads this when it is imported: off, a single-machine cluster takes the loopback
# address as its node address (and so binds every server to it) instead of the address of
# the machine's network interface.
_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise RayUnavailableError(
            "RayExecutor needs Ray; install it with: pip install 'stargraph[ray]'"
        ) from exc
    return ray


class RayExecutor(concurrent.futures.Executor):
    """Run submitted calls as Ray tasks; ``submit`` returns ``ObjectRef.future()``.

    ``options`` go to ``ray.remote`` for every task (``num_cpus=1``, ``max_retries=0``,
    ``runtime_env={...}``, ...). The submitted function must be importable in the workers
    (stargraph's own call, :func:`stargraph.runtime._remote.run_remote`, is). Ray must be
    initialised (``ray.init(...)`` or :func:`init_local`) before the first ``submit``.
    ``shutdown`` stops accepting work (and, with ``cancel_futures``, cancels what has not
    finished); it leaves the cluster running.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._remote: dict[Callable[..., Any], Any] = {}
        self._pending: dict[concurrent.futures.Future[Any], Any] = {}
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Start ``fn(*args, **kwargs)`` as a Ray task."""
        ray = _ray()
        with self._lock:
            if self._shutdown:
                # A RunError is a RuntimeError, which concurrent.futures executors raise here.
                raise RayUnavailableError(
                    "this RayExecutor was shut down; create a new one to schedule more work"
                )
            if not ray.is_initialized():
                raise RayUnavailableError(
                    "Ray is not initialised; call ray.init(address=...) to join a cluster, or "
                    "stargraph.runtime.ray.init_local() for one on this machine, before running"
                )
            remote = self._remote.get(fn)
            if remote is None:
                remote = ray.remote(**self._options)(fn) if self._options else ray.remote(fn)
                self._remote[fn] = remote
            ref = remote.remote(*args, **kwargs)
            future: concurrent.futures.Future[Any] = ref.future()
            self._pending[future] = ref
        future.add_done_callback(self._forget)
        return future

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._pending.pop(future, None)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop accepting work; optionally cancel unfinished tasks, or wait for them."""
        with self._lock:
            self._shutdown = True
            pending = dict(self._pending)
        if cancel_futures and pending:
            ray = _ray()
            for future, ref in pending.items():
                future.cancel()
                ray.cancel(ref)
        elif wait and pending:
            concurrent.futures.wait(list(pending))


def init_local(num_cpus: int | None = None, **kwargs: Any) -> Any:
    """Start a Ray cluster on this machine whose servers listen on 127.0.0.1 only.

    Call it before anything else imports Ray (the loopback switch is read at import). Extra
    ``kwargs`` go to ``ray.init``; the dashboard is off unless asked for. Raises
    :class:`RayUnavailableError` (after shutting Ray down) when the cluster did not come up
    on the loopback address. Returns what ``ray.init`` returns; stop it with
    ``ray.shutdown()``.
    """
    os.environ.setdefault(_LOOPBACK_ENV, "0")
    ray = _ray()
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("_node_ip_address", "127.0.0.1")
    context = ray.init(num_cpus=num_cpus, **kwargs)
    address = ray.util.get_node_ip_address()
    if address != "127.0.0.1":
        ray.shutdown()
        raise RayUnavailableError(
            f"Ray started on {address}, not 127.0.0.1: it was imported before "
            f"init_local() could set {_LOOPBACK_ENV}=0; set it in the environment before "
            "importing ray"
        )
    return context
