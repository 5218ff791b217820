"""The real vllm-router before two scripted replicas with their own prefix caches: on follow-up turns
of conversations (each turn's prompt the conversation so far and a new question, X-Session-ID the
conversation), consistent_hash keeps a conversation on one replica and finds its prefix cached;
round_robin sends the next turn to the other replica about half the time."""

from __future__ import annotations

import asyncio

import httpx

from bench import router_run
from rag.vllm import client as vllm_client


def follow_up_hit_rate(url: str, conversations: int = 6, turns: int = 4) -> float:
    async def conversation(http: httpx.AsyncClient, n: int) -> list[tuple[int, int]]:
        prompt, seen = f"#대화 {n}\n" + "프리필과 디코드의 차이를 설명하는 문맥입니다. " * 20, []
        for turn in range(turns):
            prompt += f"\n질문 {turn}: " + "캐시는 어떻게 쓰이나요? " * 12 + "\n"
            spec = vllm_client.RequestSpec(prompt=prompt, max_tokens=4, ignore_eos=False)
            record = await vllm_client.stream_request(
                spec, model="fake-model", client=http, timeout=10.0, session=f"conversation-{n}"
            )
            assert record.success, record.error
            prompt += record.generated_text
            if turn:
                seen.append((record.cached_tokens or 0, record.prompt_tokens or 0))
        return seen

    async def go() -> float:
        async with vllm_client.connect(url, timeout=10.0) as http:
            done = await asyncio.gather(*(conversation(http, n) for n in range(conversations)))
        pairs = [pair for turns_ in done for pair in turns_]
        return sum(c for c, _ in pairs) / sum(p for _, p in pairs)

    return asyncio.run(go())


def test_consistent_hash_finds_the_conversation_cached_far_more_often_than_round_robin(
    prefix_replicas: list[str],
) -> None:
    rates = {}
    for policy in ("round_robin", "consistent_hash"):
        for engine in prefix_replicas:
            assert httpx.post(f"{engine}/reset_prefix_cache").status_code == 200
        with router_run.started(policy, prefix_replicas) as url:
            rates[policy] = follow_up_hit_rate(url)
    assert rates["consistent_hash"] > 0.75, rates
    assert rates["consistent_hash"] > rates["round_robin"] + 0.1, rates
