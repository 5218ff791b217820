"""A lexical ranking that works for Korean: BM25 over character n-grams.

The bundled embedding model (all-MiniLM-L6-v2) is English-only and ranks Korean
text poorly.  Korean words carry particles (프리필은, 프리필을, 프리필이) that
defeat whole-word matching, so Korean runs are indexed as character bigrams;
runs of Latin letters and digits (TTFT, KV, top-k, 1600) stay whole words.
Pure code (NumPy), no I/O: the index is built from texts the caller fetched.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

_HANGUL = re.compile(r"[\uac00-\ud7a3]+")
_WORD = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")


def terms(text: str) -> list[str]:
    text = unicodedata.normalize("NFC", text).lower()
    found: list[str] = []
    for run in _HANGUL.findall(text):
        if len(run) == 1:
            found.append(run)
        found.extend(run[i : i + 2] for i in range(len(run) - 1))
    found.extend(_WORD.findall(text))
    return found


@dataclass
class BM25Index:
    """BM25 with an inverted index in NumPy arrays: a search touches only the postings of the
    question's terms, vectorised (scanning every document in Python cost 514 ms at 100k
    chunks). Scores are the same float64 arithmetic, term by term, as the plain formula."""

    k1: float = 1.2
    b: float = 0.75
    ids: list[str] = field(default_factory=list)
    # term -> (document positions, ascending; how often the term occurs in each)
    _postings: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    _lengths: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _positions: dict[str, int] = field(default_factory=dict)
    _average: float = 1.0

    @classmethod
    def build(cls, documents: dict[str, str]) -> BM25Index:
        index = cls()
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths: list[int] = []
        for doc_id, text in documents.items():
            counts = Counter(terms(text))
            position = len(index.ids)
            index._positions[doc_id] = position
            index.ids.append(doc_id)
            lengths.append(sum(counts.values()))
            for term, count in counts.items():
                where, how_often = postings.setdefault(term, ([], []))
                where.append(position)
                how_often.append(count)
        index._postings = {
            term: (np.asarray(where, dtype=np.int64), np.asarray(how_often, dtype=np.float64))
            for term, (where, how_often) in postings.items()
        }
        index._lengths = np.asarray(lengths, dtype=np.float64)
        index._average = (sum(lengths) / len(lengths) or 1.0) if lengths else 1.0
        return index

    def _idf(self, term: str) -> float:
        postings = self._postings.get(term)
        df = len(postings[0]) if postings is not None else 0
        return math.log(1 + (len(self.ids) - df + 0.5) / (df + 0.5))

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        if not self.ids:
            return []
        scores = np.zeros(len(self.ids))
        for term in set(terms(query)):
            postings = self._postings.get(term)
            if postings is None:
                continue
            where, tf = postings
            idf = self._idf(term)
            norm = tf + self.k1 * (1 - self.b + self.b * self._lengths[where] / self._average)
            scores[where] += idf * tf * (self.k1 + 1) / norm
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k > 0:  # keep every hit tied with the k-th: ties go to the earlier document
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        ordered = sorted(hits.tolist(), key=lambda position: (-scores[position], position))[:k]
        return [(self.ids[position], float(scores[position])) for position in ordered]

    def coverage(self, query: str, doc_id: str) -> float:
        """Share of the question's terms found in one document, weighted by rarity (0..1).

        Unlike BM25 or a fused rank it is comparable across questions, so it is
        what the chat's relevance threshold applies to.
        """
        query_terms = set(terms(query))
        if not query_terms or doc_id not in self._positions:
            return 0.0
        position = self._positions[doc_id]

        def holds(term: str) -> bool:
            postings = self._postings.get(term)
            if postings is None:
                return False
            at = int(np.searchsorted(postings[0], position))
            return at < len(postings[0]) and int(postings[0][at]) == position

        total = sum(self._idf(term) for term in query_terms)
        found = sum(self._idf(term) for term in query_terms if holds(term))
        return found / total if total else 0.0


def hangul_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum("\uac00" <= c <= "\ud7a3" for c in letters) / len(letters) if letters else 0.0


def reciprocal_rank_fusion(
    rankings: list[list[str]], weights: list[float] | None = None, k: int = 60
) -> dict[str, float]:
    """Fuse rankings: each id scores sum(weight / (k + rank)) over the rankings it is in."""
    weights = weights or [1.0] * len(rankings)
    fused: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + weight / (k + rank)
    return fused
