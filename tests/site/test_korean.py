"""Korean throughout, English on the switch: every page, every job kind's results and charts.

"Untranslated" means: a run of Latin letters in a visible text node, a shown attribute
(title, placeholder, aria-label, alt, a button's value, text kept in data attributes for
scripts) or a chart's text (titles, axis titles, legend and trace names, hover templates)
that is not in ``ALLOWED``, the technical terms the Korean chapter itself uses. Code
(``<code>``, ``<pre>``, ``<kbd>``), scripts, numbers with units (``200ms``, ``p99``),
identifiers (``max_tokens``), paths and URLs are not words. What the test itself stored
(usernames, questions, answers, titles) is user content and is taken out first.

With the language switched to English the same pages show no Hangul outside user content.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, RequestFactory
from django.utils import translation
from django.views import defaults

from bench import kinds, provenance
from bench.kinds import registry, router_policy
from bench.models import BenchJob
from bench.reporting import ProgressReporter
from labapp.classes import services as class_services
from labapp.labs.catalog import LABS
from labapp.models import ChapterSection, Membership
from labapp.ops import scripted
from labapp.templatetags.lab_markdown import markdown
from rag.access import user_collection_name
from rag.models import Answer, Conversation, Document
from tests import aio
from tests.bench.test_bench_labs import _scripted_rag

# The technical terms of the Korean chapter and the lab's own parts, kept in English there too.
ALLOWED = frozenset(
    {"KST", "UTC", "ms/tok"}  # a time zone's name; a unit
    | {
        # timings and speeds the chapter defines (and their units)
        *("TTFT", "TPOT", "ITL", "E2E", "E2EL", "SLO", "tok/s", "req/s", "ms", "s", "KV"),
        # the systems the lab runs, as they name themselves
        *("vLLM", "RAG", "GPU", "CPU", "API", "HTTP", "Redis", "Chroma", "Celery", "Daphne", "SQLite", "sqlite"),
        # file formats and retrieval settings
        *("CSV", "JSON", "JSONL", "URL", "PDF", "txt", "md", "pdf", "top-k", "MB"),
        # the model family, and the language switch naming English in English
        *("LLM", "Gemma", "English"),
        # r² of a line fit; the two settings A and B of the side-by-side comparison; keys as printed on keys
        *("r", "A", "B", "Tab", "Enter", "Space", "RRF"),
        "Asia/Seoul",  # the site's time zone by its IANA name, as the labs list states it
    }
)
# Names of a tool and of API endpoints, as vLLM's documentation writes them.
PHRASES = ("vllm bench serve", "chat completions API", "completions API")
SKIPPED_TAGS = frozenset({"script", "style", "code", "pre", "kbd", "samp", "textarea"})
SHOWN_ATTRIBUTES = frozenset({"title", "placeholder", "aria-label", "alt"})
SHOWN_DATA = re.compile(r"^data-(confirm|ok|bad|msg-.*|.*-text|.*-label|source-.*)$")
TOKEN = re.compile(r"[A-Za-z0-9_#@%/][A-Za-z0-9_.:/#@+%'’-]*")
HANGUL = re.compile(r"[\uac00-\ud7a3\u3131-\u318e]+")
MODEL = "gemma-3-270m"
MISSING = ("/no-such-page/", "/bench/999999/")  # Django's 404 page, and a job that is not there
USERS = ("teacher1", "student1", "student2")
# What this test stores and what the scripted engine and retrieval answer: user content.
USER_TEXT = (
    "가반", "질문", "자료", "안녕하세요", "프리필이 뭔가요?", "프리필과 디코드의 차이", "메모",
    "프리필은 입력을 한 번에 처리합니다.",  # the scripted engine's answer
    # The chapter's worked example is a Korean sentence in both languages (the KV-cache stepper).
    "“연차는 며칠인가요?”", "“15일입니다”", "(연차, 는, 며칠, 인가요)", "‘일’", "‘입니다’",
    # Written by the worker in the server's language (LANGUAGE_CODE) while the job ran: a running
    # job's current cell and a failed job's error are stored text, not translated when shown.
    "입력 20 / 출력 4", "엔진에 연결하지 못했습니다",
    "이유와 함께 자세히 설명하세요.",  # Lab 6's ask appended to each (Korean) question: prompt text, as the question
)  # fmt: skip


class _Page(HTMLParser):
    """The page's shown text (one string per text node or attribute) and its JSON blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.texts: list[str] = []
        self.json_blocks: dict[str, str] = {}
        self._skipping: list[str] = []
        self._json_id: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "script" and a.get("type") == "application/json":
            self._json_id = a.get("id", "")
        if tag in SKIPPED_TAGS or (tag != "html" and a.get("lang", "").startswith("ko")):  # code; Korean content
            self._skipping.append(tag)
        for name, value in a.items():
            if (name in SHOWN_ATTRIBUTES or SHOWN_DATA.match(name)) and value not in ("true", "false"):
                self.texts.append(value)
        if tag == "input" and a.get("type") in ("submit", "button", "reset"):
            self.texts.append(a.get("value", ""))

    def handle_endtag(self, tag: str) -> None:
        if self._skipping and self._skipping[-1] == tag:
            self._skipping.pop()
        if tag == "script":
            self._json_id = None

    def handle_data(self, data: str) -> None:
        if self._json_id is not None:
            self.json_blocks[self._json_id] = self.json_blocks.get(self._json_id, "") + data
        elif not self._skipping:
            self.texts.append(data)


def _figure_texts(figure: dict[str, Any]) -> Iterator[str]:
    def title(value: Any) -> Iterator[str]:
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict) and isinstance(value.get("text"), str):
            yield value["text"]

    layout = figure.get("layout") or {}
    yield from title(layout.get("title"))
    for key, axis in layout.items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            yield from title(axis.get("title"))
            yield from (str(t) for t in axis.get("ticktext") or ())
    yield from title((layout.get("legend") or {}).get("title"))
    yield from (str(a.get("text", "")) for a in layout.get("annotations") or ())
    for trace in figure.get("data") or ():
        yield str(trace.get("name", ""))
        yield from title(trace.get("legendgrouptitle"))
        for axis in ("x", "y"):  # categories are the axis's tick labels
            yield from (v for v in trace.get(axis) or () if isinstance(v, str))
        yield re.sub(r"%\{[^}]*\}|<[^>]+>", " ", str(trace.get("hovertemplate", "")))
        if isinstance(trace.get("text"), str):
            yield trace["text"]


def json_texts(value: Any, *, labels: bool = False) -> Iterator[str]:
    """The shown text in JSON: every figure's texts anywhere in it; every string when ``labels``."""
    if isinstance(value, dict):
        if "data" in value and "layout" in value:
            yield from _figure_texts(value)
            return
        for item in value.values():
            yield from json_texts(item, labels=labels)
    elif isinstance(value, list):
        for item in value:
            yield from json_texts(item, labels=labels)
    elif labels and isinstance(value, str):
        yield value


def _without_user_text(text: str) -> str:
    text = re.sub(r"\{[a-z_]+\}|%\([a-z_]+\)[sd]", " ", text)  # a script's placeholders
    text = re.sub(r'"[A-Za-z_]+"', " ", text)  # a quoted literal: a JSON key, a value to type
    text = re.sub(r"[a-z_\[\]]+(,[a-z_\[\]]+)+", " ", text)  # a CSV header line to type
    text = re.sub(r"(?<=[\uac00-\ud7a3])\s?\([A-Za-z -]+\)", " ", text)  # a gloss: 기본(base) 모델
    for phrase in PHRASES:
        text = text.replace(phrase, " ")
    for made in (*USER_TEXT, *USERS, MODEL):
        text = text.replace(made, " ")
    return text


def english_words(texts: Iterator[str] | list[str]) -> dict[str, str]:
    """The runs of Latin letters in ``texts`` that are neither allowed terms nor numbers, identifiers or paths,
    each with the text it is in."""
    found: dict[str, str] = {}
    for text in texts:
        for token in TOKEN.findall(_without_user_text(text)):
            word = token.strip(".:'’-/%")
            if not re.search("[A-Za-z]", word) or word in ALLOWED:
                continue
            if re.search(r"[0-9_#@%]", word) or token.startswith("/") or "://" in word:
                continue  # a number with its unit, an identifier, a job's number, a path
            found.setdefault(word, " ".join(text.split())[:90])
    return found


def hangul(texts: Iterator[str] | list[str]) -> set[str]:
    """The Hangul in ``texts`` but the language switch's own name for Korean."""
    return {run for text in texts for run in HANGUL.findall(_without_user_text(text))} - {"한국어"}


@dataclass
class Shown:
    """What one response shows: its texts (HTML or JSON)."""

    url: str
    texts: list[str] = field(default_factory=list)


def shown(url: str, content: bytes, content_type: str, *, bodies: tuple[str, ...] = ()) -> Shown:
    """What a response shows; ``bodies`` (the chapter's rendered text, written content with English
    glossary terms in parentheses, checked in its own files) are taken out first."""
    page = Shown(url)
    if content_type.startswith("application/json"):
        page.texts = list(json_texts(json.loads(content)))
        return page
    parser = _Page()
    html = content.decode()
    for body in bodies:
        html = html.replace(body, "")
    parser.feed(html)
    page.texts = parser.texts
    for block_id, block in parser.json_blocks.items():
        page.texts += json_texts(json.loads(block), labels=block_id.endswith("labels"))
    return page


# --- the world: a class, its instructor, two learners, a finished job of every kind ---------

RAW = {
    "speed": {"repeats": "1"},
    "sweep": {
        "repeats": "1",
        "input_lengths": "20, 60",
        "output_lengths": "4, 8",
        "fixed_output": "4",
        "fixed_input": "20",
    },
    "load": {"repeats": "1", "concurrencies": "1, 2", "input_tokens": "20", "output_tokens": "4"},
    "retrieval": {"questions": "2", "top_ks": "1, 3", "chunk_sizes": "200, 500"},
    "prefix": {"contexts": "2", "top_k": "3", "chunk_size": "200"},
    "short": {"questions": "2", "normal_tokens": "16", "caps": "2, 4, 8"},
    "router_policy": {"conversations": "2", "turns": "1"},
}


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, Any]]:
    """Each built-in kind's results, measured on the scripted engine (retrieval scripted too)."""
    results = {}
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        scripted.serve(scripted.Script(delay_s=0.001)) as url,
    ):
        _scripted_rag(monkeypatch)
        # The router policy comparison on the scripted engine twice over, without a router (its own tests run one).
        monkeypatch.setattr(router_policy, "pool_engines", lambda base: [(url, "엔진 1"), (url, "엔진 2")])
        monkeypatch.setattr(router_policy, "routed", lambda policy, urls: contextlib.nullcontext(urls[0]))
        for kind in registry.runnable_kinds():  # an imported run is read from a file, never measured
            config = kinds.config_for(kind.name, RAW.get(kind.name, {}))
            reporter = ProgressReporter(aio.keep_going)
            results[kind.name], _ = aio.run(
                kinds.measure(kind.name, config, base_url=url, model=MODEL, reporter=reporter)
            )
    return results


@pytest.fixture(scope="module")
def readings() -> list[dict[str, Any]]:
    """Two runs' provenance (``bench.provenance``), read from the scripted engine: in development mode,
    and outside it (its config unknown, its /server_info and /metrics named as unread)."""
    found = []
    for dev_mode in (True, False):
        with scripted.serve(scripted.Script(dev_mode=dev_mode, metrics=dev_mode)) as url:
            found.append(aio.run(provenance.read(url, model=MODEL, hardware="2코어 CPU")).as_dict())
    return found


@dataclass
class World:
    teacher: User
    student: User
    newcomer: User
    room: int
    jobs: dict[str, BenchJob]
    others: list[BenchJob]
    conversation: Conversation


def _jobs(
    owner: User, measured: dict[str, dict[str, Any]], readings: list[dict[str, Any]]
) -> tuple[dict[str, BenchJob], list[BenchJob]]:
    jobs = {}
    for name, results in measured.items():
        config = kinds.get(name).config(RAW.get(name, {}))
        raw = {f.name: getattr(config, f.attribute) for f in kinds.get(name).fields if f.widget != "jsonl"}
        jobs[name] = BenchJob.objects.create(
            owner=owner, kind=name, engine_url="http://engine-a:8000", status="done", results=results,
            config=json.loads(json.dumps(raw, default=list)), done_requests=3, total_requests=3,
            provenance=readings[0],
        )  # fmt: skip
    others = [
        BenchJob.objects.create(owner=owner, kind="speed", engine_url="http://engine-a:8000", status=status, **extra)
        for status, extra in (
            ("queued", {}),
            ("running", {"done_requests": 2, "total_requests": 9, "current_cell": "입력 20 / 출력 4"}),
            ("failed", {"error": "엔진에 연결하지 못했습니다"}),
            ("cancelled", {"results": measured["speed"], "provenance": readings[1]}),
        )
    ]
    return jobs, others


def _chat(owner: User) -> Conversation:
    conversation = Conversation.objects.create(owner=owner, title="질문")
    Answer.objects.create(
        conversation=conversation, question="프리필이 뭔가요?", text="안녕하세요", status="done",
        settings={"top_k": 3, "chunk_size": 500, "threshold": 0.3, "max_tokens": 128, "temperature": 0.0,
                  "brief": True, "collection": user_collection_name(owner)},
        sources=[{"id": "c1", "title": "메모", "source": "메모.md", "position": 0, "rank": 0, "score": 0.8,
                  "text": "자료"}],
        timings={"client": {"ttft_ms": 123.4, "e2el_ms": 2000.0, "tpot_ms": 20.0}, "retrieval_ms": 12.0,
                 "tokens": {"prompt": 900, "output": 80, "cached": 16}, "server": {"queue_ms": 1.0}},
    )  # fmt: skip
    Document.objects.create(
        owner=owner, collection=user_collection_name(owner), title="메모", filename="메모.md", kind="md",
        size_bytes=10, text="자료", content_hash="x", status="ready", chunk_counts={"200": 1, "500": 1, "1000": 1},
    )  # fmt: skip
    return conversation


@pytest.fixture
def world(db: None, settings: Any, measured: dict[str, dict[str, Any]], readings: list[dict[str, Any]]) -> World:
    settings.LAB_MODE = "class"
    call_command("load_chapter", verbosity=0)
    teacher, student, newcomer = (User.objects.create_user(username=name) for name in USERS)
    room = class_services.classroom_create(name="가반", instructor=teacher)
    Membership.objects.create(classroom=room, user=student)
    Membership.objects.create(classroom=room, user=newcomer)
    jobs, others = _jobs(student, measured, readings)
    return World(teacher, student, newcomer, room.pk, jobs, others, _chat(student))


def _client(user: User | None, language: str) -> Client:
    client = Client(raise_request_exception=True)
    client.cookies["django_language"] = language
    if user is not None:
        client.force_login(user)
    return client


def _urls(w: World) -> list[tuple[User | None, str]]:
    """(who asks, URL) of every page: the URL conf walked by hand, with a real object for each id."""
    s, t, n = w.student, w.teacher, w.newcomer
    sections = ["/chapter/", *(f"/chapter/{slug}/" for slug in _section_slugs())]
    labs = [(who, f"/labs/{number}/") for number in LABS for who in (s, n)]
    bench = [(s, f"/bench/?kind={kind.name}") for kind in registry.runnable_kinds()]
    details = [(s, f"/bench/{job.pk}/") for job in [*w.jobs.values(), *w.others]]
    compare = [(s, f"/bench/compare/?ids={job.pk}&ids={w.others[3].pk}") for job in [w.jobs["speed"]]]
    base = f"/classes/{w.room}"
    classes = [f"{base}/", f"{base}/results/", f"{base}/charts.json", f"{base}/roster/", f"{base}/assignments/new/",
               f"{base}/learners/{s.pk}/", f"{base}/learners/{n.pk}/"]  # fmt: skip
    classes += [f"{base}/learners/{s.pk}/jobs/{job.pk}/" for job in w.jobs.values()]
    return [
        (None, "/"), (s, "/"), *((s, url) for url in sections), (s, "/labs/"), *labs, (s, "/bench/"), *bench,
        *details, *compare, (s, "/chat/"), (s, f"/chat/{w.conversation.pk}/"), (s, "/chat/history/"),
        (s, "/documents/"), (s, "/documents/rows/"), (s, "/retrieval/"), (s, "/engines/"), (s, "/status/"),
        (None, "/status/banner/"), (t, "/classes/"), (s, "/classes/"), *((t, url) for url in classes),
        (s, "/demo/"), (s, f"/demo/?job={w.jobs['retrieval'].pk}"), (s, f"/demo/sweep/{w.jobs['retrieval'].pk}.json"),
        (None, "/accounts/login/"), (None, "/accounts/signup/"), (s, "/accounts/password_change/"),
        *((s, url) for url in MISSING),
    ]  # fmt: skip


def _section_slugs() -> list[str]:
    return list(ChapterSection.objects.filter(language="ko").values_list("slug", flat=True))


def _bodies() -> tuple[str, ...]:
    return tuple(str(markdown(s.body)) for s in ChapterSection.objects.all())


def _pages(w: World, language: str) -> Iterator[Shown]:
    bodies = _bodies()
    for who, url in _urls(w):
        with translation.override(language):  # each request switches the thread's language: put it back
            try:
                response = _client(who, language).get(url)
            except Exception as exc:  # reported with the words of the other pages
                yield Shown(url, [f"ERROR {exc!r}"])
                continue
        assert response.status_code == (404 if url in MISSING else 200), (url, response.status_code)
        yield shown(url, response.content, response["Content-Type"], bodies=bodies)
    with translation.override(language):
        error = defaults.server_error(RequestFactory().get("/"))
    yield shown("500", error.content, error["Content-Type"])


@pytest.fixture
def stubbed_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.cache import cache

    from labapp.status import probes

    def up() -> dict[str, str]:
        return {"url": "http://engine-a:8000", "version": "1.0", "model": MODEL, "workers": "celery@w1"}

    def down() -> dict[str, str]:
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    monkeypatch.setattr(
        probes,
        "PROBES",
        [probes.ComponentProbe(p.key, p.label, up if i % 2 else down, 5.0) for i, p in enumerate(probes.PROBES)],
    )
    cache.clear()


@pytest.mark.django_db
def test_every_page_and_every_kinds_results_and_charts_are_korean(world: World, stubbed_status: None) -> None:
    found = {page.url: words for page in _pages(world, "ko") if (words := english_words(page.texts))}
    assert not found, "\n".join(
        f"{url}: {word!r} in {text!r}" for url, words in found.items() for word, text in words.items()
    )


@pytest.mark.django_db
def test_with_english_switched_on_no_page_shows_hangul_outside_user_content(world: World, stubbed_status: None) -> None:
    found = {page.url: runs for page in _pages(world, "en") if (runs := hangul(page.texts))}
    assert not found, "\n".join(f"{url}: {sorted(runs)}" for url, runs in found.items())


def test_the_checker_flags_english_words_and_spares_terms_numbers_and_code() -> None:
    page = shown(
        "x",
        b'<p>TTFT 120 ms, 200 tok/s, p99 <code>python manage.py</code> done</p><input type="submit" value="Run">'
        b'<script type="application/json" id="c">{"data": [{"name": "input"}], "layout": {"title": "TTFT"}}</script>',
        "text/html",
    )
    assert set(english_words(page.texts)) == {"done", "Run", "input"}
    assert hangul(["GPU 캐시", "질문"]) == {"캐시"}
