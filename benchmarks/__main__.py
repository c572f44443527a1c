"""``python -m benchmarks``: see :func:`benchmarks.core_harness.main`."""

from __future__ import annotations

import sys

from benchmarks.core_harness import main

if __name__ == "__main__":
    sys.exit(main())
