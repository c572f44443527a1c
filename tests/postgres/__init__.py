"""Tests of ``stargraph.postgres``."""
