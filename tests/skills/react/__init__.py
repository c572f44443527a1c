"""Tests of ``stargraph.skills.react``."""
