"""Tests of ``stargraph.ir``."""
