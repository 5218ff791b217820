"""A lexical ranking that works for Korean: BM25 over character n-grams.

The bundled embedding model (all-MiniLM-L6-v2) is English-only and ranks Korean
text poorly.  Korean words carry particles (프리필은, 프리필을, 프리필이) that
defeat whole-word matching, so Korean runs are indexed as character bigrams;
runs of Latin letters and digits (TTFT, KV, top-k, 1600) stay whole words.
Pure code, no I/O: the index is built from texts the caller fetched.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

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
    k1: float = 1.2
    b: float = 0.75
    ids: list[str] = field(default_factory=list)
    _docs: list[Counter[str]] = field(default_factory=list)
    _lengths: list[int] = field(default_factory=list)
    _df: Counter[str] = field(default_factory=Counter)
    _positions: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(cls, documents: dict[str, str]) -> BM25Index:
        index = cls()
        for doc_id, text in documents.items():
            counts = Counter(terms(text))
            index._positions[doc_id] = len(index.ids)
            index.ids.append(doc_id)
            index._docs.append(counts)
            index._lengths.append(sum(counts.values()))
            index._df.update(counts.keys())
        return index

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        if not self.ids:
            return []
        n = len(self.ids)
        average = sum(self._lengths) / n or 1.0
        query_terms = set(terms(query))
        scores: list[tuple[str, float]] = []
        for doc_id, counts, length in zip(self.ids, self._docs, self._lengths, strict=True):
            score = 0.0
            for term in query_terms:
                tf = counts.get(term, 0)
                if not tf:
                    continue
                idf = math.log(1 + (n - self._df[term] + 0.5) / (self._df[term] + 0.5))
                score += idf * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length / average))
            if score > 0:
                scores.append((doc_id, score))
        scores.sort(key=lambda item: -item[1])
        return scores[:k]

    def coverage(self, query: str, doc_id: str) -> float:
        """Share of the question's terms found in one document, weighted by rarity (0..1).

        Unlike BM25 or a fused rank it is comparable across questions, so it is
        what the chat's relevance threshold applies to.
        """
        n = len(self.ids)
        query_terms = set(terms(query))
        if not query_terms or doc_id not in self._positions:
            return 0.0
        counts = self._docs[self._positions[doc_id]]

        def idf(term: str) -> float:
            df = self._df.get(term, 0)
            return math.log(1 + (n - df + 0.5) / (df + 0.5))

        total = sum(idf(term) for term in query_terms)
        found = sum(idf(term) for term in query_terms if counts.get(term))
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
