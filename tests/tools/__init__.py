"""Tests of ``stargraph.tools``."""
