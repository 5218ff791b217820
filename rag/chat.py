"""One chat answer, from question to measured stream: retrieval, prompt, vLLM, timing panel.

The ask (rag/ask.py) checks, searches, saves and orders the steps; this module does the
work of each and reports progress through ``send`` as websocket-ready frames.
Blocking work (embedding, Chroma, the ORM) runs in a thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from labapp import addresses, said
from labapp.said import gettext as _  # an answer's error is saved and said again in each reader's language
from rag import answer_guard, plaintext, prompting, retrieval
from rag.access import CollectionRef
from rag.estimator import gen_seconds
from rag.vectorstore import RetrievalUnavailable
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord

Send = Callable[[dict[str, Any]], Awaitable[None]]
ENGINE_INFO_TTL_S = 30.0


@dataclass
class Speeds:
    prefill: float  # uncached prompt tokens per second
    decode: float  # tokens per second after the first
    basis: str  # where the speeds come from, shown next to the prediction
    samples: int
    basis_job: int | None = None  # the Lab 1 run they come from (the page words it in the reader's language)


@dataclass(frozen=True)
class Engine:
    """The engine an answer is asked on: the learner's pick on the engines page (bench, wired in
    labapp.asgi) or, by default, the configured one. ``url`` empty: the configured engine."""

    url: str = ""
    name: str = ""
    model: str = ""  # the model a registered engine must serve ("" : its first)

    @property
    def base_url(self) -> str:
        """The engine's own address: what the learner's Lab 1 speeds were measured on."""
        return self.url or vllm_client.base_url()

    @property
    def request_url(self) -> str:
        """Where the answer's requests go: a registered engine itself; the configured one through
        vllm-router when one is configured (``vllm_client.chat_url``)."""
        return self.url or vllm_client.chat_url()

    def shown(self) -> dict[str, str]:
        """Name and address (where it was asked) for the answer card, never with the address's credentials."""
        return {"name": str(self.name), "url": addresses.shown(self.request_url)}

    def kept(self) -> dict[str, Any]:
        """``shown`` as the answer's row keeps it: with the name's form (``name_said``), so that the name is
        said again in each reader's language (``conversations.answer_payload``): "기본 엔진", "Default engine"."""
        return self.shown() | {"name_said": self._name_form}

    @functools.cached_property
    def _name_form(self) -> dict[str, Any]:
        """The name's form, made once per engine (``kept`` runs on each of the keeper's writes)."""
        return said.kept(self.name).form


@dataclass
class AnswerRun:
    """Everything measured and decided for one answer; the consumer saves it."""

    question: str
    settings: prompting.ChatSettings
    collection: CollectionRef
    language: str
    stall_timeout_s: float
    received_at: float = field(default_factory=time.perf_counter)
    received_wall: float = 0.0  # the same moment on the wall clock (set from received_at)
    engine: Engine = field(default_factory=Engine)
    record: RequestRecord = field(default_factory=RequestRecord)
    prompt: prompting.Prompt | None = None
    api: str = "completions"  # or "chat": which vLLM endpoint answered
    model: str = ""
    sources: list[dict[str, Any]] = field(default_factory=list)
    notices: list[dict[str, str]] = field(default_factory=list)
    retrieval_ms: float | None = None
    embed_ms: float | None = None
    search_ms: float | None = None
    dense_skipped: bool = False  # a Korean question, the English-only bundled model: BM25 alone
    sent_at: float | None = None  # request handed to vLLM
    first_forward_at: float | None = None  # first token frame handed to the websocket
    last_forward_at: float | None = None
    token_split: dict[str, int | None] = field(default_factory=dict)
    estimate: dict[str, Any] | None = None
    # Why there is an estimate or none (``estimate_set``): "pending", "ok", "no_speeds" (no Lab 1 run on
    # this engine), "no_output" (ended before its first token), "failed". The page words it.
    estimate_state: str = "pending"
    error: str = ""
    # Sent as X-Session-ID: vllm-router's consistent_hash keeps one session's answers on one engine.
    session: str = ""
    # ms since the question arrived at each step (checked, searched, retrieved, prompt, sent; then saved)
    steps: dict[str, float] = field(default_factory=dict)
    # The chat admission's line (``rag.admission``), when the answer waited in it: its first position,
    # the engine's slots and how long it waited (ms; None until admitted). None: a slot was free at once.
    queue: dict[str, Any] | None = None
    queued_s: float = 0.0  # seconds waited in line: apart from the chat's own steps (``prep_ms``) and TTFT
    # Set once vLLM is asked (or the answer ended without asking): the answer's row is written only
    # then, so that the database write never shares the CPU with the steps before the request.
    asked: asyncio.Event = field(default_factory=asyncio.Event, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.received_wall = time.time() - (time.perf_counter() - self.received_at)

    def notice(self, code: str, message: str) -> None:
        self.notices.append({"code": code, "message": message})

    def mark(self, step: str) -> None:
        self.steps[step] = round((time.perf_counter() - self.received_at) * 1000, 2)

    def ms_since_received(self, moment: float | None) -> float | None:
        return None if moment is None else round((moment - self.received_at) * 1000, 1)

    def row_fields(self) -> dict[str, Any]:
        """The answer's row as far as it has come: its text, prompt, sources and timings (written while it
        streams by ``rag.keeper``, and once more when it ends by ``conversations.answer_finish``)."""
        return {
            "text": self.record.generated_text,
            "prompt": self.prompt.text if self.prompt else "",
            "sources": self.sources,
            "timings": self.timings(),
        }

    def timings(self) -> dict[str, Any]:
        r = self.record

        def ms(seconds: float | None) -> float | None:
            return None if seconds is None else round(seconds * 1000, 1)

        return {
            "api": self.api,
            "model": self.model,
            "engine": self.engine.kept(),
            "retrieval_ms": None if self.retrieval_ms is None else round(self.retrieval_ms, 1),
            "embed_ms": None if self.embed_ms is None else round(self.embed_ms, 1),
            "search_ms": None if self.search_ms is None else round(self.search_ms, 1),
            "dense_skipped": self.dense_skipped,
            # question received → request sent, the wait in the admission's line left out (it is its own row)
            "prep_ms": None
            if self.sent_at is None
            else round((self.sent_at - self.received_at - self.queued_s) * 1000, 1),
            "queue_wait_ms": None if self.queue is None else self.queue["wait_ms"],  # None: not queued
            "queue": self.queue,
            "steps": self.steps,
            "client": {
                "ttft_ms": ms(r.ttft),
                "first_chunk_ms": ms(r.first_chunk),
                "e2el_ms": ms(r.e2el),
                "decode_ms": ms(r.decode_time),
                "tpot_ms": ms(r.tpot),
                "chunks": len(r.text_chunk_at),
            },
            "server": {
                "queue_ms": ms(r.queue_time_server),
                "prefill_ms": ms(r.prefill_time_server),
                "decode_ms": ms(r.decode_time_server),
            },
            "prefill_source": r.prefill_time_source,
            "prefill_ms": ms(r.prefill_time),
            "prefill_speed": None if r.prefill_speed is None else round(r.prefill_speed, 1),
            "decode_speed": None if r.decode_speed is None else round(r.decode_speed, 1),
            "tokens": {
                "prompt": r.prompt_tokens,
                "output": r.output_tokens,
                "cached": r.cached_tokens,
                **self.token_split,
            },
            "cached_state": cached_state(r),
            "finish_reason": r.finish_reason,
            # Server side of the websocket: question received → first/last token frame sent.
            "server_first_token_ms": self.ms_since_received(self.first_forward_at),
            # When the question arrived (epoch seconds): a client on the same clock (`make load`) splits
            # its websocket delay into the way in and the way out.
            "received_wall": round(self.received_wall, 4),
            "server_done_ms": self.ms_since_received(self.last_forward_at),
            "estimate": self.estimate,
            "estimate_state": self.estimate_state,
        }


_engine_cache: dict[str, tuple[float, vllm_client.EngineInfo]] = {}


async def _engine(engine: Engine | None = None) -> vllm_client.EngineInfo:
    """The engine's model and length, asked again after ``ENGINE_INFO_TTL_S`` (per engine)."""
    engine = engine or Engine()
    now = time.monotonic()
    cached = _engine_cache.get(engine.request_url)
    if cached is None or now - cached[0] > ENGINE_INFO_TTL_S:
        if engine.url and engine.url.rstrip("/") != vllm_client.base_url().rstrip("/"):
            info = await asyncio.to_thread(vllm_client.engine_info, url=engine.url, wanted=engine.model or None)
        else:
            info = await asyncio.to_thread(vllm_client.chat_engine_info)
        cached = _engine_cache[engine.request_url] = (now, info)
    return cached[1]


def engine_cache_clear() -> None:
    _engine_cache.clear()


_token_counts: dict[str, int] = {}


async def _count_cached(texts: list[str], *, model: str, url: str | None = None) -> list[int]:
    """Engine token counts, remembered by text (a chunk's text is its identity)."""
    keys = [hashlib.sha1(f"{model}\0{t}".encode(), usedforsecurity=False).hexdigest() for t in texts]
    missing = {k: t for t, k in zip(texts, keys, strict=True) if k not in _token_counts}
    if missing:
        http = vllm_client.shared_client(url)
        counted = await vllm_client.count_tokens(list(missing.values()), model=model, client=http)
        _token_counts.update(zip(missing, counted, strict=True))
    return [_token_counts[k] for k in keys]


def _source(chunk: retrieval.RetrievedChunk, ref: CollectionRef) -> dict[str, Any]:
    context = chunk.context_chunk()

    def rounded(value: float | None, digits: int) -> float | None:
        return None if value is None else round(value, digits)

    return {
        "id": chunk.id,
        "rank": chunk.rank,
        "title": plaintext.readable(context.title) or context.title,
        "source": context.source,
        "position": context.position,
        "text": chunk.text,  # as the prompt has it
        "shown": plaintext.readable(chunk.text),  # as the card shows it: markdown marks dropped
        "relevance": chunk.relevance,
        "fused": rounded(chunk.fused_score, 5),
        "dense": rounded(chunk.dense_score, 4),
        "dense_rank": chunk.dense_rank,
        "lexical": rounded(chunk.lexical_score, 3),
        "lexical_rank": chunk.lexical_rank,
        "tokens": None,
        "in_prompt": True,
        "collection": ref.key,
    }


async def retrieved(
    run: AnswerRun, searching: concurrent.futures.Future[retrieval.RetrievalResult | None]
) -> list[prompting.ContextChunk]:
    """The chunks for the prompt from the answer's search (begun on a search thread by ``rag.ask``;
    None: nothing was searched), with its timings, sources and notices on ``run``."""
    s = run.settings
    if s.top_k == 0:
        run.retrieval_ms = 0.0
        return []
    started = time.perf_counter()
    try:
        result = await asyncio.wrap_future(searching)
    except RetrievalUnavailable as exc:
        run.retrieval_ms = (time.perf_counter() - started) * 1000
        run.notice("retrieval_unavailable", _("검색 불가: 자료 없이 답합니다 (%(why)s)") % {"why": exc})
        return []
    if result is None:  # a search whose ask failed its check: nobody answers it
        run.retrieval_ms = 0.0
        return []
    run.retrieval_ms, run.embed_ms, run.search_ms = result.retrieval_ms, result.embed_ms, result.search_ms
    run.dense_skipped = result.dense_skipped
    if result.dense_unavailable:
        why = {"why": result.dense_unavailable}
        run.notice("dense_unavailable", _("벡터 검색 불가: BM25 낱말 검색만으로 찾았습니다 (%(why)s)") % why)
    run.sources = [_source(chunk, run.collection) for chunk in result.chunks]
    if not result.chunks:
        if result.below_threshold:
            message = _("관련도 기준(%(t).2f)을 넘는 자료가 없어 자료 없이 답합니다.") % {"t": s.threshold}
        else:
            message = _("이 모음에 자료가 없어 자료 없이 답합니다.")
        run.notice("no_sources", message)
    return [chunk.context_chunk() for chunk in result.chunks]


async def _fit(run: AnswerRun, chunks: list[prompting.ContextChunk], max_model_len: int) -> prompting.Prompt:
    """Build the prompt, dropping the least relevant chunks until it fits the model's length."""
    s = run.settings
    prompt = prompting.prompt_build(run.question, chunks, brief=s.brief, language=run.language)
    if prompting.fits_without_counting(prompt.text, max_tokens=s.max_tokens, max_model_len=max_model_len):
        return prompt
    template_margin = 32 if run.api == "chat" else 1  # the chat template's own tokens; BOS otherwise
    dropped: list[str] = []
    while True:
        (tokens,) = await vllm_client.count_tokens(
            [prompt.text], model=run.model, client=vllm_client.shared_client(run.engine.request_url)
        )
        overflow = tokens + template_margin + s.max_tokens - max_model_len
        if overflow <= 0:
            break
        if not prompt.chunks:
            raise prompting.SettingsError(
                _("질문과 max_tokens(%(m)d)만으로 모델 최대 길이 %(len)d 토큰을 넘습니다.")
                % {"m": s.max_tokens, "len": max_model_len}
            )
        counts = await _count_cached([c.text for c in prompt.chunks], model=run.model, url=run.engine.request_url)
        drop = prompting.chunks_to_drop(
            prompt.chunks,
            overflow_tokens=overflow,
            chunk_tokens={c.id: n for c, n in zip(prompt.chunks, counts, strict=True)},
        )
        dropped += drop
        remaining = [c for c in prompt.chunks if c.id not in drop]
        prompt = prompting.prompt_build(run.question, remaining, brief=s.brief, language=run.language)
    if dropped:
        for src in run.sources:
            src["in_prompt"] = src["id"] not in dropped
        run.notice(
            "trimmed",
            _("프롬프트가 모델 최대 길이(%(len)d 토큰)를 넘어 관련도가 낮은 자료 %(n)d개를 뺐습니다.")
            % {"len": max_model_len, "n": len(dropped)},
        )
    return prompt


async def _measure_prompt(run: AnswerRun) -> None:
    """After the answer: split the prompt's tokens and count each chunk (engine tokenizer)."""
    prompt = run.prompt
    if prompt is None:
        return
    try:
        url = run.engine.request_url
        head, head_context = await vllm_client.count_tokens(
            [prompt.instructions, prompt.instructions + prompt.context],
            model=run.model,
            client=vllm_client.shared_client(url),
        )
        per_chunk = (
            await _count_cached([c.text for c in prompt.chunks], model=run.model, url=url) if prompt.chunks else []
        )
    except vllm_client.EngineUnavailable:
        return
    total = run.record.prompt_tokens
    question = None if total is None else total - head_context
    run.token_split = {"instructions": head, "context": head_context - head, "question": question}
    counts = {c.id: n for c, n in zip(prompt.chunks, per_chunk, strict=True)}
    for src in run.sources:
        src["tokens"] = counts.get(src["id"])


def explain_empty(run: AnswerRun, *, stopped: bool) -> None:
    """An answer that ended without a word of text (the guard cut it all, the model wrote nothing, the
    learner stopped it first) says why on its card, and where its sources are: the retrieval was done
    and is worth reading. A failed answer's error says why already."""
    if run.error or run.record.generated_text.strip():
        return
    reason = run.record.finish_reason
    if reason == answer_guard.FINISH_REASON:
        why = _("답이 없습니다: 모델이 답을 쓰기 전에 되풀이부터 해서 멈췄습니다.")
    elif stopped:
        why = _("답이 없습니다: 첫 글자가 나오기 전에 멈췄습니다.")
    elif reason == "length":
        why = _("답이 없습니다: 모델이 빈칸만 쓰다가 max_tokens에 닿았습니다.")
    else:
        why = _("답이 없습니다: 모델이 아무 글자도 쓰지 않고 끝냈습니다 (끝 토큰이나 멈춤 문자열이 바로 나왔습니다).")
    if run.sources:
        where = _("검색된 자료 %(n)d개는 아래 '검색된 자료'에서 읽을 수 있습니다.") % {"n": len(run.sources)}
    else:
        where = _("검색된 자료도 없었습니다.")
    run.notice("empty", why + " " + where)  # joined, not formatted: each part keeps its msgid


def cached_state(record: RequestRecord) -> str:
    """Where the cached-token count stands: "reported"; "cut" (vLLM puts it only in its final usage
    chunk, and the answer was stopped before it: by the learner or the repeat guard); "unreported"
    (the engine finished without it: it runs without --enable-prompt-tokens-details)."""
    if record.cached_tokens is not None:
        return "reported"
    if record.finish_reason in (None, answer_guard.FINISH_REASON):
        return "cut"
    return "unreported"


def needs_speeds(run: AnswerRun) -> bool:
    """Whether an estimate can be made for ``run``, given the learner's speeds: it did not fail and
    has a shape (prompt tokens and at least one output token), finished, stopped or cut alike.
    Otherwise its ``estimate_state`` says why there is none."""
    if run.error:
        run.estimate_state = "failed"
    elif run.record.prompt_tokens is None or not run.record.output_tokens:
        run.estimate_state = "no_output"
    else:
        return True
    return False


def estimate_set(run: AnswerRun, speeds: Speeds | None) -> None:
    """The estimate on ``run`` from the learner's speeds (``needs_speeds`` first), and its state."""
    run.estimate = estimate(run.record, speeds)
    run.estimate_state = "ok" if run.estimate is not None else "no_speeds"


def estimate(record: RequestRecord, speeds: Speeds | None) -> dict[str, Any] | None:
    """The chapter's estimator on this answer's shape, from the learner's measured speeds."""
    if speeds is None or record.prompt_tokens is None or not record.output_tokens:
        return None
    uncached = record.prompt_tokens - (record.cached_tokens or 0)
    prefill_s, decode_s = gen_seconds(uncached, record.output_tokens, speeds.prefill, speeds.decode)
    measured = None
    if record.prefill_time is not None and record.decode_time is not None:
        measured = round(record.prefill_time + record.decode_time, 2)
    return {
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "total_s": round(prefill_s + decode_s, 2),
        "measured_s": measured,
        "prefill_speed": round(speeds.prefill, 1),
        "decode_speed": round(speeds.decode, 1),
        "basis": speeds.basis,
        "basis_job": speeds.basis_job,
        "samples": speeds.samples,
        "uncached_prompt_tokens": uncached,
        "cached_known": record.cached_tokens is not None,  # unknown: the whole prompt counted as prefill
        "off": estimate_off(record, uncached, (prefill_s, decode_s), speeds),
    }


OFF_RATIO = 1.5  # an estimate this many times off (either way) says which half missed, and why


def estimate_off(
    record: RequestRecord, uncached: int, halves: tuple[float, float], speeds: Speeds
) -> dict[str, Any] | None:
    """Where an estimate far from the measurement went wrong: the half (prefill or decode) that missed
    by more, this answer's own speed in it beside the learner's Lab 1 speed, and the ratio measured /
    estimated. None when it is close, or when the answer has no timings."""
    prefill_t, decode_t = record.prefill_time, record.decode_time
    if prefill_t is None or decode_t is None or sum(halves) <= 0:
        return None
    ratio = (prefill_t + decode_t) / sum(halves)
    if 1 / OFF_RATIO <= ratio <= OFF_RATIO:
        return None
    decode_missed = abs(decode_t - halves[1]) >= abs(prefill_t - halves[0])
    if decode_missed:
        answer = record.decode_speed  # tokens per second after the first, as Lab 1's
    else:
        answer = uncached / prefill_t if prefill_t > 0 else None
    lab = speeds.decode if decode_missed else speeds.prefill
    return {
        "half": "decode" if decode_missed else "prefill",
        "ratio": round(ratio, 1),
        "answer_speed": None if answer is None else round(answer, 1),
        "lab_speed": round(lab, 1),
    }


async def answer_run(run: AnswerRun, send: Send, retrieving: Awaitable[list[prompting.ContextChunk]]) -> None:
    """Take the answer's retrieval (``retrieved``), assemble, stream and measure one answer; errors
    end up in ``run.error``."""
    try:
        info = await _engine(run.engine)
    except vllm_client.EngineUnavailable as exc:
        run.error = _unreachable(exc)
        return
    run.model = info.model
    max_model_len = info.max_model_len or 2048
    if run.settings.max_tokens >= max_model_len:
        run.error = _("max_tokens(%(m)d)가 모델 최대 길이 %(len)d 토큰 이상입니다.") % {
            "m": run.settings.max_tokens,
            "len": max_model_len,
        }
        return
    try:
        http = vllm_client.shared_client(run.engine.request_url)
        run.api = "chat" if await vllm_client.has_chat_template(run.model, client=http) else "completions"
    except vllm_client.EngineUnavailable as exc:
        run.error = _unreachable(exc)
        return

    chunks = await retrieving
    run.mark("retrieved")
    retrieved = {"type": "retrieval", "retrieval_ms": run.retrieval_ms, "sources": run.sources}
    try:
        run.prompt = await _fit(run, chunks, max_model_len)
    except (prompting.SettingsError, vllm_client.EngineUnavailable) as exc:
        await send(retrieved)
        # A settings error's message is ours (its msgid and values); an engine's is its own words.
        run.error = _unreachable(exc) if isinstance(exc, vllm_client.EngineUnavailable) else str(exc)
        return
    run.mark("prompt")
    # These two frames go out while vLLM reads the prompt, not before it is sent: the first token
    # frame waits for them (see ``_stream``).
    prompted = {
        "type": "prompt",
        "api": run.api,
        "prompt": run.prompt.text,
        "sources": run.sources,
        "notices": run.notices,
    }
    await _stream(run, run.prompt, send, before=(retrieved, prompted))
    if run.record.error:
        if not run.record.error.startswith("HTTP "):
            # The engine went away (or stalled): the next ask asks it again at once instead of
            # trusting the cached info, so it fails before retrieval and names the cause.
            engine_cache_clear()
        run.error = _engine_error(
            run.record.error, run.stall_timeout_s, vllm_client.server_name(run.engine.request_url)
        )
        return
    await _measure_prompt(run)


async def _send_all(send: Send, frames: tuple[dict[str, Any], ...]) -> None:
    for frame in frames:
        await send(frame)


async def _stream(
    run: AnswerRun, prompt: prompting.Prompt, send: Send, before: tuple[dict[str, Any], ...] = ()
) -> None:
    """Stream the answer into ``run.record``, forwarding each piece of text as a token frame. The
    ``before`` frames are sent once the request is on its way, and always before any token frame."""
    preamble: asyncio.Future[None] | None = None

    async def on_text(text: str, record: RequestRecord) -> None:
        answer_guard.check(record, question=run.question)  # a repeat cancels the request here
        if preamble is not None:
            await preamble
        now = time.perf_counter()
        first = run.first_forward_at is None
        frame: dict[str, Any] = {"type": "token", "text": text, "n": record.output_tokens}
        if first and record.ttft is not None:
            frame["ttft_ms"] = round(record.ttft * 1000, 1)
        await send(frame)
        if first:
            run.first_forward_at = now
        run.last_forward_at = now

    request = vllm_client.RequestSpec(
        prompt=prompt.text,
        max_tokens=run.settings.max_tokens,
        ignore_eos=False,
        api="chat" if run.api == "chat" else "completions",
        stop=tuple(prompt.stop),
        temperature=run.settings.temperature,
        messages=tuple(prompt.messages()),
    )
    run.sent_at = time.perf_counter()
    run.mark("sent")
    run.asked.set()  # the row's write starts at the request's first wait, as the frames below do
    # Scheduled now, it runs at the request's first wait: the request is written before these frames.
    preamble = asyncio.ensure_future(_send_all(send, before))
    try:
        await vllm_client.stream_request(
            request,
            model=run.model,
            on_text=on_text,
            client=vllm_client.shared_client(run.engine.request_url),
            timeout=run.stall_timeout_s,
            record=run.record,
            session=run.session,
        )
    except answer_guard.Repeated as repeated:  # leaving the stream closed it: vLLM aborts the request
        run.notice("repeat", answer_guard.stop_at(run.record, repeated.cut))
    finally:
        with contextlib.suppress(Exception):  # a closed socket: the stream's own outcome is what counts
            await asyncio.shield(preamble)  # sent whatever became of the request (a stop lets it finish)


def _unreachable(exc: vllm_client.EngineUnavailable) -> str:
    if exc.routed:  # the router is down, not (necessarily) the engines behind it
        return _("vLLM 라우터에 연결할 수 없습니다: %(why)s") % {"why": exc}
    return _("vLLM에 연결할 수 없습니다: %(why)s") % {"why": exc}


def _engine_error(error: str, stall_timeout_s: float, server: str) -> str:
    """The learner's words for a stream's ``error`` from ``server`` (vLLM, or the router in front of it)."""
    if error.startswith("HTTP 400"):
        return _("vLLM이 요청을 거절했습니다 (다시 시도하지 않음): %(why)s") % {"why": error}
    if error.startswith(("ConnectError", "ConnectTimeout")):
        if server == vllm_client.ROUTER_NAME:  # the router is down, not (necessarily) the engines
            return _("vLLM 라우터에 연결할 수 없습니다: %(why)s") % {"why": error}
        return _("vLLM에 연결할 수 없습니다: %(why)s") % {"why": error}
    if "Timeout" in error:
        return _("vLLM이 %(s).0f초 동안 응답하지 않았습니다: %(why)s") % {"s": stall_timeout_s, "why": error}
    return _("vLLM 요청 실패: %(why)s") % {"why": error}
