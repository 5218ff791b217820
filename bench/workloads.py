"""Synthetic prompts of an exact token length (counted by the engine's own tokenizer)."""

from __future__ import annotations

import random

import httpx

from rag import vllm_client

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
