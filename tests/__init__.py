"""The test suite: one folder per package of ``src/stargraph``, cross-cutting tests at the top."""
