"""How much the chat path adds to time-to-first-token, compared with calling vLLM directly.

For each run it asks one question through the real chat websocket (retrieval,
prompt assembly, our client, Daphne, the socket) and sends the very same prompt
straight to vLLM, alternating which goes first. Each question carries a fresh
nonce at the end, so both requests find the same prefix cache state: the shared
instructions and chunks cached, the question itself not. With ``--cold`` the engine's
prefix cache is emptied (``POST /reset_prefix_cache``, the embedded engine's dev mode)
before each request, so both prefill the whole prompt: the TTFT of a first question.

Its questions are asked as a throwaway account of its own (made here, removed afterwards
with its conversations), never as a learner: a tool's answers stay out of everyone's
history. ``--cookie`` asks as that session's account instead (a lab on another database).

    python manage.py chat_overhead --web http://127.0.0.1:8000 --runs 10 [--cold]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
import uuid
from collections.abc import Iterator
from importlib import import_module
from typing import Any

import httpx
import websockets
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from websockets.exceptions import WebSocketException
from websockets.typing import Origin

from labapp.ops.report import emit
from rag.vllm import client as vllm_client
from rag.vllm.records import RequestRecord

QUESTION = "프리필과 디코드는 어떻게 다른가요?"
TOOL_USER_PREFIX = "tool-chat-overhead-"


class Command(BaseCommand):
    help = "Median TTFT through the chat websocket vs the same prompt sent straight to vLLM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--web", default="http://127.0.0.1:8000", help="the lab's web server")
        parser.add_argument("--runs", type=int, default=10)
        parser.add_argument("--top-k", type=int, default=4)
        parser.add_argument("--max-tokens", type=int, default=8)
        parser.add_argument(
            "--pause",
            type=float,
            default=1.5,
            help="seconds of quiet before each request (vLLM's CPU worker busy-polls for 1 s after each step)",
        )
        parser.add_argument(
            "--cold", action="store_true", help="empty vLLM's prefix cache before every request (whole-prompt prefill)"
        )
        parser.add_argument(
            "--cookie",
            default="",
            help="ask as this signed-in session (its answers go into that account's history); "
            "default: a throwaway account of this command's, removed afterwards",
        )
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["runs"] < 1:
            raise CommandError("--runs must be at least 1")
        try:
            with tool_session(options["cookie"]) as cookie:
                summary = asyncio.run(measure(options | {"cookie": cookie}))
        except (OSError, httpx.HTTPError, WebSocketException) as exc:
            raise CommandError(f"could not reach the lab at {options['web']}: {exc}") from exc

        def text_lines() -> Iterator[str]:
            yield (
                f"runs {summary['runs']}, top-k {options['top_k']}, max_tokens {options['max_tokens']}, "
                f"pause {options['pause']} s, {'cold' if options.get('cold') else 'warm'} prefix cache, "
                f"prompt ~{summary['prompt_tokens']} tokens, model {summary['model']}"
            )
            rows = [
                ("TTFT direct to vLLM (our client)", summary["direct_ttft_ms"]),
                ("TTFT through the chat (browser side of the socket)", summary["chat_ttft_ms"]),
                ("  of which retrieval", summary["retrieval_ms"]),
                ("    embedding the question", summary["embed_ms"]),
                ("    searching (Chroma + BM25)", summary["search_ms"]),
                ("  question received -> request sent to vLLM", summary["prep_ms"]),
                ("    of which not retrieval (checks, prompt, thread hops)", summary["prep_beyond_retrieval_ms"]),
                ("  our vLLM client's own TTFT inside the chat", summary["chat_client_ttft_ms"]),
                ("  vLLM's own queue + prefill (server side), the chat's request", summary["server_ms"]),
                ("  vLLM's own queue + prefill (server side), the direct request", summary["direct_server_ms"]),
                ("  first text read by our client -> its frame handed to the socket", summary["forward_ms"]),
                ("  websocket + consumer (socket TTFT - server's first-token send)", summary["socket_ms"]),
                ("overhead the chat adds to TTFT", summary["overhead_ms"]),
                ("overhead without retrieval", summary["overhead_without_retrieval_ms"]),
                ("overhead beyond retrieval and the websocket", summary["overhead_beyond_retrieval_and_socket_ms"]),
                ("  the same on the server's clock (the chat's own steps)", summary["chat_own_ms"]),
            ]
            for label, value in rows:
                yield f"{label:<66} median {value:9.1f} ms"
            steps = ", ".join(f"{name} {ms:.1f}" for name, ms in summary["steps_ms"].items())
            yield f"steps after the question arrived, median ms: {steps}"
            yield f"ratio chat/direct TTFT: {summary['ratio']:.3f}"

        emit(self.stdout, summary, json_wanted=options["json"], lines=text_lines)


@contextlib.contextmanager
def tool_session(given: str = "") -> Iterator[str]:
    """The session cookie the command asks with: ``given``, else a throwaway account's, which is
    removed on the way out with everything it owns (its conversations and answers)."""
    if given:
        yield given if "=" in given else f"{settings.SESSION_COOKIE_NAME}={given}"
        return
    user = get_user_model().objects.create_user(username=TOOL_USER_PREFIX + uuid.uuid4().hex[:12])  # unusable password
    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    try:
        yield f"{settings.SESSION_COOKIE_NAME}={store.session_key}"
    finally:
        store.delete()
        user.delete()


async def _quiet(options: dict[str, Any], engine: httpx.AsyncClient) -> None:
    """The pause before a request; with --cold the prefix cache is emptied first."""
    if options.get("cold"):
        outcome = await vllm_client.reset_prefix_cache(engine)
        if outcome != "ok":
            raise CommandError(f"--cold needs an engine that can empty its prefix cache: {outcome}")
    await asyncio.sleep(options.get("pause", 0))


async def _chat(
    socket: Any, ask_id: str, question: str, options: dict[str, Any], engine: httpx.AsyncClient
) -> tuple[float, dict[str, Any]]:
    ask_settings = {"top_k": options["top_k"], "max_tokens": options["max_tokens"], "temperature": 0}
    await _quiet(options, engine)
    sent = time.perf_counter()
    await socket.send(json.dumps({"type": "ask", "id": ask_id, "question": question, "settings": ask_settings}))
    first: float | None = None
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), 300))
        if frame.get("id") != ask_id:
            continue
        if frame["type"] == "token" and first is None:
            first = time.perf_counter()
        if frame["type"] == "error":
            raise CommandError(f"the chat refused the question: {frame['error']}")
        if frame["type"] == "done":
            answer: dict[str, Any] = frame["answer"]
            if answer["status"] != "done" or first is None:
                raise CommandError(f"the chat answer failed: {answer['error'] or 'no tokens'}")
            return (first - sent) * 1000, answer


async def measure(options: dict[str, Any]) -> dict[str, Any]:
    web = options["web"].rstrip("/")
    cookie = options["cookie"]
    url = web.replace("http://", "ws://").replace("https://", "wss://") + "/ws/chat/"
    model = await asyncio.to_thread(vllm_client.model_name)
    rows: list[dict[str, float]] = []
    prompt_tokens = 0
    async with (
        websockets.connect(url, origin=Origin(web), additional_headers={"Cookie": cookie}, open_timeout=10) as socket,
        vllm_client.connect(vllm_client.base_url(), timeout=300) as http,
    ):
        # One warm-up of each path: loads the embedding model and caches the shared prefix.
        _, warm = await _chat(socket, "warm", f"{QUESTION} ({uuid.uuid4().hex[:8]})", options, http)
        await vllm_client.stream_completion(warm["prompt"], max_tokens=1, model=model, client=http)
        for run in range(options["runs"]):
            nonce, other = uuid.uuid4().hex[:8], uuid.uuid4().hex[:8]
            question = f"{QUESTION} ({nonce})"
            if run % 2 == 0:
                chat_ttft, answer = await _chat(socket, f"r{run}", question, options, http)
                direct = await _direct(answer["prompt"].replace(nonce, other), options, http, model=model)
            else:
                # Direct first needs the prompt the chat will build: take the warm-up's, with this nonce.
                prompt = warm["prompt"].replace(warm["question"], f"{QUESTION} ({other})")
                direct = await _direct(prompt, options, http, model=model)
                chat_ttft, answer = await _chat(socket, f"r{run}", question, options, http)
            t = answer["timings"]
            prompt_tokens = t["tokens"]["prompt"]
            rows.append(
                {
                    "chat": chat_ttft,
                    "direct": (direct.ttft or 0.0) * 1000,
                    "retrieval": t["retrieval_ms"] or 0.0,
                    "embed": t.get("embed_ms") or 0.0,
                    "search": t.get("search_ms") or 0.0,
                    "prep": t["prep_ms"] or 0.0,
                    "client": t["client"]["ttft_ms"],
                    "socket": chat_ttft - t["server_first_token_ms"],
                    # first text chunk read by our client -> its token frame handed to the socket
                    # (a wait in the chat admission's line is in neither prep nor TTFT: taken out)
                    "forward": t["server_first_token_ms"]
                    - t["prep_ms"]
                    - (t.get("queue_wait_ms") or 0.0)
                    - t["client"]["ttft_ms"],
                    **{f"step_{name}": ms for name, ms in (t.get("steps") or {}).items()},
                    "server": (t["server"]["queue_ms"] or 0.0) + (t["server"]["prefill_ms"] or 0.0),
                    "direct_server": 1000 * ((direct.queue_time_server or 0.0) + (direct.prefill_time_server or 0.0)),
                }
            )
    return _summary(rows, options, model=model, prompt_tokens=prompt_tokens)


async def _direct(prompt: str, options: dict[str, Any], http: httpx.AsyncClient, *, model: str) -> RequestRecord:
    """``prompt`` sent straight to vLLM, after the same quiet as a chat question, as measured."""
    await _quiet(options, http)
    record = await vllm_client.stream_completion(
        prompt,
        max_tokens=options["max_tokens"],
        model=model,
        stop=["\n질문:", "\n[자료"],
        client=http,
    )
    if record.ttft is None:
        raise CommandError(f"the direct request failed: {record.error}")
    return record


def _summary(
    rows: list[dict[str, float]], options: dict[str, Any], *, model: str, prompt_tokens: int
) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 1)

    overhead = [r["chat"] - r["direct"] for r in rows]
    beyond = [o - r["retrieval"] - r["socket"] for o, r in zip(overhead, rows, strict=True)]
    return {
        "runs": len(rows),
        "cold": bool(options.get("cold")),
        "model": model,
        "prompt_tokens": prompt_tokens,
        "direct_ttft_ms": median("direct"),
        "chat_ttft_ms": median("chat"),
        "retrieval_ms": median("retrieval"),
        "embed_ms": median("embed"),
        "search_ms": median("search"),
        "prep_ms": median("prep"),
        "prep_beyond_retrieval_ms": round(statistics.median(r["prep"] - r["retrieval"] for r in rows), 1),
        "server_ms": median("server"),
        "direct_server_ms": median("direct_server"),
        "chat_client_ttft_ms": median("client"),
        "socket_ms": median("socket"),
        "forward_ms": median("forward"),
        # ms after the question arrived at which each step before vLLM was done (the answer's panel steps)
        "steps_ms": {key[5:]: median(key) for key in rows[0] if key.startswith("step_")},
        "overhead_ms": round(statistics.median(overhead), 1),
        "overhead_without_retrieval_ms": round(
            statistics.median(o - r["retrieval"] for o, r in zip(overhead, rows, strict=True)), 1
        ),
        # What the chat path adds that is neither retrieval nor the websocket, two ways: from the TTFTs
        # (carries the engine's run-to-run spread, several ms either way), and on the server's clock:
        # question received -> request sent, less retrieval, plus first text read -> its frame handed over.
        "overhead_beyond_retrieval_and_socket_ms": round(statistics.median(beyond), 1),
        "chat_own_ms": round(statistics.median(r["prep"] - r["retrieval"] + r["forward"] for r in rows), 1),
        "ratio": round(median("chat") / median("direct"), 3),
        "rows": rows,
    }
