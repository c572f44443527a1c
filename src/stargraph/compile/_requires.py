"""The capabilities mounted skills require, checked against the services a graph is given.

A skill's ``requires`` lists capability strings. ``service:<name>`` is one a parent provides
by giving its graph ``services={name: ...}``: the mount records the skill's requirements in
its node's (unhashed) metadata, so a graph compiled from IR JSON is held to them too. Other
capability strings are recorded and shown, not checked: nothing in a graph provides them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from stargraph.ir import GraphIR, SubgraphNodeIR
from stargraph.runtime._plan import UnmetRequirement

__all__ = ["SERVICE", "unmet_requires"]

SERVICE: Final = "service:"
"""The prefix of a capability a graph's ``services`` provide."""


def unmet_requires(ir: GraphIR, services: Mapping[str, Any]) -> list[UnmetRequirement]:
    """Every ``service:`` capability a skill mounted in ``ir`` (this level; children are
    compiled, hence checked, on their own) requires and ``services`` has no key for."""
    unmet: list[UnmetRequirement] = []
    for i, node in enumerate(ir.nodes):
        if not isinstance(node, SubgraphNodeIR):
            continue
        declared = node.metadata.get("skill_requires")
        if not isinstance(declared, list):
            continue
        for capability in declared:
            if (
                isinstance(capability, str)
                and capability.startswith(SERVICE)
                and capability[len(SERVICE) :] not in services
            ):
                unmet.append(
                    UnmetRequirement(f"/nodes/{i}", node.id, node.skill or "?", capability)
                )
    return unmet
