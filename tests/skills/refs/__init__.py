"""Tests of ``stargraph.skills.refs``."""
