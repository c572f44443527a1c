"""Tests of ``stargraph.runtime``."""
