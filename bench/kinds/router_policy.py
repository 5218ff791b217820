"""Issue 29's router policy comparison: the same multi-turn conversations through vllm-router with
each routing policy, in front of two or more engines of one pool.

Per policy a short-lived router starts (``bench.router_run.started``), the conversations run one
request at a time (each turn's prompt is the conversation so far and a new question; the header
X-Session-ID names the conversation, which consistent_hash reads), and the router stops. Each
request records its TTFT, its prompt and cached tokens (the prefix-cache hit, from the usage the
engine reports) and the engine that served it: the one whose /metrics TTFT count rose during it.
A policy's first turns start from a line of their own, so no policy finds another's conversations
cached. Definitions: docs/benchmarks.md, "Router policy comparison".
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from asgiref.sync import sync_to_async
from django.utils.translation import gettext_lazy

from bench import configs, plotting, provenance, router_run
from bench.kinds import registry, speed
from bench.kinds.cells import cell_summary
from bench.kinds.checks import Check
from bench.kinds.registry import Field, Runs
from bench.kinds.session import keeps_partial
from bench.reporting import Reporter
from bench.workloads import nonce_line
from labapp import addresses, said
from labapp.said import gettext as _
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics
from rag.vllm.records import RequestRecord

POLICIES = ("round_robin", "consistent_hash", "cache_aware", "power_of_two")
SERVED = "vllm:time_to_first_token_seconds_count"  # rises by one on the engine that served a request
CONTEXT = "프리필과 디코드의 차이를 설명하는 문맥입니다. " * 20  # about 200 tokens: many cache blocks
QUESTION = "캐시는 어떻게 쓰이나요? " * 12
CONTEXT_TOKENS, QUESTION_TOKENS = 260, 100  # generous token counts of the two, for the length check
REQUEST_TIMEOUT_S = 120.0


def policy_names() -> dict[str, str]:
    return {
        "round_robin": _("라운드 로빈"),
        "consistent_hash": _("세션 고정(consistent_hash)"),
        "cache_aware": _("캐시 인식(cache_aware)"),
        "power_of_two": _("두 개 중 덜 바쁜 쪽(power_of_two)"),
    }


def policies_read(raw: dict[str, Any], default: str) -> str:
    """The policies to compare, comma-separated, as given (or ``default``); ConfigError in words."""
    given = raw.get("policies")
    if given is None or given == "":
        return default
    listed = given if isinstance(given, list | tuple) else str(given).split(",")
    names = [str(name).strip() for name in listed if str(name).strip()]
    unknown = [name for name in names if name not in POLICIES]
    if unknown:
        raise configs.ConfigError(
            "policies",
            _("알 수 없는 라우팅 정책: %(names)s (가능한 정책: %(allowed)s)")
            % {"names": ", ".join(unknown), "allowed": ", ".join(POLICIES)},
        )
    if len(set(names)) != len(names):
        raise configs.ConfigError("policies", _("같은 정책을 두 번 적었습니다: 정책마다 한 번씩 적으세요."))
    if len(names) < 2:
        raise configs.ConfigError(
            "policies", _("비교하려면 정책을 두 개 이상 적으세요 (예: round_robin, consistent_hash).")
        )
    return ",".join(names)


@dataclass(frozen=True)
class RouterPolicyConfig:
    policies: str = "round_robin,consistent_hash"  # comma-separated, in the order they run
    conversations: int = 6
    turns: int = 3  # follow-up turns per conversation, after its first turn
    max_tokens: int = 8
    seed: int = 0

    @property
    def policy_list(self) -> list[str]:
        return self.policies.split(",")

    @property
    def total_requests(self) -> int:
        return len(self.policy_list) * self.conversations * (1 + self.turns)

    def longest_requests(self) -> list[tuple[str, int]]:
        """The last turn holds the context, every question and every answer so far."""
        last = CONTEXT_TOKENS + (1 + self.turns) * QUESTION_TOKENS + (self.turns + 1) * self.max_tokens
        return [("turns", last)]


COMPARED = (
    ("round_robin,consistent_hash", gettext_lazy("라운드 로빈과 세션 고정")),
    ("round_robin,consistent_hash,cache_aware", gettext_lazy("라운드 로빈, 세션 고정, 캐시 인식")),
    ("round_robin,consistent_hash,cache_aware,power_of_two", gettext_lazy("네 정책 모두")),
)
FIELDS = (
    Field(
        "policies",
        gettext_lazy("비교할 정책"),
        "choice",
        choices=COMPARED,
        help_text=gettext_lazy(
            "명령줄에서는 쉼표로 나눠 아무 조합이나: round_robin, consistent_hash, cache_aware, power_of_two"
        ),
    ),
    Field(
        "conversations",
        gettext_lazy("대화 수"),
        "integer",
        low=2,
        high=50,
        help_text=gettext_lazy("정책마다 같은 수의 대화를 하나씩 차례로 보냅니다."),
    ),
    Field(
        "turns",
        gettext_lazy("대화마다 후속 질문 수"),
        "integer",
        low=1,
        high=10,
        help_text=gettext_lazy("첫 질문 뒤에 이어지는 질문 수: 프롬프트는 그때까지의 대화 전체입니다."),
    ),
    Field(
        "max_tokens",
        gettext_lazy("최대 출력 토큰"),
        "integer",
        low=1,
        high=256,
        help_text=gettext_lazy("답마다 생성할 최대 토큰 수: 짧을수록 프리필(캐시 적중)의 차이가 잘 보입니다."),
    ),
)


def parse(raw: dict[str, Any]) -> RouterPolicyConfig:
    plain = tuple(field for field in FIELDS if field.name != "policies")
    values = registry.read_fields(RouterPolicyConfig, plain, raw)
    return RouterPolicyConfig(policies=policies_read(raw, RouterPolicyConfig.policies), **values)


# --- the engines: two or more chatting engines of the job's pool ------------------------------------


# bench.engines knows the engines but imports bench.models, which imports this package: it puts its
# lookup here when Django starts (bench.apps), and the kind never imports it.
pool_lookup: Callable[[str], list[tuple[str, str]]] | None = None


def pool_engines(base_url: str) -> list[tuple[str, str]]:
    """(URL, name) of the engines of ``base_url``'s pool that chat (role chat or both)."""
    if pool_lookup is None:
        raise RuntimeError("bench.engines has not given its lookup (Django is not set up)")
    return pool_lookup(base_url)


def engines_check(base_url: str) -> None:
    """ConfigError (shown on the form) when the pool of ``base_url`` has fewer than two chatting engines."""
    found = pool_engines(base_url)
    if len(found) < 2:
        raise configs.ConfigError("kind", fewer_than_two(found))


def fewer_than_two(found: list[tuple[str, str]]) -> str:
    names = said.join(", ", [name for _url, name in found]) if found else _("없음")
    return _(
        "라우터 정책 비교에는 이 풀에서 채팅을 맡는 엔진(역할: 채팅 또는 측정과 채팅)이 2대 이상 필요합니다. "
        "지금 %(n)d대(%(names)s)뿐이라 %(missing)d대가 모자랍니다: LAB_ENGINES=2 LAB_CHAT_ENGINES=0으로 "
        "띄우거나 같은 풀에 엔진을 더 등록하세요."
    ) % {"n": len(found), "names": names, "missing": 2 - len(found)}


# --- measuring ---------------------------------------------------------------------------------------


def routed(policy: str, engine_urls: list[str]) -> contextlib.AbstractContextManager[str]:
    """The router's URL while the block runs (tests put the engine itself here when there is no router)."""
    return router_run.started(policy, engine_urls)


async def _served(clients: list[httpx.AsyncClient]) -> list[float]:
    counts = []
    for client in clients:
        try:
            counts.append((await server_metrics.snapshot(client)).get(SERVED, 0.0))
        except (httpx.HTTPError, ValueError):
            counts.append(float("nan"))
    return counts


def served_by(before: list[float], after: list[float]) -> int | None:
    """The index of the one engine whose served count rose (None: none, or more than one, did)."""
    rose = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if a - b > 0]
    return rose[0] if len(rose) == 1 else None


@dataclass
class Turn:
    conversation: int
    turn: int
    record: RequestRecord
    engine: int | None


async def _conversations(
    url: str, policy: str, number: int, config: RouterPolicyConfig, clients: list[httpx.AsyncClient], **given: Any
) -> list[Turn]:
    """The conversations through the router at ``url``, one request at a time (``given``: model, progress)."""
    turns: list[Turn] = []
    async with vllm_client.connect(url, timeout=REQUEST_TIMEOUT_S) as http:
        for n in range(config.conversations):
            prompt = nonce_line(config.seed, "router", number, n) + CONTEXT
            for turn in range(1 + config.turns):
                prompt += f"\n질문 {turn}: " + QUESTION + "\n"
                spec = vllm_client.RequestSpec(prompt=prompt, max_tokens=config.max_tokens, ignore_eos=False)
                before = await _served(clients)
                record = await vllm_client.stream_request(
                    spec, model=given["model"], client=http, timeout=REQUEST_TIMEOUT_S,
                    session=f"conversation-{config.seed}-{number}-{n}",
                )  # fmt: skip
                turns.append(Turn(n, turn, record, served_by(before, await _served(clients))))
                prompt += record.generated_text or ""
                if not await given["progress"](policy, turns):
                    return turns
    return turns


async def _policy(
    policy: str, number: int, config: RouterPolicyConfig, urls: list[str], *, model: str, progress: Any, said: Any
) -> list[Turn]:
    """The conversations through a router with ``policy``; ``said(policy, name)`` is told the policy the
    router itself names on its Prometheus once it has routed them (None: it did not say)."""
    clients = [httpx.AsyncClient(base_url=url, timeout=10.0) for url in urls]
    try:
        with routed(policy, urls) as url:
            turns = await _conversations(url, policy, number, config, clients, model=model, progress=progress)
            said(policy, await provenance.said_policy(url))
    finally:
        for client in clients:
            await client.aclose()
    return turns


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def hit_rate(turns: list[Turn]) -> float | None:
    """Cached prompt tokens ÷ prompt tokens over the successful requests (None: no prompt tokens)."""
    ok = [t.record for t in turns if t.record.success]
    prompt = sum(r.prompt_tokens or 0 for r in ok)
    return sum(r.cached_tokens or 0 for r in ok) / prompt if prompt else None


def ttft_ms(turns: list[Turn]) -> list[float]:
    return [t.record.ttft * 1000 for t in turns if t.record.success and t.record.ttft is not None]


def stuck_share(turns: list[Turn]) -> float | None:
    """The share of follow-ups served by the engine that served the turn before it in that conversation."""
    last: dict[int, int | None] = {}
    same = []
    for t in turns:
        if t.turn and last.get(t.conversation) is not None and t.engine is not None:
            same.append(t.engine == last[t.conversation])
        last[t.conversation] = t.engine
    return sum(same) / len(same) if same else None


def policy_cell(policy: str, turns: list[Turn], engine_count: int) -> dict[str, Any]:
    """One policy's cell: the usual summary plus the follow-up hit rate, TTFT p50/p95 of first turns
    and of follow-ups, requests per engine and the balance (fewest ÷ most)."""
    firsts, follows = [t for t in turns if t.turn == 0], [t for t in turns if t.turn > 0]
    cell = cell_summary([t.record for t in turns], cell=policy)
    for row, t in zip(cell["requests"], turns, strict=True):
        row |= {"conversation": t.conversation, "turn": t.turn, "engine": t.engine}
    per_engine = [sum(1 for t in turns if t.engine == i) for i in range(engine_count)]
    first_ttft, follow_ttft = ttft_ms(firsts), ttft_ms(follows)
    most = max(per_engine, default=0)
    balance = min(per_engine) / most if most else None
    return cell | {
        "first_hit_rate": hit_rate(firsts),
        "follow_up_hit_rate": hit_rate(follows),
        "first_ttft_p50_ms": _percentile(first_ttft, 50),
        "first_ttft_p95_ms": _percentile(first_ttft, 95),
        "follow_up_ttft_p50_ms": _percentile(follow_ttft, 50),
        "follow_up_ttft_p95_ms": _percentile(follow_ttft, 95),
        "per_engine": per_engine,
        "unattributed": sum(1 for t in turns if t.engine is None),
        "balance": balance,
        "stuck_share": stuck_share(turns),
    }


async def measure(
    config: RouterPolicyConfig, *, base_url: str, model: str, reporter: Reporter
) -> tuple[dict[str, Any], bool]:
    """Each policy in turn: a router in front of the pool's engines, the conversations, the router stopped."""
    found = await sync_to_async(pool_engines)(base_url)
    if len(found) < 2:
        raise RuntimeError(fewer_than_two(found))
    urls = [url for url, _name in found]
    done: dict[str, list[Turn]] = {}
    said: dict[str, str | None] = {}  # the policy each router named itself (provenance.said_policy)
    cancelled = False

    def results() -> dict[str, Any]:
        cells = [policy_cell(p, turns, len(urls)) | {"policy_said": said.get(p)} for p, turns in done.items() if turns]
        return {"cells": cells, "engines": [addresses.shown(url) for url in urls], "cancelled": cancelled}

    async def progress(policy: str, turns: list[Turn]) -> bool:
        count = sum(len(t) for t in done.values()) + len(turns)
        return await reporter.progress(count, config.total_requests, policy_names().get(policy, policy))

    with keeps_partial(results):
        for number, policy in enumerate(config.policy_list):
            if not await reporter.progress(
                sum(len(t) for t in done.values()), config.total_requests, policy_names()[policy]
            ):
                cancelled = True
                break
            done[policy] = await _policy(
                policy, number, config, urls, model=model, progress=progress, said=said.__setitem__
            )
            await reporter.partial(results() | {"partial": True})
            if len(done[policy]) < config.conversations * (1 + config.turns):
                cancelled = True
                break
    return results() | {"cancelled": cancelled}, cancelled


# --- reading the results -----------------------------------------------------------------------------


def _by_policy(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(c.get("cell")): c for c in results.get("cells") or []}


def chart(runs: Runs) -> dict[str, Any]:
    """Per policy: the follow-up and first-turn hit rates, and TTFT p50 of first turns and follow-ups."""
    return plotting.bars(
        runs,
        (_("캐시된 토큰 / 프롬프트 토큰"), _("TTFT (ms)")),
        (
            [("first_hit_rate", _("첫 질문 적중률")), ("follow_up_hit_rate", _("후속 질문 적중률"))],
            [("first_ttft_p50_ms", _("첫 질문 p50")), ("follow_up_ttft_p50_ms", _("후속 질문 p50"))],
        ),
        names=policy_names(),
    )


def cell_line(cell: dict[str, Any]) -> str:
    ms = speed.ms
    return (
        f"{cell.get('cell')}: follow-up hit rate {ms(cell.get('follow_up_hit_rate'), 2)} "
        f"(first {ms(cell.get('first_hit_rate'), 2)}), TTFT p50/p95 first {ms(cell.get('first_ttft_p50_ms'))}/"
        f"{ms(cell.get('first_ttft_p95_ms'))} ms, follow-ups {ms(cell.get('follow_up_ttft_p50_ms'))}/"
        f"{ms(cell.get('follow_up_ttft_p95_ms'))} ms, per engine {cell.get('per_engine')}"
    )


def _rate(cell: dict[str, Any]) -> float:
    return float(cell.get("follow_up_hit_rate") or 0.0)


def checks(results: dict[str, Any]) -> list[Check]:
    """Session stickiness pays on follow-ups; round robin spreads the requests evenly."""
    by = _by_policy(results)
    sticky, spread = by.get("consistent_hash"), by.get("round_robin")
    found: list[Check] = []
    if sticky is not None and spread is not None:
        higher = _rate(sticky) > _rate(spread)
        found.append(
            Check(
                _("세션 고정 정책에서 후속 질문의 프리픽스 캐시 적중률이 더 높음"),
                higher,
                _("후속 질문 적중률: 세션 고정 %(sticky).2f, 라운드 로빈 %(spread).2f")
                % {"sticky": _rate(sticky), "spread": _rate(spread)},
                ""
                if higher
                else _(
                    "엔진들이 프리픽스 캐싱을 켰는지(--enable-prefix-caching), "
                    "라우터가 대화마다 보내는 세션 헤더를 읽는지 확인하세요."
                ),
            )
        )
    if spread is not None:
        balance = spread.get("balance")
        even = balance is not None and balance >= 0.8
        found.append(
            Check(
                _("라운드 로빈은 요청을 엔진마다 고르게 나눔"),
                even,
                _("엔진별 요청 수: %(counts)s") % {"counts": ", ".join(str(n) for n in spread.get("per_engine") or [])},
                "" if even else _("엔진의 /metrics를 읽지 못했으면 요청이 어느 엔진으로 갔는지 셀 수 없습니다."),
                applies=balance is not None,
            )
        )
    return found + _said_checks(results)


def _said_checks(results: dict[str, Any]) -> list[Check]:
    """Whether each router named, on its Prometheus, the policy it was started with (none when no
    router said: a run from before routers were asked, or routers this project did not start)."""
    named = [(str(c.get("cell")), str(c["policy_said"])) for c in results.get("cells") or [] if c.get("policy_said")]
    if not named:
        return []
    same = all(asked == said for asked, said in named)
    return [
        Check(
            _("라우터마다 요청한 정책으로 라우팅했다고 스스로 말함"),
            same,
            _("요청한 정책 → 라우터가 말한 정책: %(pairs)s")
            % {"pairs": ", ".join(f"{asked} → {said}" for asked, said in named)},
            "" if same else _("설치된 vllm-router가 이 정책 이름을 다르게 읽는지 확인하세요 (vllm-router --help)."),
        )
    ]


KIND = registry.register(
    registry.JobKind(
        name="router_policy",
        label=gettext_lazy("라우터 정책 비교"),
        config_type=RouterPolicyConfig,
        fields=FIELDS,
        measure=measure,
        parse=parse,
        chart=chart,
        summary_template="bench/kinds/router_policy.html",
        cell_label=lambda cell: str(policy_names().get(str(cell.get("cell")), cell.get("cell"))),
        cell_line=cell_line,
        checks=checks,
        engines_check=engines_check,
        router_policies=lambda config: ", ".join(config.policy_list),
        router_engines=lambda base_url: [url for url, _name in pool_engines(base_url)],
    )
)
