"""Synthetic prompts of an exact token length (counted by the engine's own tokenizer)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import httpx

from rag.vllm import client as vllm_client

# Plain words that tokenize one or two tokens each in most vocabularies.
_WORDS = (
    "cache token prefill decode server queue model batch memory latency speed request answer "
    "length prompt output input vector search chunk engine kernel thread core stream budget "
    "apple river stone cloud paper window garden music table light story field bridge market"
).split()


async def synthetic_prompts(
    n: int, input_tokens: int, *, seed: int, model: str, client: httpx.AsyncClient
) -> list[str]:
    """``n`` prompts of exactly ``input_tokens`` tokens each, all with different openings.

    Each starts with its own random words, so no two share a cached prefix; the
    word count is found by bisection on ``/tokenize`` (a few calls per prompt), then
    one-letter words pad the prompt to the exact count.
    """
    if n < 1 or input_tokens < 1:
        raise ValueError("need at least one prompt of at least one token")
    rng = random.Random(seed)
    prompts: list[str] = []
    for index in range(n):
        words = [f"{seed}-{index}"] + [rng.choice(_WORDS) for _ in range(input_tokens * 2 + 8)]

        async def count(k: int, words: list[str] = words) -> int:
            (tokens,) = await vllm_client.count_tokens([" ".join(words[:k])], model=model, client=client)
            return tokens

        low, high = 1, len(words)  # smallest k with count(k) >= input_tokens
        while low < high:
            middle = (low + high) // 2
            if await count(middle) >= input_tokens:
                high = middle
            else:
                low = middle + 1
        # The last word may overshoot by a token or two: stop one word short and pad with a
        # one-letter word, which adds at most one token per step, until the count is exact.
        chosen = words[: max(1, low - 1)]
        tokens = await count(len(chosen), chosen)
        while tokens < input_tokens:
            chosen = [*chosen, "a"]
            tokens = await count(len(chosen), chosen)
        prompts.append(" ".join(chosen))
    return prompts


async def shared_prefix_prompts(
    prefixes: int,
    per_prefix: int,
    *,
    prefix_tokens: int,
    suffix_tokens: int,
    seed: int,
    model: str,
    client: httpx.AsyncClient,
) -> list[tuple[int, str]]:
    """``prefixes`` × ``per_prefix`` prompts: a shared token-exact opening, then a unique tail.

    Returned interleaved (prefix 0, 1, …, 0, 1, …) as (prefix number, prompt), so a
    load run sends every prefix early and later requests can reuse the cached blocks.
    """
    openings = await synthetic_prompts(prefixes, prefix_tokens, seed=seed, model=model, client=client)
    tails = await synthetic_prompts(prefixes * per_prefix, suffix_tokens, seed=seed + 7919, model=model, client=client)
    return [
        (p, openings[p] + "\n" + tails[round_ * prefixes + p]) for round_ in range(per_prefix) for p in range(prefixes)
    ]


@dataclass(frozen=True)
class RagPrompt:
    """One evaluation question turned into the chat's real prompt at a retrieval setting."""

    question_id: str
    question: str
    evidence: str
    text: str
    stop: tuple[str, ...]
    retrieval_ms: float
    context: tuple[Any, ...]  # rag.prompting.ContextChunk, in prompt order
    context_chars: int
    evidence_retrieved: bool

    @property
    def chunks(self) -> int:
        return len(self.context)


def rag_questions(count: int, *, seed: int) -> list[Any]:
    """``count`` questions of the Korean evaluation set, a seeded choice (same seed, same questions)."""
    from rag.evaluation import EVAL_SETS, load_questions

    questions = load_questions(EVAL_SETS[:1])  # the project's own set: the same seed picks what it always picked
    return random.Random(seed).sample(questions, min(count, len(questions)))


def rag_prompts(
    questions: list[Any],
    *,
    top_k: int,
    chunk_size: int,
    brief: bool = False,
    collection: str | None = None,
    example: str = "",
) -> list[RagPrompt]:
    """The real retrieval pipeline (hybrid search, stable chunk order, the chat's template).

    Synchronous: it embeds, searches Chroma and reads the database. ``top_k`` 0
    means no retrieval (the question alone with the instructions).
    """
    from labapp.models import ChapterSection
    from rag import prompting
    from rag.evaluation import answer_rank
    from rag.retrieval import retrieve
    from rag.services import CHAPTER_COLLECTION

    texts = {s.slug: f"{s.title}\n\n{s.body}".strip() for s in ChapterSection.objects.filter(language="ko")}
    out = []
    for question in questions:
        chunks: list[prompting.ContextChunk] = []
        retrieval_ms = 0.0
        found = False
        if top_k > 0:
            result = retrieve(
                question.question,
                collection=collection or CHAPTER_COLLECTION,
                chunk_size=chunk_size,
                top_k=top_k,
                language="ko",
            )
            retrieval_ms = result.retrieval_ms
            found = answer_rank(result, question, texts.get(question.slug, "").find(question.evidence)) is not None
            chunks = [c.context_chunk() for c in result.chunks]
        prompt = prompting.prompt_build(question.question, chunks, brief=brief, example=example)
        out.append(
            RagPrompt(
                question_id=question.id,
                question=question.question,
                evidence=question.evidence,
                text=prompt.text,
                stop=tuple(prompt.stop),
                retrieval_ms=retrieval_ms,
                context=tuple(prompt.chunks),
                context_chars=len(prompt.context),
                evidence_retrieved=found,
            )
        )
    return out


def answer_coverage(answer: str, evidence: str) -> float:
    """Share of the evidence passage's terms that the answer contains (0..1): "still right" at a glance."""
    from rag.lexical import terms

    wanted = set(terms(evidence))
    return len(wanted & set(terms(answer))) / len(wanted) if wanted else 0.0


def nonce_line(seed: int, *parts: object) -> str:
    """A first line unique to one request: its prompt shares no cached prefix with any other."""
    return "#" + "-".join(str(p) for p in (seed, *parts)) + "\n"
