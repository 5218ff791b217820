"""A lexical ranking that works for Korean: BM25 over morphemes (kiwipiepy), or character bigrams.

The bundled embedding model (all-MiniLM-L6-v2) is English-only and ranks Korean
text poorly.  Korean words carry particles (프리필은, 프리필을, 프리필이) that
defeat whole-word matching, so Korean is indexed by its morphemes: kiwipiepy, a maintained
morphological analyser made for Korean whose model ships as a package (kiwipiepy_model, read
from disk: nothing is downloaded), splits 프리필이란 into 프리 + 필 + 이란; the content morphemes
are kept (particles and endings are not) and nouns written together are kept joined as well
(프리필, 프리픽스); a question counts such nouns once, joined, where the index knows the joined form,
so 프리필 does not match 프리픽스 on their shared 프리.  Runs of Latin letters and digits (TTFT, KV,
top-k, 1600) stay whole words.  ``tokenizer="bigram"`` is the former way (each Korean run as
overlapping character pairs), kept to measure against; ``"kiwi+bigram"`` indexes both (the bigrams marked
apart), measured for issue 27 and not adopted: the tuning questions do not prefer it (docs/performance.md).
A chunk's section title is indexed with its text, so a chunk deep in a section still answers to
the section's subject, and a chunk's score gains a share of its neighbours' in the same source
(``NEIGHBOUR_WEIGHT``), so that the chunk inside a matching passage comes before a lone match.
Measured (docs/performance.md, `manage.py compare_tokenizers`, 98 questions, 2026-12-04, 2 cores,
AMD EPYC with avx512_bf16): recall@1 / @5 0.61 / 0.92, 0.72 / 0.97 and 0.78 / 0.97 at 200, 500 and
1000 characters (bigrams 0.59 / 0.86, 0.65 / 0.94, 0.69 / 0.95), search p50 under 1 ms; every other
change tried is in `manage.py retrieval_variants`.
Pure code (NumPy): the index is built from texts the caller fetched, and can be saved to
and opened from a folder (``BM25Index.save`` / ``load``). It keeps each chunk's text and
metadata too (``chunk``), so a search by BM25 alone needs nothing from Chroma.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import tempfile
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kiwipiepy import Kiwi, Token

_HANGUL = re.compile(r"[\uac00-\ud7a3]+")
_WORD = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")

TOKENIZERS = ("kiwi", "bigram", "kiwi+bigram")
TOKENIZER = "kiwi"  # what an index is built with unless told (measured: docs/performance.md)
# The morphemes kept (Sejong tags): nouns, numerals, pronouns, roots, verb and adjective stems,
# adverbs, Chinese characters. Particles, endings and punctuation are left out; Latin words and
# numbers come from _WORD instead, whole.
_CONTENT = frozenset({"NNG", "NNP", "NNB", "NR", "NP", "XR", "XSN", "VV", "VA", "MAG", "SH"})
_NOUNS = frozenset({"NNG", "NNP", "XR"})  # written together, also kept as one term (프리 + 필: 프리필)
_PREDICATES = frozenset({"VV", "VA"})


def bigrams(text: str) -> list[str]:
    """Each Korean run as overlapping character pairs, Latin words and numbers whole."""
    text = unicodedata.normalize("NFC", text).lower()
    found: list[str] = []
    for run in _HANGUL.findall(text):
        if len(run) == 1:
            found.append(run)
        found.extend(run[i : i + 2] for i in range(len(run) - 1))
    found.extend(_WORD.findall(text))
    return found


_kiwi_lock = threading.Lock()
_kiwi_analyser: list[Kiwi] = []


def _kiwi() -> Kiwi:
    """This process's analyser, made once (about a second to read its model from the package)."""
    with _kiwi_lock:
        if not _kiwi_analyser:
            from kiwipiepy import Kiwi

            _kiwi_analyser.append(Kiwi(num_workers=1))
        return _kiwi_analyser[0]


def warm() -> None:
    """The analyser made and its model read whole (the first analysis reads the rest), now. Both hold the
    interpreter's lock while they run (1.4–3.7 s and up to 3.4 s measured on this project's 2-core
    machine): a web process does it before it serves (``labapp.asgi``), since on a thread of a serving
    process it would stall every socket of the process. An error is left for the first real search."""
    with contextlib.suppress(Exception):
        terms("프리필")


_warming: list[threading.Thread] = []


def warm_in_background() -> None:
    """``warm`` on a thread of its own, once per process, for a process that did not warm before it
    served (the chat calls this when its socket opens; nothing to do in a warmed web process)."""
    with _kiwi_lock:
        if _kiwi_analyser or _warming:
            return
        _warming.append(threading.Thread(target=warm, name="kiwi-warm-up", daemon=True))
    _warming[0].start()


def _content_terms(tokens: list[Token], text: str, known: Callable[[str], bool] | None = None) -> list[str]:
    """The content morphemes of one analysed text, nouns written together also joined, then its Latin words.

    With ``known`` (a question, against an index's terms): nouns written together whose joined form the
    index knows give that form alone, not its parts as well, so 프리필 does not also match 프리픽스 on 프리.
    """
    found: list[str] = []
    compound: list[str] = []
    compound_end = -1

    def close() -> None:
        if len(compound) > 1:
            joined = "".join(compound)
            if known is not None and known(joined):
                del found[-len(compound) :]  # the parts, each just appended as a noun
            found.append(joined)

    for token in tokens:
        noun = token.tag in _NOUNS
        if not (noun and compound and token.start == compound_end):
            close()
            compound = []
        if noun:
            compound.append(token.form)
            compound_end = token.start + token.len
        if token.tag in _CONTENT:
            found.append(token.form + ("다" if token.tag in _PREDICATES else ""))
    close()
    return found + _WORD.findall(text.lower())


def terms_of(texts: Iterable[str], tokenizer: str = TOKENIZER) -> list[list[str]]:
    """The terms of each text, by ``tokenizer`` (one of TOKENIZERS)."""
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}: expected one of {', '.join(TOKENIZERS)}")
    normalized = [unicodedata.normalize("NFC", text) for text in texts]
    if tokenizer == "bigram":
        return [bigrams(text) for text in normalized]
    analysed = _kiwi().tokenize([text.lower() for text in normalized])
    found = [_content_terms(tokens, text) for tokens, text in zip(analysed, normalized, strict=True)]
    if tokenizer == "kiwi+bigram":
        return [morphemes + _marked_bigrams(text) for morphemes, text in zip(found, normalized, strict=True)]
    return found


def _marked_bigrams(text: str) -> list[str]:
    """``bigrams``, each marked so that a pair never meets a morpheme of the same spelling."""
    return ["§" + pair for pair in bigrams(text)]


def terms(text: str, tokenizer: str = TOKENIZER) -> list[str]:
    return terms_of([text], tokenizer)[0]


def query_terms(text: str, tokenizer: str, known: Callable[[str], bool]) -> set[str]:
    """A question's terms against an index whose terms ``known`` tells: as ``terms``, except that nouns
    written together count once, as the joined form, where the index has it (see ``_content_terms``)."""
    if tokenizer == "bigram":
        return set(terms(text, tokenizer))
    normalized = unicodedata.normalize("NFC", text)
    found = set(_content_terms(_kiwi().tokenize(normalized.lower()), normalized, known))
    return found | set(_marked_bigrams(normalized)) if tokenizer == "kiwi+bigram" else found


def _indexed_text(text: str, metadata: dict[str, Any]) -> str:
    """What a chunk is indexed as: its section's title, then its text (the title is not stored with it)."""
    title = str(metadata.get("title") or "")
    return f"{title}\n{text}" if title else text


# The on-disk layout's version: a folder saved by another layout is rebuilt, not read
# (2: the chunks' texts and metadata are kept beside the postings; 3: so are the ids, found by
# binary search instead of a list and a dict read from JSON at every opening; 4: the tokenizer is
# named, Korean indexed by morphemes with each chunk's section title; 5: each chunk's neighbours are kept).
FORMAT = 5
# A chunk's score gains this share of the scores of the chunks just before and after it in its source, so
# that of two chunks matching alike the one inside the passage that matches comes first (`manage.py
# retrieval_variants`, 98 questions: recall@1 0.61 / 0.70 / 0.72 → 0.61 / 0.72 / 0.78 at 200 / 500 / 1000
# characters; docs/performance.md).
NEIGHBOUR_WEIGHT = 0.15


@dataclass
class BM25Index:
    """BM25 with an inverted index in NumPy arrays: a search touches only the postings of the
    question's terms, vectorised (scanning every document in Python cost 514 ms at 100k
    chunks). Scores are the same float64 arithmetic, term by term, as the plain formula.

    The postings are one compressed-sparse-row table (a term's documents are
    ``positions[offsets[t]:offsets[t + 1]]``), so an index can be saved to a folder and
    opened again memory-mapped: opening reads the term list, not the ids or the postings. (At 100k
    chunks, reading the ids from JSON into a list and a dict was 40 of an opening's 45 ms on two
    cores, and a first question under `make load` waits for CPU several times that; the ids are now
    one more memory-mapped blob, with their sorted order for finding a chunk's position.)
    Measured side by side with bm25s 0.3.16 at 100k synthetic Korean chunks (two cores):
    the same top 5 for every question, searches 3.8 ms here against 36 ms there, and both
    open from disk in milliseconds, so the lab keeps this one.
    """

    k1: float = 1.2
    b: float = 0.75
    tokenizer: str = TOKENIZER
    ids: list[str] = field(default_factory=list)
    _term_at: dict[str, int] = field(default_factory=dict)
    _offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    _positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    _counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    _lengths: np.ndarray = field(default_factory=lambda: np.zeros(0))
    _doc_at: dict[str, int] = field(default_factory=dict)
    _average: float = 1.0
    # Each chunk's text and metadata (JSON), UTF-8 end to end: chunk i is blob[offsets[i]:offsets[i + 1]].
    _texts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    _text_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    _metas: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    _meta_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    # An opened index's ids: id i is blob[offsets[i]:offsets[i + 1]], and ``_id_order`` lists the
    # positions in id order (an opened index leaves ``ids`` and ``_doc_at`` empty; see ``_position``).
    _ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint8))
    _id_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    _id_order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    # Each chunk's neighbours in its source: the position of the chunk before and after it, -1 for none.
    _before: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    _after: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    _opened: bool = False

    @classmethod
    def build(
        cls,
        documents: dict[str, str],
        metadatas: dict[str, dict[str, Any]] | None = None,
        *,
        tokenizer: str = TOKENIZER,
    ) -> BM25Index:
        """The index of ``documents`` (id → text), keeping each text and its metadata (id → dict, ``{}``
        where missing) for ``chunk``; each text is indexed with its metadata's ``title``."""
        index = cls(tokenizer=tokenizer)
        index._texts, index._text_offsets = _blob([text.encode() for text in documents.values()])
        metadatas = metadatas or {}
        index._metas, index._meta_offsets = _blob([json.dumps(metadatas.get(i) or {}).encode() for i in documents])
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths: list[int] = []
        indexed = terms_of([_indexed_text(text, metadatas.get(i) or {}) for i, text in documents.items()], tokenizer)
        for doc_id, found in zip(documents, indexed, strict=True):
            counts = Counter(found)
            position = len(index.ids)
            index._doc_at[doc_id] = position
            index.ids.append(doc_id)
            lengths.append(sum(counts.values()))
            for term, count in counts.items():
                where, how_often = postings.setdefault(term, ([], []))
                where.append(position)
                how_often.append(count)
        index._term_at = {term: at for at, term in enumerate(postings)}
        sizes = [len(where) for where, _counts in postings.values()]
        index._offsets = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64))).astype(np.int64)
        index._positions = np.fromiter(
            (p for where, _c in postings.values() for p in where), dtype=np.int32, count=int(index._offsets[-1])
        )
        index._counts = np.fromiter(
            (c for _w, counts in postings.values() for c in counts), dtype=np.float64, count=int(index._offsets[-1])
        )
        index._lengths = np.asarray(lengths, dtype=np.float64)
        index._before, index._after = _neighbours([metadatas.get(i) or {} for i in documents])
        index._average = (sum(lengths) / len(lengths) or 1.0) if lengths else 1.0
        return index

    # --- on disk ---------------------------------------------------------------------------

    ARRAYS = (
        *("_offsets", "_positions", "_counts", "_lengths", "_texts", "_text_offsets", "_metas", "_meta_offsets"),
        *("_ids", "_id_offsets", "_id_order", "_before", "_after"),
    )

    def save(self, folder: Path, *, stamp: str = "") -> None:
        """Write the index into ``folder`` (created; replaced whole, so a reader never sees half of it).
        ``stamp`` names what it was built from (``load`` opens it only for the same stamp)."""
        if not self._opened:
            ids = self.ids
            self._ids, self._id_offsets = _blob([doc_id.encode() for doc_id in ids])
            self._id_order = np.asarray(sorted(range(len(ids)), key=ids.__getitem__), dtype=np.int32)
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            for name in self.ARRAYS:
                np.save(partial / f"{name[1:]}.npy", getattr(self, name))
            meta = {"format": FORMAT, "stamp": stamp, "k1": self.k1, "b": self.b, "average": self._average}
            meta["tokenizer"] = self.tokenizer
            meta |= {"terms": list(self._term_at), "size": self.size}
            (partial / "index.json").write_text(json.dumps(meta))
            if folder.exists():
                shutil.rmtree(folder)
            partial.rename(folder)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    @classmethod
    def load(cls, folder: Path, *, stamp: str = "") -> BM25Index | None:
        """The index saved in ``folder`` with this ``stamp``, its postings memory-mapped; None when there is
        none of this format and stamp."""
        try:
            meta = json.loads((folder / "index.json").read_text())
            if meta.get("format") != FORMAT or meta.get("stamp") != stamp:
                return None
            arrays = {name: np.load(folder / f"{name[1:]}.npy", mmap_mode="r") for name in cls.ARRAYS}
            if len(arrays["_id_order"]) != int(meta["size"]):
                return None
        except (OSError, ValueError, KeyError):
            return None
        index = cls(k1=float(meta["k1"]), b=float(meta["b"]), tokenizer=str(meta["tokenizer"]), _opened=True)
        index._term_at = {term: at for at, term in enumerate(meta["terms"])}
        index._average = float(meta["average"])
        for name, array in arrays.items():
            setattr(index, name, array)
        return index

    # --- ids and positions -----------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self._id_order) if self._opened else len(self.ids)

    def _id(self, position: int) -> str:
        if not self._opened:
            return self.ids[position]
        return bytes(self._ids[int(self._id_offsets[position]) : int(self._id_offsets[position + 1])]).decode()

    def _position(self, doc_id: str) -> int | None:
        """Where ``doc_id`` is in the postings; None for an id the index lacks (an opened index: a binary
        search over the ids in order, a few microseconds, instead of a dict of every id)."""
        if not self._opened:
            return self._doc_at.get(doc_id)
        low, high = 0, len(self._id_order)
        while low < high:
            middle = (low + high) // 2
            if self._id(int(self._id_order[middle])) < doc_id:
                low = middle + 1
            else:
                high = middle
        if low < len(self._id_order) and self._id(int(self._id_order[low])) == doc_id:
            return int(self._id_order[low])
        return None

    def all_ids(self) -> list[str]:
        """Every id, in position order (an opened index decodes them all: not for a question's path)."""
        return self.ids if not self._opened else [self._id(position) for position in range(self.size)]

    # --- the chunks themselves -------------------------------------------------------------

    def chunk(self, doc_id: str) -> tuple[str, dict[str, Any]] | None:
        """The chunk's text and metadata as they were when the index was built; None for an id it lacks.
        Opened from disk, only this chunk's bytes are read."""
        at = self._position(doc_id)
        if at is None:
            return None
        text = bytes(self._texts[int(self._text_offsets[at]) : int(self._text_offsets[at + 1])]).decode()
        meta = bytes(self._metas[int(self._meta_offsets[at]) : int(self._meta_offsets[at + 1])]).decode()
        return text, json.loads(meta)

    # --- searching -------------------------------------------------------------------------

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The term's documents (ascending positions) and how often it occurs in each; None when it occurs nowhere."""
        at = self._term_at.get(term)
        if at is None:
            return None
        low, high = int(self._offsets[at]), int(self._offsets[at + 1])
        return np.asarray(self._positions[low:high]), np.asarray(self._counts[low:high], dtype=np.float64)

    def _idf(self, term: str) -> float:
        at = self._term_at.get(term)
        df = int(self._offsets[at + 1] - self._offsets[at]) if at is not None else 0
        return math.log(1 + (self.size - df + 0.5) / (df + 0.5))

    def search(self, query: str, k: int) -> list[tuple[str, float]]:
        if not self.size:
            return []
        scores = np.zeros(self.size)
        for term in query_terms(query, self.tokenizer, self._term_at.__contains__):
            postings = self._postings(term)
            if postings is None:
                continue
            where, tf = postings
            idf = self._idf(term)
            norm = tf + self.k1 * (1 - self.b + self.b * self._lengths[where] / self._average)
            scores[where] += idf * tf * (self.k1 + 1) / norm
        hits = self._lifted(scores, np.flatnonzero(scores > 0))
        if len(hits) > k > 0:  # keep every hit tied with the k-th: ties go to the earlier document
            kth = np.partition(scores[hits], len(hits) - k)[len(hits) - k]
            hits = hits[scores[hits] >= kth]
        ordered = sorted(hits.tolist(), key=lambda position: (-scores[position], position))[:k]
        return [(self._id(position), float(scores[position])) for position in ordered]

    def _lifted(self, scores: np.ndarray, hits: np.ndarray) -> np.ndarray:
        """Give the chunks beside each hit ``NEIGHBOUR_WEIGHT`` times its score (in place); the positions that
        now score. Each hit pushes to its two neighbours, so the work grows with the hits, and a chunk is
        the neighbour before (or after) of one chunk only, so no two pushes of one line meet."""
        if not len(hits) or not len(self._before):
            return hits
        share = NEIGHBOUR_WEIGHT * scores[hits]
        lent = np.zeros(len(scores) + 1)  # the last place takes the pushes to -1, no neighbour
        lent[np.asarray(self._before[hits])] += share
        lent[np.asarray(self._after[hits])] += share
        scores += lent[:-1]
        scoring: np.ndarray = np.flatnonzero(scores > 0)
        return scoring

    def coverage(self, query: str, doc_id: str) -> float:
        """Share of the question's terms found in one document, weighted by rarity (0..1).

        Unlike BM25 or a fused rank it is comparable across questions, so it is
        what the chat's relevance threshold applies to.
        """
        wanted = query_terms(query, self.tokenizer, self._term_at.__contains__)
        position = self._position(doc_id) if wanted else None
        if position is None:
            return 0.0

        def holds(term: str) -> bool:
            postings = self._postings(term)
            if postings is None:
                return False
            at = int(np.searchsorted(postings[0], position))
            return at < len(postings[0]) and int(postings[0][at]) == position

        total = sum(self._idf(term) for term in wanted)
        found = sum(self._idf(term) for term in wanted if holds(term))
        return found / total if total else 0.0


def _neighbours(metadatas: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """For each chunk, the position of the chunk before it and after it in the same source (metadata
    ``source`` and ``chunk_index``), -1 where there is none."""
    at: dict[tuple[str, int], int] = {}
    for position, meta in enumerate(metadatas):
        if "source" in meta and "chunk_index" in meta:
            at[str(meta["source"]), int(meta["chunk_index"])] = position
    before = np.full(len(metadatas), -1, dtype=np.int32)
    after = np.full(len(metadatas), -1, dtype=np.int32)
    for (source, index), position in at.items():
        before[position] = at.get((source, index - 1), -1)
        after[position] = at.get((source, index + 1), -1)
    return before, after


def _blob(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """``parts`` end to end as one byte array, and where each starts (one more offset: the end)."""
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(part) for part in parts], out=offsets[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets


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
