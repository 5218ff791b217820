"""Lab 3, serving under load: levels of concurrency or of request rate, throughput and goodput under an SLO.

Each level sends fresh prompts (no level profits from another's cached prefixes)
of the chosen workload: synthetic token-exact prompts, shared prefixes, real RAG
prompts, or a custom JSONL file. A cancel takes effect between levels.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any

import httpx
from django.utils.translation import gettext_lazy

from bench import configs, plotting, runner, sanity
from bench.kinds import rag_work, registry
from bench.kinds.cells import intervals, request_row, watched_cell
from bench.kinds.checks import Check, all_ok, done_cells, noise_advice
from bench.kinds.labs import KeyNumber, Lab, Target, measured_at
from bench.kinds.registry import Field, Runs
from bench.kinds.session import CLIENT_TIMEOUT_S, keeps_partial, warm_up
from bench.metrics import SLO, summarize
from bench.reporting import Reporter
from bench.workloads import nonce_line, shared_prefix_prompts, synthetic_prompts
from labapp.said import gettext as _
from rag.vllm import client as vllm_client
from rag.vllm import server_metrics

MODES = (
    ("concurrency", gettext_lazy("동시성")),
    ("rate", gettext_lazy("요청률 (감마 간격)")),
    ("ramp", gettext_lazy("요청률 램프 (한 실행 안에서 시작 → 끝)")),
)
RAMP_STRATEGIES = (("linear", gettext_lazy("선형")), ("exponential", gettext_lazy("지수")))
AT_SATURATION = (("continue", gettext_lazy("끝까지 잰다")), ("stop", gettext_lazy("포화된 단계에서 멈춘다")))
WORKLOADS = (
    ("synthetic", gettext_lazy("합성 프롬프트")),
    ("shared_prefix", gettext_lazy("공유 프리픽스")),
    ("rag", gettext_lazy("실제 RAG 프롬프트")),
    ("custom", gettext_lazy("사용자 작업량 (JSONL)")),
)


@dataclass(frozen=True)
class LoadConfig:
    repeats: int = 1  # requests per level = repeats × 8 (custom: every prompt of the file, once)
    mode: str = "concurrency"  # or "rate": requests per second with gamma gaps
    concurrencies: tuple[int, ...] = (1, 2, 4, 8)
    rates: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    burstiness: float = 1.0
    input_tokens: int = 256
    output_tokens: int = 32
    slo_ttft_ms: float = 3000.0
    slo_tpot_ms: float = 200.0
    seed: int = 0
    meets_share: float = 0.9  # a level "meets the SLO" when this share of its requests do
    workload: str = "synthetic"
    prefixes: int = 2  # shared_prefix: this many openings of prefix_tokens, input_tokens of unique tail each
    prefix_tokens: int = 512
    top_k: int = 3  # rag: the evaluation questions with this retrieval setting
    chunk_size: int = 500
    custom: tuple[configs.CustomPrompt, ...] = ()
    at_saturation: str = "continue"  # or "stop": a request-rate sweep ends at its first saturated level
    # mode "ramp": one run whose request rate rises from start to end (vllm bench serve --ramp-up-*)
    ramp_strategy: str = "linear"
    ramp_start_rps: float = 1.0
    ramp_end_rps: float = 8.0
    ramp_requests: int = 48

    @property
    def levels(self) -> tuple[float, ...]:
        if self.mode == "ramp":
            return (self.ramp_end_rps,)
        return tuple(self.concurrencies) if self.mode == "concurrency" else tuple(self.rates)

    @property
    def ramp(self) -> tuple[str, float, float]:
        return (self.ramp_strategy, self.ramp_start_rps, self.ramp_end_rps)

    @property
    def per_level(self) -> int:
        if self.workload == "custom":
            return len(self.custom)
        return self.ramp_requests if self.mode == "ramp" else 8 * self.repeats

    @property
    def total_requests(self) -> int:
        return self.per_level * len(self.levels)

    def longest_requests(self) -> list[tuple[str, int]]:
        if self.workload == "synthetic":
            return [("output_tokens", self.input_tokens + self.output_tokens)]
        if self.workload == "shared_prefix":
            return [("prefix_tokens", self.prefix_tokens + self.input_tokens + self.output_tokens + 16)]
        return [("output_tokens", self.output_tokens + 1)]

    def level_label(self, level: float) -> str:
        if self.mode == "concurrency":
            return _("동시성 %(level)s") % {"level": f"{level:g}"}
        if self.mode == "ramp":
            return ramp_label(self.ramp_start_rps, self.ramp_end_rps)
        return _("요청률 %(level)s req/s") % {"level": f"{level:g}"}

    def shape(self, level: float, number: int) -> runner.LoadShape:
        if self.mode == "concurrency":
            return runner.LoadShape(concurrency=int(level))
        if self.mode == "ramp":
            return runner.LoadShape(ramp=self.ramp, burstiness=self.burstiness, seed=self.seed * 100 + number)
        return runner.LoadShape(request_rate=level, burstiness=self.burstiness, seed=self.seed * 100 + number)


def ramp_label(start: float, end: float) -> str:
    return _("램프 %(start)s → %(end)s req/s") % {"start": f"{start:g}", "end": f"{end:g}"}


# Which settings the form shows for which choice (the rest are read and checked all the same).
BY_RATE = ("mode", ("rate", "ramp"))
RAMP = ("mode", ("ramp",))
MADE_UP = ("workload", ("synthetic", "shared_prefix"))
SHARED = ("workload", ("shared_prefix",))
RAG = ("workload", ("rag",))

FIELDS = (
    Field("repeats", gettext_lazy("반복 횟수"), "integer", low=1, high=20),  # 8 × repeats requests per level
    Field("mode", gettext_lazy("부하 방식"), "choice", choices=MODES),
    Field("concurrencies", gettext_lazy("동시성 단계들"), "integers", low=1, high=512, when=("mode", ("concurrency",))),
    Field("rates", gettext_lazy("요청률 단계들 (req/s)"), "reals", low=0.01, high=1000, when=("mode", ("rate",))),
    Field("burstiness", gettext_lazy("버스트 정도 (1 = 포아송)"), "real", low=0.05, high=100, when=BY_RATE),
    Field(
        "at_saturation",
        gettext_lazy("요청률이 포화를 넘으면"),
        "choice",
        choices=AT_SATURATION,
        when=("mode", ("rate",)),
    ),
    Field("ramp_strategy", gettext_lazy("램프 모양"), "choice", choices=RAMP_STRATEGIES, when=RAMP),
    Field("ramp_start_rps", gettext_lazy("램프 시작 요청률 (req/s)"), "real", low=0.01, high=1000, when=RAMP),
    Field("ramp_end_rps", gettext_lazy("램프 끝 요청률 (req/s)"), "real", low=0.01, high=1000, when=RAMP),
    Field("ramp_requests", gettext_lazy("램프의 요청 수"), "integer", low=8, high=5000, when=RAMP),
    Field("workload", gettext_lazy("작업량"), "choice", choices=WORKLOADS),
    Field("input_tokens", gettext_lazy("입력 토큰"), "integer", low=1, high=1 << 20, when=MADE_UP),
    Field("output_tokens", gettext_lazy("출력 토큰"), "integer", low=1, high=1 << 16),
    Field("prefixes", gettext_lazy("공유 프리픽스 개수"), "integer", low=1, high=64, when=SHARED),
    Field("prefix_tokens", gettext_lazy("프리픽스 길이 (토큰)"), "integer", low=16, high=1 << 20, when=SHARED),
    Field("slo_ttft_ms", gettext_lazy("SLO: TTFT 상한 (ms)"), "real", low=1, high=3_600_000),
    Field("slo_tpot_ms", gettext_lazy("SLO: TPOT 상한 (ms)"), "real", low=0.1, high=600_000),
    Field("top_k", gettext_lazy("top-k"), "integer", low=0, high=10, when=RAG),
    replace(rag_work.chunk_size_field(), when=RAG),
    Field(
        "custom_file",
        gettext_lazy('사용자 작업량 (JSONL, 한 줄에 {"prompt": …})'),
        "jsonl",
        stores="custom",
        help_text=gettext_lazy('작업량이 "사용자 작업량"일 때 보낼 프롬프트'),
        when=("workload", ("custom",)),
    ),
)


def parse(raw: dict[str, Any]) -> LoadConfig:
    values = registry.read_fields(LoadConfig, FIELDS, raw)
    if values["workload"] != "custom":
        values["custom"] = ()  # a file sent along with another workload is not part of the job
    elif not values["custom"]:
        raise configs.ConfigError("custom_file", _("사용자 작업량에는 JSONL 파일이 필요합니다"))
    if values["mode"] == "ramp" and values["ramp_end_rps"] <= values["ramp_start_rps"]:
        raise configs.ConfigError("ramp_end_rps", _("램프의 끝 요청률은 시작 요청률보다 커야 합니다"))
    return LoadConfig(**values)


def check_length(config: LoadConfig, max_model_len: int) -> None:
    registry.length_check(config, max_model_len)
    for number, item in enumerate(config.custom, start=1):
        if (item.max_tokens or config.output_tokens) >= max_model_len:
            raise configs.ConfigError(
                "custom_file",
                _("%(line)d번째 프롬프트: max_tokens가 엔진의 최대 길이 %(limit)d 토큰 이상입니다")
                % {"line": number, "limit": max_model_len},
            )


async def level_specs(
    config: LoadConfig, number: int, *, model: str, http: httpx.AsyncClient
) -> list[runner.RequestSpec]:
    """One level's requests, fresh for each level so no level reuses another's cached prompts."""
    seed = config.seed * 100 + number
    out = config.output_tokens
    if config.workload == "shared_prefix":
        per_prefix = -(-config.per_level // config.prefixes)
        pairs = await shared_prefix_prompts(
            config.prefixes,
            per_prefix,
            prefix_tokens=config.prefix_tokens,
            suffix_tokens=config.input_tokens,
            seed=seed,
            model=model,
            client=http,
        )
        # The level number goes first so that each level starts cold; prefixes repeat within it.
        return [runner.RequestSpec(prompt=nonce_line(seed) + p, max_tokens=out) for _, p in pairs[: config.per_level]]
    if config.workload == "rag":
        questions = await rag_work.questions(config.per_level, seed=config.seed)
        rag = await rag_work.prompts(questions, top_k=config.top_k, chunk_size=config.chunk_size)
        texts = [rag[i % len(rag)].text for i in range(config.per_level)]
        return [runner.RequestSpec(prompt=nonce_line(seed, i) + t, max_tokens=out) for i, t in enumerate(texts)]
    if config.workload == "custom":
        return [
            runner.RequestSpec(prompt=nonce_line(seed, i) + c.prompt, max_tokens=c.max_tokens or out)
            for i, c in enumerate(config.custom)
        ]
    prompts = await synthetic_prompts(config.per_level, config.input_tokens, seed=seed, model=model, client=http)
    return [runner.RequestSpec(prompt=p, max_tokens=out) for p in prompts]


LEVEL_KEYS = (
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_e2el_ms",
    "max_concurrent_requests",
    "max_output_tokens_per_s",
    "peak_in_flight",
    "mean_client_queue_ms",
    "p99_client_queue_ms",
)


def level_cell(config: LoadConfig, level: float, run: runner.RunResult, server: dict[str, Any]) -> dict[str, Any]:
    """One level's aggregates (docs/metrics.md, "Per run (aggregates)"), its requests and whether it meets the SLO."""
    slo = SLO(ttft_ms=config.slo_ttft_ms, tpot_ms=config.slo_tpot_ms)
    summary = summarize(run.records, duration=run.duration, slo=slo, peak_in_flight=run.max_concurrent)
    cell = (
        {key: summary[key] for key in LEVEL_KEYS}
        | intervals([r for r in run.records if r.success])
        | {
            "level": level,
            "load_mode": config.mode,
            "workload": config.workload,
            "input_tokens": config.input_tokens,
            "output_tokens": config.output_tokens,
            "errors": [r.error for r in run.records if r.error],
            "run_started": run.started,
            "requests": [request_row(r) for r in run.records],
        }
    )
    if config.mode == "concurrency":
        cell["concurrency"] = int(level)
    elif config.mode == "ramp":
        n = len(run.records)
        cell["ramp"] = {"strategy": config.ramp_strategy, "start_rps": config.ramp_start_rps, "end_rps": level}
        cell["target_rates"] = [round(runner.ramp_rate(config.ramp, i, n), 4) for i in range(n)]
    else:
        cell["request_rate"] = level
    cell["meets_slo"] = bool(
        summary["request_throughput"]
        and summary["request_goodput"] >= config.meets_share * summary["request_throughput"]
    )
    cell["sanity"] = sanity.level(run.records, duration=run.duration, mode=config.mode, level=level, server=server)
    if config.mode == "ramp":
        cell["sanity"]["knee_rps"] = sanity.ramp_knee(run.records, cell["target_rates"])
    # The level's own requests in flight: its concurrency, or (at a request rate) the most it had at once.
    own = int(level) if config.mode == "concurrency" else run.max_concurrent
    return watched_cell(cell, server, own=own)


def summary(cells: list[dict[str, Any]], config: LoadConfig) -> dict[str, Any]:
    meeting = [c["level"] for c in cells if c.get("meets_slo")]
    return {
        "slo": {"ttft_ms": config.slo_ttft_ms, "tpot_ms": config.slo_tpot_ms, "share": config.meets_share},
        "load_mode": config.mode,
        # The highest level meeting the SLO: at a concurrency, the "max valid concurrency".
        "best_level": max(meeting) if meeting else None,
        "best_concurrency": max(meeting) if meeting and config.mode == "concurrency" else None,
        "peak_output_throughput": max((c["output_throughput"] for c in cells), default=None),
        "sanity": sanity.run_summary(cells, mode=config.mode),
    }


async def measure(config: LoadConfig, *, base_url: str, model: str, reporter: Reporter) -> tuple[dict[str, Any], bool]:
    """Each load level in turn with fresh prompts; a cancel takes effect between levels."""
    cells: list[dict[str, Any]] = []
    cancelled = False
    stopped: float | None = None
    done = 0
    with keeps_partial(lambda: {"cells": cells, "cancelled": False} | summary(cells, config)):
        async with vllm_client.connect(base_url, timeout=CLIENT_TIMEOUT_S) as http:
            await warm_up(base_url=base_url, model=model, seed=config.seed)
            for number, level in enumerate(config.levels):
                label = config.level_label(level)
                if not await reporter.progress(done, config.total_requests, label):
                    cancelled = True
                    break
                specs = await level_specs(config, number, model=model, http=http)

                async def on_done(finished: int, total: int, record: Any, base: int = done, label: str = label) -> None:
                    await reporter.progress(base + finished, config.total_requests, label)

                async with server_metrics.watched(http) as server:
                    shape = config.shape(level, number)
                    run = await runner.run(specs, base_url=base_url, model=model, shape=shape, on_done=on_done)
                done += len(specs)
                cells.append(level_cell(config, level, run, server))
                await reporter.partial({"cells": cells, "partial": True})
                if config.at_saturation == "stop" and (cells[-1]["sanity"].get("rising") or {}).get("saturated"):
                    stopped = level
                    break
    results = {"cells": cells, "cancelled": cancelled} | summary(cells, config)
    if stopped is not None:
        results["stopped_at_saturation"] = stopped
    return results, cancelled


# --- the chart, the command, the page ------------------------------------------------------


def _sent_per_second(sends: list[float], window: float = 1.0) -> list[float]:
    """At each send (in order): the requests sent in the ``window`` seconds up to it, per second."""
    return [sum(1 for other in sends if at - window < other <= at) / window for at in sends]


def ramp_chart(runs: Runs) -> dict[str, Any]:
    """A ramp against time: the rate due and the rate sent; each request's TTFT and TPOT where it was sent."""
    import plotly.graph_objects as go

    fig = plotting.figure((_("요청률 램프"), _("요청별 TTFT와 TPOT")))
    for run, results in runs:
        for cell in plotting.cells(results):
            rows = [(r, rate) for r, rate in zip(cell["requests"], cell.get("target_rates") or [], strict=False)]
            rows = sorted((pair for pair in rows if pair[0].get("t_send")), key=lambda pair: pair[0]["t_send"])
            if not rows:
                continue
            start = rows[0][0]["t_send"]
            at = [round(r["t_send"] - start, 3) for r, _rate in rows]
            due = go.Scatter(
                x=at, y=[rate for _r, rate in rows], name=plotting.series_name(run, _("정한 요청률"), runs)
            )
            fig.add_trace(due, 1, 1)
            sent = _sent_per_second([r["t_send"] for r, _rate in rows])
            fig.add_trace(
                go.Scatter(x=at, y=sent, name=plotting.series_name(run, _("보낸 요청률 (1초 창)"), runs)), 1, 1
            )
            for key, series in (("ttft", "TTFT (ms)"), ("tpot", "TPOT (ms)")):
                values = [None if r.get(key) is None else round(1000 * r[key], 1) for r, _rate in rows]
                marks = go.Scatter(x=at, y=values, mode="markers", name=plotting.series_name(run, series, runs))
                fig.add_trace(marks, 1, 2)
    fig.update_xaxes(title_text=_("첫 요청부터의 초"))
    fig.update_yaxes(title_text=_("요청률 (req/s)"), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=_("시간 (ms, 로그 눈금)"), type="log", row=1, col=2)
    return plotting.done(fig)


def chart(runs: Runs) -> dict[str, Any]:
    """Throughput and goodput per level; TTFT p50/p99 and TPOT p50 with the SLO lines (a ramp: ``ramp_chart``)."""
    import plotly.graph_objects as go

    if any(c.get("ramp") for _run, results in runs for c in plotting.cells(results)):
        return ramp_chart(runs)

    fig = plotting.figure((_("처리량과 굿풋"), _("TTFT와 TPOT")))
    axis = _("동시성 (동시에 보내는 요청 수)")
    for run, results in runs:
        shown = plotting.cells(results)
        if shown and shown[0].get("load_mode") == "rate":
            axis = _("요청률 (req/s)")
        levels: list[float] = [c.get("level", c.get("concurrency")) or 0 for c in shown]
        for key, series in (("request_throughput", "req/s"), ("request_goodput", _("굿풋 req/s"))):
            name = plotting.series_name(run, series, runs)
            look = {"dash": "dot"} if key == "request_goodput" else {}  # often on top of req/s: still seen
            fig.add_trace(go.Scatter(x=levels, y=[c[key] for c in shown], name=name, line=look), 1, 1)
        for key, series in (
            ("median_ttft_ms", "TTFT p50"),
            ("p99_ttft_ms", "TTFT p99"),
            ("median_tpot_ms", "TPOT p50"),
        ):
            name = plotting.series_name(run, f"{series} (ms)", runs)
            medians = [c[key] for c in shown]
            bars = plotting.interval_bars(shown, key)  # a median's 95 % interval; a p99 has none
            fig.add_trace(go.Scatter(x=levels, y=medians, name=name, error_y=bars), 1, 2)
        slo = results.get("slo") or {}
        for key, label in (("ttft_ms", "SLO TTFT"), ("tpot_ms", "SLO TPOT")):
            if slo.get(key) and levels:
                name = plotting.series_name(run, f"{label} {slo[key]:g} ms", runs)
                line = go.Scatter(x=[min(levels), max(levels)], y=[slo[key]] * 2, mode="lines", name=name)
                fig.add_trace(line.update(line={"dash": "dash"}), 1, 2)
    fig.update_xaxes(title_text=axis, type="log")
    fig.update_yaxes(title_text=_("처리량 (req/s)"), rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=_("시간 (ms, 로그 눈금)"), type="log", row=1, col=2)
    return plotting.done(fig)


def cell_label(cell: dict[str, Any]) -> str:
    """A level's name on a page: "동시성 4", "요청률 2 req/s" or "램프 1 → 8 req/s"."""
    if "ramp" in cell:
        return ramp_label(cell["ramp"]["start_rps"], cell["ramp"]["end_rps"])
    if "request_rate" in cell:
        return _("요청률 %(level)s req/s") % {"level": f"{cell['request_rate']:g}"}
    return _("동시성 %(level)s") % {"level": cell.get("concurrency", cell.get("level"))}


def cell_name(cell: dict[str, Any]) -> str:
    name = "{}/{}".format(cell.get("input_tokens"), cell.get("output_tokens"))
    if "concurrency" in cell:
        name += f" @{cell['concurrency']}"
    if "request_rate" in cell:
        name += f" @{cell['request_rate']:g} req/s"
    if "ramp" in cell:
        ramp = cell["ramp"]
        name += f" ramp {ramp['strategy']} {ramp['start_rps']:g}-{ramp['end_rps']:g} req/s"
    return name


def _ms(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def cell_line(cell: dict[str, Any]) -> str:
    return (
        f"{cell_name(cell):<24} {cell['request_throughput']:.2f} req/s, {cell['output_throughput']:.1f} tok/s, "
        f"goodput {cell['request_goodput']:.2f} req/s, TTFT p50/p99 {_ms(cell['median_ttft_ms'])}/"
        f"{_ms(cell['p99_ttft_ms'])} ms, TPOT p50 {_ms(cell['median_tpot_ms'], 1)} ms"
    )


def report_lines(results: dict[str, Any]) -> list[str]:
    return [f"highest load meeting the SLO {results.get('slo')}: {results.get('best_level')}"]


MIN_LEVELS = 3
MINIMUMS = gettext_lazy("부하 단계 3개 이상, SLO는 기본값(TTFT ≤ 3000 ms, TPOT ≤ 200 ms) 또는 그보다 엄격하게")


def missing(config: LoadConfig, results: dict[str, Any]) -> list[str]:
    """Lab 3 finds the highest load under the default SLO or a stricter one, over at least ``MIN_LEVELS`` levels."""
    default = LoadConfig()
    lacking = []
    for what, given, most in (
        ("TTFT", config.slo_ttft_ms, default.slo_ttft_ms),
        ("TPOT", config.slo_tpot_ms, default.slo_tpot_ms),
    ):
        if given > most:
            lacking.append(
                _("%(what)s SLO %(most)g ms 이하 (지금 %(now)g ms)") % {"what": what, "most": most, "now": given}
            )
    if len(config.levels) < MIN_LEVELS:
        lacking.append(_("부하 단계 %(least)d개 이상 (지금 %(n)d개)") % {"least": MIN_LEVELS, "n": len(config.levels)})
    return lacking


def _g(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _slo_check(r: dict[str, Any]) -> Check:
    """The highest level meeting the SLO counts only under the default SLO or a stricter one."""
    default, slo, best = LoadConfig(), r.get("slo") or {}, r.get("best_level")
    ttft, tpot = slo.get("ttft_ms"), slo.get("tpot_ms")
    strict = ttft is not None and tpot is not None and ttft <= default.slo_ttft_ms and tpot <= default.slo_tpot_ms
    shown = _("%(best)s (TTFT ≤ %(ttft)s ms, TPOT ≤ %(tpot)s ms)") % {"best": best, "ttft": _g(ttft), "tpot": _g(tpot)}
    if not strict:
        shown = _("SLO가 기본(TTFT ≤ %(ttft)g ms, TPOT ≤ %(tpot)g ms)보다 느슨하거나 없음: %(shown)s") % {
            "ttft": default.slo_ttft_ms,
            "tpot": default.slo_tpot_ms,
            "shown": shown,
        }
    return Check(_("SLO를 지키는 가장 높은 부하를 찾음"), strict and best is not None, shown)


def _rises(name: str, measured: list[dict[str, Any]], key: str, unit: str, advice: str) -> Check:
    """The last level's ``key`` above the first's; the message shows every level's value, so a dip is seen."""
    values = [c.get(key) or 0 for c in measured]
    passed = len(measured) > 1 and values[-1] > values[0]
    digits = 2 if unit == "req/s" else 1
    message = " → ".join(f"{v:.{digits}f}" for v in values) + f" {unit}" if values else "—"
    return Check(name, passed, message, "" if passed else advice)


def checks(r: dict[str, Any]) -> list[Check]:
    measured = done_cells(r)
    slo = _slo_check(r)
    few = _("부하 단계를 2개 이상 측정해야 비교할 수 있습니다.")
    return [
        all_ok(r),
        _rises(
            _("부하를 올리면 처리량이 오름"),
            measured,
            "request_throughput",
            "req/s",
            few
            if len(measured) < 2
            else noise_advice(r) + " " + _("가장 높은 단계가 가장 낮은 단계보다 2배 이상 커야 차이가 뚜렷합니다."),
        ),
        _rises(
            _("부하를 올리면 TPOT가 늘어남"),
            measured,
            "median_tpot_ms",
            "ms",
            few if len(measured) < 2 else noise_advice(r),
        ),
        slo if slo.passed else dataclasses.replace(slo, advice=_slo_advice(r, measured)),
    ]


def _slo_advice(r: dict[str, Any], measured: list[dict[str, Any]]) -> str:
    """Why no level met the SLO: even the lowest load missed it (a busy or slow machine), or the settings."""
    slo, lowest = r.get("slo") or {}, measured[0] if measured else {}
    tpot, ttft = lowest.get("median_tpot_ms") or 0, lowest.get("median_ttft_ms") or 0
    if (
        lowest
        and r.get("best_level") is None
        and (tpot > (slo.get("tpot_ms") or 0) or ttft > (slo.get("ttft_ms") or 0))
    ):
        # One request at a time decodes at the machine's own TPOT (tens of ms on this CPU): far above, it was busy.
        seen = _("가장 낮은 부하(%(level)s)에서도 SLO를 넘었습니다 (TTFT %(ttft).0f ms, TPOT %(tpot).0f ms).") % {
            "level": _g(lowest.get("level")),
            "ttft": ttft,
            "tpot": tpot,
        }
        return seen + " " + noise_advice(r)
    return _("SLO를 기본값(TTFT ≤ 3000 ms, TPOT ≤ 200 ms)으로 두거나 가장 낮은 부하 단계를 1로 두고 다시 실행하세요.")


def peak_what(config: LoadConfig) -> str:
    return _("여러 동시 수준 가운데 최대 출력 처리량")


LAB = Lab(
    number=3,
    slug="lab3-load",
    title=gettext_lazy("실습 3 — 부하 아래의 서빙"),
    checks=checks,
    keys=(
        KeyNumber("best level", "best_level", gettext_lazy("가장 좋은 수준")),
        KeyNumber("peak tok/s", "peak_output_throughput", gettext_lazy("최대 처리량 (tok/s)")),
    ),
    missing=missing,
    minimums=MINIMUMS,
    target=Target(peak_what, "tok/s", measured_at("peak_output_throughput")),
    engine_panels=("requests", "cache"),  # the queue and the KV cache's use under load
)


KIND = registry.register(
    registry.JobKind(
        name="load",
        label=gettext_lazy("부하 스윕 (실습 3)"),
        config_type=LoadConfig,
        fields=FIELDS,
        measure=measure,
        parse=parse,
        check_length=check_length,
        chart=chart,
        summary_template="bench/kinds/load.html",
        cell_name=cell_name,
        cell_label=cell_label,
        cell_line=cell_line,
        report_lines=report_lines,
        sequential=False,
        lab=LAB,
    )
)
