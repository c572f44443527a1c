"""Tests of ``stargraph.plugin``."""
