"""How much vllm-router adds to time-to-first-token, against the same engine asked directly.

Each run sends one streamed request straight to the engine and the same request through the
router (LAB_ROUTER's, in front of that engine), alternating which goes first, after a pause
(vLLM's CPU worker busy-polls for a second after each step). Each prompt is the same text with a
fresh nonce at its end, so both requests find the same prefix-cache state: the shared text cached,
the nonce not. TTFT is our client's (``rag.vllm.records``), from sending to the first text.

    python manage.py router_overhead --runs 10 [--engine URL] [--router URL]
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from labapp.ops.report import emit
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord

PROMPT = (
    "프리필은 프롬프트의 모든 토큰을 한 번에 처리해 첫 토큰을 만들고, 디코드는 그 뒤 토큰을 하나씩 만듭니다. "
    "접두사 캐시는 같은 앞부분을 다시 계산하지 않게 합니다. 라우터는 요청을 여러 엔진에 나눕니다. "
) * 6


class Command(BaseCommand):
    help = "Median TTFT through vllm-router vs the same request sent straight to its engine."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=10, help="requests each way")
        parser.add_argument("--engine", default="", help="the engine's base URL (default VLLM_BASE_URL)")
        parser.add_argument("--router", default="", help="the router's base URL (default the embedded one's)")
        parser.add_argument("--max-tokens", type=int, default=8)
        parser.add_argument("--pause", type=float, default=1.5, help="seconds of quiet before each request")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["runs"] < 1:
            raise CommandError("--runs must be at least 1")
        options["engine"] = (options["engine"] or settings.VLLM_BASE_URL).rstrip("/")
        options["router"] = (options["router"] or settings.ROUTER_URL).rstrip("/")
        try:
            summary = asyncio.run(measure(options))
        except (OSError, httpx.HTTPError, vllm_client.EngineUnavailable) as exc:
            raise CommandError(f"could not reach the engine or the router: {exc}") from exc

        def text_lines() -> Iterator[str]:
            yield (
                f"runs {summary['runs']} each way, max_tokens {options['max_tokens']}, pause {options['pause']} s, "
                f"prompt {summary['prompt_tokens']} tokens ({summary['cached_tokens']} cached), "
                f"model {summary['model']}"
            )
            yield f"engine {options['engine']}, router {options['router']}"
            for label, key in (("TTFT direct", "direct_ttft_ms"), ("TTFT through the router", "routed_ttft_ms")):
                yield f"{label:<26} median {summary[key]:8.1f} ms  mean {summary[key.replace('ttft', 'mean')]:8.1f} ms"
            yield f"added by the router        median {summary['added_ms']:8.1f} ms (of each pair's difference)"
            yield f"ratio router/direct TTFT: {summary['ratio']:.3f}"

        emit(self.stdout, summary, json_wanted=options["json"], lines=text_lines)


async def _ask(http: httpx.AsyncClient, model: str, options: dict[str, Any]) -> RequestRecord:
    await asyncio.sleep(options["pause"])
    spec = vllm_client.RequestSpec(
        prompt=f"{PROMPT}({uuid.uuid4().hex[:8]})", max_tokens=options["max_tokens"], ignore_eos=True
    )
    record = await vllm_client.stream_request(spec, model=model, client=http, timeout=300, session="router-overhead")
    if not record.success or record.ttft is None:
        raise CommandError(f"a request to {http.base_url} failed: {record.error or 'no text'}")
    return record


async def measure(options: dict[str, Any]) -> dict[str, Any]:
    model = await vllm_client.engine_model(options["engine"])
    pairs: list[tuple[RequestRecord, RequestRecord]] = []
    async with (
        vllm_client.connect(options["engine"], timeout=300) as engine,
        vllm_client.connect(options["router"], timeout=300) as router,
    ):
        await _ask(engine, model, options | {"pause": 0})  # caches the shared text, warms both connections
        await _ask(router, model, options | {"pause": 0})
        for run in range(options["runs"]):
            if run % 2 == 0:
                direct = await _ask(engine, model, options)
                routed = await _ask(router, model, options)
            else:
                routed = await _ask(router, model, options)
                direct = await _ask(engine, model, options)
            pairs.append((direct, routed))
    direct_ms = [(d.ttft or 0.0) * 1000 for d, _ in pairs]
    routed_ms = [(r.ttft or 0.0) * 1000 for _, r in pairs]
    return {
        "runs": len(pairs),
        "model": model,
        "prompt_tokens": pairs[-1][0].prompt_tokens,
        "cached_tokens": pairs[-1][0].cached_tokens,
        "direct_ttft_ms": round(statistics.median(direct_ms), 1),
        "routed_ttft_ms": round(statistics.median(routed_ms), 1),
        "direct_mean_ms": round(statistics.fmean(direct_ms), 1),
        "routed_mean_ms": round(statistics.fmean(routed_ms), 1),
        "added_ms": round(statistics.median(r - d for d, r in zip(direct_ms, routed_ms, strict=True)), 1),
        "ratio": round(statistics.median(routed_ms) / statistics.median(direct_ms), 3),
        "direct_all_ms": [round(v, 1) for v in direct_ms],
        "routed_all_ms": [round(v, 1) for v in routed_ms],
    }
