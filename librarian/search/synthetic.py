"""Generated corpora and queries for search tests and benchmarks (deterministic for a seed).

Words are pseudo-English: syllable stems with English suffixes (so the
stemmer has work to do), drawn from a Zipf distribution, with stop words
mixed in; queries are a few words taken from a random document, so each has
at least one match.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from librarian.workspace.nodes import Node

_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "br", "cl", "dr",
           "fr", "gr", "pl", "st", "tr", "sh", "ch", "th"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
_CODAS = ["", "n", "r", "l", "s", "t", "m", "nd", "rk", "st"]
_SUFFIXES = ["", "", "", "s", "ing", "ed", "er", "ly", "ation", "ness", "ful", "ity"]
_STOPS = ["the", "a", "of", "and", "to", "in", "is", "with", "for", "on"]


@dataclass(frozen=True)
class SyntheticCorpus:
    """Nodes to index and queries to ask of them."""

    nodes: list[Node]
    queries: list[str]


def vocabulary(size: int, seed: int = 0) -> list[str]:
    """`size` distinct pseudo-words."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        syllables = rng.integers(1, 4)
        stem = "".join(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
                       + _CODAS[rng.integers(len(_CODAS))] for _ in range(syllables))
        words[stem + _SUFFIXES[rng.integers(len(_SUFFIXES))]] = None
    return list(words)


def make_corpus(n_docs: int, n_queries: int, words_per_doc: int | tuple[int, int] = 12, vocab_size: int = 5000,
                seed: int = 0, kinds: tuple[str, ...] = ("raw", "synthetic"), folders: int = 10) -> SyntheticCorpus:
    """`n_docs` nodes (ids d0..; paths f<i>/d<j>.md) and `n_queries` queries of 1-4 content words (sometimes after a stop word)."""
    if n_docs < 1 or n_queries < 0:
        raise ValueError(f"need n_docs >= 1 and n_queries >= 0, got {n_docs}, {n_queries}")
    rng = np.random.default_rng(seed)
    vocab = np.array(vocabulary(vocab_size, seed))
    weights = 1.0 / np.arange(1, vocab_size + 1) ** 1.05
    weights /= weights.sum()
    lo, hi = (words_per_doc, words_per_doc) if isinstance(words_per_doc, int) else words_per_doc
    lengths = rng.integers(lo, hi + 1, size=n_docs)
    picks = rng.choice(vocab_size, size=int(lengths.sum()), p=weights)
    stop_mask = rng.random(picks.size) < 0.15
    stops = np.array(_STOPS)[rng.integers(len(_STOPS), size=picks.size)]
    tokens = np.where(stop_mask, stops, vocab[picks])
    nodes, texts, start = [], [], 0
    for i, length in enumerate(lengths):
        words = tokens[start: start + length]
        start += length
        text = " ".join(words).capitalize() + "."
        texts.append(words)
        nodes.append(Node(id=f"d{i}", path=f"f{i % folders}/d{i}.md", kind=kinds[i % len(kinds)], text=text))
    queries = []
    for _ in range(n_queries):
        words = [w for w in texts[rng.integers(n_docs)] if w not in _STOPS] or [str(vocab[0])]
        n = int(rng.integers(1, min(4, len(words)) + 1))
        chosen = [words[j] for j in sorted(rng.choice(len(words), size=n, replace=False))]
        if rng.random() < 0.3:  # a stop word, as people type them
            chosen.insert(0, _STOPS[int(rng.integers(len(_STOPS)))])
        queries.append(" ".join(chosen))
    return SyntheticCorpus(nodes, queries)


def overlap_at_k(a: list[str], b: list[str], k: int = 10) -> float:
    """|top-k of a ∩ top-k of b| / the larger of the two list sizes (1.0 when both are empty)."""
    top_a, top_b = set(a[:k]), set(b[:k])
    denom = max(len(top_a), len(top_b))
    return 1.0 if denom == 0 else len(top_a & top_b) / denom
