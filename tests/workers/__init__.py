"""Tests of ``stargraph.workers``."""
