"""Node caching: serve a node's writes again when it runs on an input it has seen.

A node compiled with ``cache=CachePolicy(...)`` is wrapped here. Its cache key is the node's
own IR (so a changed node never hits an entry its old version made) and its input - the
canonical JSON of the state it receives, or what the policy's ``key`` function returns for
it. The lookup goes through the run's record (``ctx.record_call("cache", ...)``), so the
step record says whether it was a hit, a re-executed step makes the same decision, and the
entry's age is measured with the run's clock (``ctx.now()``, journaled) rather than the wall
clock. Replay serves a cached node's recorded writes, hit or not (it is stubbed like a
``must_stub`` node), so replay never depends on what a cache holds today.

Where entries live is the store's to say: one that declares the ``node_cache`` feature
(``SqliteStore`` and ``PostgresStore``: a table of their database, shared by other
processes and later runs; ``MemoryStore``: memory owned by the store object) gives its
cache through ``node_cache()``; with any other store, or none, the compiled graph owns an
in-memory one (see ``stargraph.checkpoint._node_cache``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pydantic_core
from pydantic import BaseModel

from stargraph.checkpoint._node_cache import NodeCache
from stargraph.ir import CachePolicyIR, FunctionNodeIR, content_hash
from stargraph.runtime._context import mark_cache_hit

__all__ = ["CACHE_CALL", "cache_problems", "cached"]

CACHE_CALL = "cache"
"""The kind of the journaled call that records a cached node's lookup in its step record."""


def _age(now: str, at: str) -> timedelta:
    return datetime.fromisoformat(now) - datetime.fromisoformat(at)


def _input_json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return pydantic_core.to_jsonable_python(value)


def cached(
    node: FunctionNodeIR,
    fn: Callable[..., Any],
    takes_ctx: bool,
    key_fn: Callable[[Any], Any] | None,
    cache: NodeCache,
) -> Callable[[Any, Any], Any]:
    """``fn`` (sync or async) behind the node's cache; the wrapper takes ``(state, ctx)``."""
    policy: CachePolicyIR = node.cache or CachePolicyIR()
    # The node's own behaviour, not the graph's: another node changing keeps entries valid.
    namespace = content_hash(node.model_dump(mode="json", exclude={"metadata"}))
    ttl = None if policy.ttl_s is None else timedelta(seconds=policy.ttl_s)

    def look(state: Any, ctx: Any) -> tuple[str, str | None, dict[str, Any]]:
        chosen = key_fn(state) if key_fn is not None else _input_json(state)
        key = content_hash({"node": namespace, "input": _input_json(chosen)})
        now = ctx.now().isoformat() if ttl is not None else None

        def lookup() -> dict[str, Any]:
            entry = cache.get(key)
            if entry is None:
                return {"hit": False}
            writes, at = entry
            if ttl is not None and (at is None or now is None or _age(now, at) > ttl):
                return {"hit": False}
            return {"hit": True, "writes": writes}

        # Only the lookup is journaled: the body runs outside it, so its own journaled
        # calls (a model's answer) are recorded and served as in any node.
        found: dict[str, Any] = ctx.record_call(CACHE_CALL, key, {"key": key}, lookup)
        if found["hit"]:
            mark_cache_hit(ctx)
            ctx.emit({"cache": "hit", "node": node.id, "key": key})
        return key, now, found

    if inspect.iscoroutinefunction(inspect.unwrap(fn)):

        async def arun(state: Any, ctx: Any) -> Any:
            key, now, found = look(state, ctx)
            if found["hit"]:
                return found["writes"]
            writes = await (fn(state, ctx) if takes_ctx else fn(state))
            cache.put(key, _input_json(writes), now)
            return writes

        return functools.update_wrapper(arun, fn)

    def run(state: Any, ctx: Any) -> Any:
        key, now, found = look(state, ctx)
        if found["hit"]:
            return found["writes"]
        writes = fn(state, ctx) if takes_ctx else fn(state)
        cache.put(key, _input_json(writes), now)
        return writes

    return functools.update_wrapper(run, fn)


def cache_problems(ir: Any) -> tuple[list[Any], dict[str, Callable[[Any], Any]]]:
    """What is wrong with the graph's cache policies, and their key functions by node id."""
    from stargraph.errors import Problem
    from stargraph.refs import resolve_ref

    problems: list[Problem] = []
    keys: dict[str, Callable[[Any], Any]] = {}
    for i, node in enumerate(ir.nodes):
        policy = getattr(node, "cache", None)
        if policy is None or policy.key is None:
            continue
        try:
            keys[node.id] = resolve_ref(policy.key)
        except (ImportError, AttributeError) as exc:
            problems.append(
                Problem(
                    f"/nodes/{i}/cache/key",
                    f"node {node.id!r}'s cache key function {policy.key!r} cannot be imported: "
                    f"{exc}",
                    "define the key function at module level",
                )
            )
    return problems, keys
