"""Small example graphs used by the demo, the IR examples in ``stargraph/ir/examples`` and the
documentation. Their node functions live at module level so the IR can reference them."""
