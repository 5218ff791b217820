"""Real RAG prompts for the kinds that measure them (Labs 4-6, and the load sweep's "rag" workload).

The chat's own retrieval and template, over the Korean evaluation questions. Retrieval
embeds, searches and reads the database, so it runs in a worker thread.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.utils.translation import gettext_lazy as _

from bench.kinds.registry import Field
from bench.workloads import RagPrompt, answer_coverage, rag_prompts, rag_questions
from rag.chunking import CHUNK_SIZES
from rag.vllm.records import RequestRecord


def chunk_size_field() -> Field:
    """The one chunk size of a kind's prompts: one of the indexed sizes."""
    return Field("chunk_size", _("청크 크기 (자)"), "choice", choices=tuple((size, str(size)) for size in CHUNK_SIZES))


async def questions(count: int, *, seed: int) -> list[Any]:
    return list(await sync_to_async(rag_questions)(count, seed=seed))


async def prompts(chosen: list[Any], **settings: Any) -> list[RagPrompt]:
    """``rag_prompts`` of the questions at ``settings`` (top_k, chunk_size, brief)."""
    return list(await sync_to_async(rag_prompts, thread_sensitive=False)(chosen, **settings))


def answer(prompt: RagPrompt, record: RequestRecord) -> dict[str, Any]:
    """What the job page shows of an answer: the question, the answer and how much of the evidence it holds."""
    return {
        "question": prompt.question,
        "answer": record.generated_text.strip(),
        "coverage": answer_coverage(record.generated_text, prompt.evidence),
        "output_tokens": record.output_tokens,
        "finish_reason": record.finish_reason,
    }


TEMPLATE_TOKENS = 200  # a RAG prompt's template and question, at most


def context_tokens(top_k: int, chunk_size: int) -> int:
    """Prompt tokens of a RAG request: Korean text is at most about one token per character, plus the template."""
    return top_k * chunk_size + TEMPLATE_TOKENS


# Tokens a chunk-size character of retrieved text costs, for a run's expected time (not its upper bound):
# Gemma 3's tokenizer reads the Korean chapter at 0.53-0.58 tokens a character, and chunks run a little
# shorter than their size (2026-12-04, tokenizers over labapp/chapter/content/chapter/*.ko.md).
TOKENS_PER_CHAR = 0.55


def expected_prompt_tokens(top_k: int, chunk_size: int) -> int:
    """Prompt tokens a RAG request is expected to have before any retrieval: ``top_k`` chunks of
    ``chunk_size`` characters at the chapter's tokens per character, plus the template and question."""
    return round(top_k * chunk_size * TOKENS_PER_CHAR) + TEMPLATE_TOKENS


# How the run-time estimate of a RAG lab reckons its prompts (``Lab.shapes_basis``).
RECKONED = _("프롬프트 길이는 검색 전이라 top-k × 청크 크기로 어림함")


def rag_longest(top_k: int, chunk_size: int, max_tokens: int) -> int:
    """Tokens of a RAG request, prompt and answer."""
    return context_tokens(top_k, chunk_size) + max_tokens
