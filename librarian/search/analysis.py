"""Text analysis that mirrors Elasticsearch's built-in `english` analyzer.

Elasticsearch's `english` analyzer is: the standard tokenizer (Unicode word
boundaries), an English possessive filter ("alice's" -> "alice"), lowercase,
the Lucene English stop words, and the original Porter stemmer. The embedded
backend analyses text with this module before handing terms to tantivy, so
that both backends score the same terms the same way (BM25 parity). The
tokenizer is a regular-expression approximation of the Unicode rules: words
join across `.`, `'` and `:` between letters and across `.` and `,` between
digits; each Han or Hiragana character is its own token.
"""

from __future__ import annotations

import re

import Stemmer

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, the stop list of Elasticsearch's `english` analyzer.
ENGLISH_STOP_WORDS: frozenset[str] = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)

_HAN = "\u3040-\u309f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = rf"[^\W{_HAN}]"
_LETTER = rf"[^\W\d_{_HAN}]"
_TOKEN = re.compile(
    rf"[{_HAN}]|{_WORD}+(?:(?:(?<={_LETTER})[.'\u2019:](?={_LETTER})|(?<=\d)[.,](?=\d)){_WORD}+)*"
)
_POSSESSIVE = ("'s", "\u2019s")

_stemmer = Stemmer.Stemmer("porter")


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens with possessives removed (before stop words and stemming)."""
    out: list[str] = []
    for token in _TOKEN.findall(text):
        token = token.lower()
        if token.endswith(_POSSESSIVE):
            token = token[:-2]
        if token:
            out.append(token)
    return out


def analyze(text: str) -> list[str]:
    """The index terms of `text`: tokens without English stop words, Porter-stemmed."""
    return _stemmer.stemWords([t for t in tokenize(text) if t not in ENGLISH_STOP_WORDS])
