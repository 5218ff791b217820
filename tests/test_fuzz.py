"""Input fuzzing (Hypothesis): whatever a browser or a file sends, the answer is a clear
rejection or an acceptance, never an exception or a 5xx.

No engine, Redis, Chroma or Celery: the chat's answer run, the job queue and the
ingestion queue are stubbed; each property runs a few dozen examples.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import hypothesis
import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.utils import translation
from hypothesis import HealthCheck, event, example, given
from hypothesis import strategies as st

from bench import configs, kinds, services, views
from bench.forms import form_fields
from labapp.asgi import application
from rag import ask as rag_ask
from rag import chat, documents, embeddings, prompting
from rag.models import Answer, Document
from tests import aio

FUZZ = hypothesis.settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Any JSON value, with the awkward ones up front: huge and negative integers, NaN and
# infinities (Python's json writes and reads them), empty and odd text.
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([0, -1, 2**63 - 1, 2**63, 10**30, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


# --- the chat websocket -----------------------------------------------------------------

CLIENT_ID = st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True)
SETTING_KEYS = st.sampled_from(sorted(prompting.ChatSettings.__dataclass_fields__)) | st.text(max_size=8)
ask_frames = st.builds(
    lambda fields, extra: {"type": "ask"} | extra | fields,
    st.fixed_dictionaries(
        {},
        optional={
            "id": CLIENT_ID | json_values,
            "question": st.text(max_size=40) | json_values,
            "settings": st.dictionaries(SETTING_KEYS, json_values, max_size=4) | json_values,
            "conversation": json_values,
            "parent": json_values,
        },
    ),
    st.dictionaries(st.text(max_size=8), json_values, max_size=2),
)
# Asks that are often valid, each field now and then replaced by junk: reaches saving.
near_valid_settings = st.fixed_dictionaries(
    {},
    optional={
        "collection": st.just("chapter") | json_values,
        "top_k": st.integers(0, 20) | json_values,
        "chunk_size": st.sampled_from([200, 500, 1000]) | json_values,
        "threshold": st.floats(0, 1) | json_values,
        "brief": st.booleans() | json_values,
        "max_tokens": st.integers(1, 2048) | json_values,
        "temperature": st.floats(0, 2) | json_values,
    },
)
near_valid_asks = st.fixed_dictionaries(
    {"type": st.just("ask"), "id": CLIENT_ID, "question": st.text(min_size=1, max_size=40)},
    optional={"settings": near_valid_settings, "conversation": json_values, "parent": json_values},
)
stop_frames = st.fixed_dictionaries({"type": st.just("stop")}, optional={"id": CLIENT_ID | json_values})
timing_frames = st.fixed_dictionaries(
    {"type": st.just("client_timing")},
    optional={"answer_id": json_values, "first_token_ms": json_values, "done_ms": json_values},
)
other_frames = st.dictionaries(st.text(max_size=8), json_values, max_size=4) | st.fixed_dictionaries(
    {"type": json_values}
)
PROBE = "probe-after-fuzz"


@pytest.fixture
def chat_socket_cookie(monkeypatch: pytest.MonkeyPatch, settings: Any) -> bytes:
    """A signed-in learner's cookie; answers that do start end at once without an engine."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

    async def no_engine(run: chat.AnswerRun, send: Any, retrieving: Any = None) -> None:
        run.error = "no engine in the fuzz tests"

    monkeypatch.setattr(chat, "answer_run", no_engine)
    monkeypatch.setattr(rag_ask, "search", aio.nothing_found)  # no search in the fuzz tests
    monkeypatch.setattr(embeddings, "warm_in_background", lambda: None)
    client = Client()
    client.force_login(User.objects.get_or_create(username="fuzzer")[0])
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def _exchange(cookie: bytes, *, text: str | None = None, data: bytes | None = None) -> list[dict[str, Any]]:
    """Send one frame, then a probe (a stop for an answer that does not exist); every frame
    that came back up to the probe's error. Raises whatever the consumer raised."""

    async def go() -> list[dict[str, Any]]:
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", cookie)]
        socket = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
        assert (await socket.connect())[0]
        # Raw ASGI: the communicator's send_to refuses an empty frame, a browser does not.
        await socket.send_input({"type": "websocket.receive", "text": text, "bytes": data})
        await socket.send_json_to({"type": "stop", "id": PROBE})
        frames: list[dict[str, Any]] = []
        probed = False
        while not probed or sum(f["type"] == "started" for f in frames) > sum(f["type"] == "done" for f in frames):
            frames.append(await socket.receive_json_from(timeout=10))
            probed = probed or frames[-1].get("id") == PROBE
        await socket.disconnect()
        return frames

    return aio.run(go())


def _check_answered(frames: list[dict[str, Any]], answers_before: int) -> None:
    probes = [frame for frame in frames if frame.get("id") == PROBE]
    assert len(probes) == 1 and probes[0]["type"] == "error" and probes[0]["error"]
    answer = [frame for frame in frames if frame.get("id") != PROBE]
    assert answer, "the frame got no reply"
    assert answer[0]["type"] in ("error", "started", "overhead")
    event(f"reply {answer[0]['type']}")
    for frame in answer:
        if frame["type"] == "error":
            assert isinstance(frame["error"], str) and frame["error"].strip()
    started = sum(frame["type"] == "started" for frame in answer)
    assert Answer.objects.count() == answers_before + started  # an ask that got an error saved nothing


@pytest.mark.django_db(transaction=True)
@FUZZ
@given(frame=near_valid_asks | ask_frames | stop_frames | timing_frames | other_frames)
@example(frame={"type": "ask", "id": "q1", "question": "q", "conversation": 10**30})
@example(frame={"type": "ask", "id": "q1", "question": "q", "settings": {"top_k": 10**400}})
@example(frame={"type": "ask", "id": "q1", "question": "질문\x00"})
@example(frame={"type": "client_timing", "answer_id": 2**63})
def test_any_chat_frame_gets_a_clear_reply_and_the_socket_stays_usable(
    chat_socket_cookie: bytes, frame: dict[str, Any]
) -> None:
    before = Answer.objects.count()
    _check_answered(_exchange(chat_socket_cookie, text=json.dumps(frame)), before)


@pytest.mark.django_db(transaction=True)
@FUZZ
@given(text=st.text(max_size=80) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
@example(text="[" * 50_000)  # under the frame limit, nested past the parser's recursion limit
@example(text='{"a": ' * 10_000)
@example(text="9" * 5000)  # past Python's int-from-text digit limit
@example(text="x" * (64 * 1024 + 1))
def test_any_text_frame_gets_a_clear_reply(chat_socket_cookie: bytes, text: str) -> None:
    before = Answer.objects.count()
    _check_answered(_exchange(chat_socket_cookie, text=text), before)


@pytest.mark.django_db(transaction=True)
@hypothesis.settings(FUZZ, max_examples=10)
@given(data=st.binary(max_size=80))
def test_a_binary_frame_gets_a_clear_reply(chat_socket_cookie: bytes, data: bytes) -> None:
    before = Answer.objects.count()
    frames = _exchange(chat_socket_cookie, data=data)
    assert frames[0]["type"] == "error" and "JSON" in frames[0]["error"]
    _check_answered(frames, before)


# --- job settings -------------------------------------------------------------------------

FORM_FIELDS = list(form_fields(kinds.registry.runnable_kinds()))
CONFIG_KEYS = st.sampled_from([*FORM_FIELDS, "seed", "fixed_input", "fixed_output", "custom"]) | st.text(max_size=8)
number_lists = st.lists(st.integers(-5, 5000) | st.floats(allow_nan=True), max_size=14).map(
    lambda xs: ", ".join(map(str, xs))
)
config_values = (
    json_values
    | number_lists
    | st.sampled_from(["", " ", "1e400", "nan", "-inf", "0x10", "1_000", "١٢", "concurrency", "custom", "500"])
)
raw_configs = st.dictionaries(CONFIG_KEYS, config_values, max_size=8)
KINDS = [kind.name for kind in kinds.registry.runnable_kinds()]  # an imported run is never configured


def _named(exc: configs.ConfigError) -> None:
    assert isinstance(exc.field, str) and exc.field
    assert isinstance(exc.message, str) and exc.message.strip()


@pytest.mark.parametrize("kind", [*KINDS, "nonsense"])
@FUZZ
@given(raw=raw_configs)
@example(raw={"repeats": 10**400})
@example(raw={"workload": "custom", "custom": 5})
@example(raw={"workload": "custom", "custom": [{"max_tokens": 3}]})
def test_job_settings_give_a_config_or_an_error_naming_the_field(kind: str, raw: dict[str, Any]) -> None:
    with translation.override("ko"):
        try:
            config = kinds.config_for(kind, raw, max_model_len=8192)
        except configs.ConfigError as exc:
            _named(exc)
        else:
            assert kind in KINDS and config.total_requests > 0


@pytest.fixture
def bench_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Client, list[dict[str, Any]]]]:
    made: list[dict[str, Any]] = []

    def job_create(**kwargs: Any) -> Any:
        made.append(kwargs)
        return SimpleNamespace(pk=1)

    monkeypatch.setattr(services, "job_create", job_create)
    monkeypatch.setattr(views, "engine_max_model_len", lambda: 8192)
    client = Client()
    client.force_login(User.objects.create(username="bench-fuzzer"))
    yield client, made


form_text = st.text(max_size=30) | number_lists | st.sampled_from(["1e400", "nan", "custom", "rate", "-1", "0"])


def _jsonl(prompt: str, max_tokens: Any, ascii_only: bool) -> str:
    return json.dumps({"prompt": prompt, "max_tokens": max_tokens}, ensure_ascii=ascii_only)


jsonl_lines = st.lists(
    json_values.map(json.dumps)
    | st.builds(_jsonl, st.text(max_size=10), json_values | st.integers(1, 100), st.booleans())
    | st.text(max_size=20),
    max_size=5,
).map(lambda lines: "\n".join(lines).encode())


@pytest.mark.django_db
@FUZZ
@given(
    kind=st.sampled_from(KINDS) | st.text(max_size=8),
    fields=st.dictionaries(st.sampled_from(FORM_FIELDS), form_text, max_size=6),
    upload=st.none() | st.binary(max_size=200) | jsonl_lines,
)
def test_the_job_form_answers_any_post_with_errors_or_a_redirect(
    bench_client: tuple[Client, list[dict[str, Any]]], kind: str, fields: dict[str, str], upload: bytes | None
) -> None:
    client, made = bench_client
    data: dict[str, Any] = {"kind": kind, **fields}
    if upload is not None:
        data["custom_file"] = SimpleUploadedFile("w.jsonl", upload)
    before = len(made)
    response = client.post("/bench/", data)
    event(f"status {response.status_code}")
    assert response.status_code in (200, 302), response.status_code
    if response.status_code == 200:
        assert 'class="error' in response.content.decode() or "errorlist" in response.content.decode()
        assert len(made) == before
    else:
        assert len(made) == before + 1 and made[-1]["kind"] == kind


# --- custom workload files ----------------------------------------------------------------

WHOLE_FILE = ("비어 있습니다", "너무 큽니다", "UTF-8", "개까지입니다", "한 줄도 없습니다")


@FUZZ
@given(data=st.binary(max_size=300) | jsonl_lines)
@example(data=b"[" * 100_000)
@example(data=b'{"prompt": "a", "max_tokens": ' + b"9" * 5000 + b"}")
@example(data=b'{"prompt": "a"}\n\x85{"prompt": 1}')
def test_a_custom_file_gives_prompts_or_an_error_naming_the_file_and_line(data: bytes) -> None:
    with translation.override("ko"):
        try:
            prompts = configs.jsonl_parse(data)
        except configs.ConfigError as exc:
            _named(exc)
            assert exc.field == "custom_file"
            if not any(words in exc.message for words in WHOLE_FILE):
                line = re.match(r"(\d+)번째 줄: .+", exc.message)
                assert line, exc.message
                assert 1 <= int(line.group(1)) <= len(data.decode("utf-8-sig").split("\n"))
        else:
            assert isinstance(prompts, tuple) and prompts
            assert all(isinstance(p.prompt, str) and p.prompt.strip() for p in prompts)


good_prompts = st.lists(
    st.tuples(
        st.text(min_size=1, max_size=12).filter(lambda p: p.strip() and "\x00" not in p),
        st.none() | st.integers(1, 100),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


@FUZZ
@given(items=good_prompts, crlf=st.booleans())
@example(items=[("줄\u2028나눔", None, False), ("next\x85line", 3, False)], crlf=False)
def test_a_well_formed_custom_file_keeps_every_prompt(items: list[tuple[str, int | None, bool]], crlf: bool) -> None:
    lines = [json.dumps({"prompt": p} | ({"max_tokens": m} if m else {}), ensure_ascii=a) for p, m, a in items]
    prompts = configs.jsonl_parse(("\r\n" if crlf else "\n").join(lines).encode())
    assert [(p.prompt, p.max_tokens) for p in prompts] == [(p, m) for p, m, _ in items]


# --- document uploads ---------------------------------------------------------------------


@pytest.fixture
def upload_client(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Client:
    from rag import tasks

    settings.DOCUMENTS_MAX_PER_USER = 100_000  # every example's upload is kept: no quota refusal

    monkeypatch.setattr(tasks.document_ingest, "delay", lambda document_id: None)  # no Celery
    monkeypatch.setattr(documents, "MAX_BYTES", 512)  # sizes around the limit stay small
    client = Client()
    client.force_login(User.objects.create(username="upload-fuzzer"))
    return client


BOUNDARY = "fuzz-boundary-7MA4YWxkTrZu0gW"


def _multipart(filename: str, data: bytes, collection: str) -> bytes:
    """The body a browser (or anyone) sends; built by hand so that any file name gets through."""
    head = f"--{BOUNDARY}\r\nContent-Disposition: form-data; name="
    return (
        f'{head}"collection"\r\n\r\n{collection}\r\n'.encode(errors="surrogatepass")
        + f'{head}"file"; filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode(
            errors="surrogatepass"
        )
        + data
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


@pytest.mark.django_db
@FUZZ
@given(
    stem=st.text(max_size=300),
    suffix=st.sampled_from([".txt", ".md", ".TXT", ".markdown", ".pdf", ".exe", "", "."]),
    data=st.binary(max_size=700) | st.text(max_size=300).map(str.encode) | st.just(b"%PDF-1.4\n" + b"\x00" * 40),
    collection=st.sampled_from(["mine", "mine", "mine", "chapter", ""]) | st.text(max_size=10),
)
def test_an_upload_is_accepted_or_clearly_rejected(
    upload_client: Client, stem: str, suffix: str, data: bytes, collection: str
) -> None:
    before = Document.objects.count()
    body = _multipart(stem + suffix, data, collection)
    response = upload_client.post("/documents/", body, content_type=f"multipart/form-data; boundary={BOUNDARY}")
    event(f"status {response.status_code}")
    assert response.status_code in (200, 302, 400), response.status_code
    if response.status_code == 302:
        assert collection == "mine"
        saved = Document.objects.order_by("-updated_at").first()
        assert saved is not None and saved.filename
        assert saved.text or (saved.kind == "pdf" and saved.raw)  # a PDF's text is read by the worker
    else:
        assert Document.objects.count() == before
        if response.status_code == 200:
            assert 'class="form-error"' in response.content.decode()
