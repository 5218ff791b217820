"""The scripted server's simulated prefix cache (``Script.prefix_cache``): cached tokens are the
longest block-aligned prefix served before, the TTFT shrinks with them, a reset empties it, and
without one the server reports its fixed 16 cached tokens as before."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from labapp.ops import scripted
from labapp.ops.scripted import PrefixCache
from labapp.ops.scripted import run as scripted_run
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord

OPENING = "가" * 200  # 600 bytes: 12 whole blocks of 48 bytes (576) and a partial one


def test_a_new_prompt_is_cold_and_a_longer_one_starting_the_same_way_finds_its_whole_blocks() -> None:
    cache = PrefixCache(block_bytes=48)
    tokens = len(OPENING.encode()) // 3 + 1
    assert cache.serve(OPENING, tokens) == 0
    follow_up = OPENING + "그리고 다음 질문입니다."
    longer_tokens = len(follow_up.encode()) // 3 + 1
    # The opening's 12 whole blocks are found (its partial last block was never cached), in tokens of the longer prompt.
    assert cache.serve(follow_up, longer_tokens) == longer_tokens * 576 // len(follow_up.encode())
    assert cache.queries == tokens + longer_tokens and cache.hits > 0


def test_a_prompt_that_differs_early_finds_only_the_blocks_before_the_difference() -> None:
    cache = PrefixCache(block_bytes=48)
    cache.serve(OPENING, 201)
    changed = OPENING[:40] + "나" + OPENING[41:]  # byte 120: inside the third block
    assert cache.serve(changed, 201) == 201 * 96 // 600  # two whole blocks
    assert cache.serve("다른 대화" + OPENING, 201) == 0  # another opening: nothing shared


def test_the_last_prompt_token_is_always_computed_and_a_reset_forgets_everything() -> None:
    cache = PrefixCache(block_bytes=48)
    whole = "가" * 192  # 576 bytes: exactly 12 blocks
    cache.serve(whole, 193)
    assert cache.serve(whole, 193) == 192  # the very same prompt: all but the last token
    cache.reset()
    assert cache.serve(OPENING, 201) == 0


def test_it_forgets_the_least_recently_used_blocks_past_its_size() -> None:
    cache = PrefixCache(block_bytes=48, max_blocks=12)
    cache.serve(OPENING, 201)
    cache.serve("다" * 200, 201)  # twelve other blocks push the first prompt's out
    assert cache.serve(OPENING, 201) == 0


def test_the_ttft_grows_with_the_uncached_tokens_only() -> None:
    cache = PrefixCache(prefill_s_per_token=0.001)
    assert cache.ttft_s(0.01, 300, 0) == 0.31
    assert round(cache.ttft_s(0.01, 300, 280), 6) == 0.03


def _stream(url: str, prompt: str) -> RequestRecord:
    spec = vllm_client.RequestSpec(prompt=prompt, max_tokens=2, ignore_eos=False)

    async def go() -> RequestRecord:
        async with vllm_client.connect(url, timeout=10.0) as http:
            return await vllm_client.stream_request(spec, model="fake-model", client=http, timeout=10.0)

    return asyncio.run(go())


def test_the_server_reports_the_caches_tokens_its_ttft_and_counters_and_resets_on_post() -> None:
    script = scripted.Script(delay_s=0.001, prefix_cache=PrefixCache(prefill_s_per_token=0.0005))
    with scripted.serve(script) as url:
        cold, warm = _stream(url, OPENING), _stream(url, OPENING + " 다음 질문")
        assert cold.success and warm.success
        assert cold.cached_tokens == 0 and warm.cached_tokens and warm.cached_tokens > 150
        assert warm.ttft is not None and cold.ttft is not None and warm.ttft < cold.ttft
        assert cold.prefill_time_server is not None and warm.prefill_time_server is not None
        assert cold.prefill_time_server > warm.prefill_time_server  # vLLM's per-request metric says so too
        metrics = httpx.get(f"{url}/metrics").text
        assert f'vllm:prefix_cache_hits_total{{model_name="fake-model",engine="0"}} {warm.cached_tokens}' in metrics
        assert httpx.post(f"{url}/reset_prefix_cache").json() == {"success": True}
        assert _stream(url, OPENING).cached_tokens == 0


def test_without_a_prefix_cache_the_server_reports_its_fixed_cached_tokens_and_has_no_reset() -> None:
    with scripted.serve(scripted.Script(delay_s=0.001)) as url:
        assert _stream(url, OPENING).cached_tokens == 16 and _stream(url, OPENING).cached_tokens == 16
        assert httpx.post(f"{url}/reset_prefix_cache").status_code == 404


def test_the_command_line_turns_the_cache_on(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[scripted.Script] = []

    async def keep(script: scripted.Script, host: str, port: int) -> None:
        seen.append(script)

    monkeypatch.setattr(scripted_run, "run_server", keep)
    scripted_run.main(["--port", "0", "--prefix-cache", "--prefill-ms-per-token", "2"])
    assert seen[0].prefix_cache is not None and seen[0].prefix_cache.prefill_s_per_token == 0.002
