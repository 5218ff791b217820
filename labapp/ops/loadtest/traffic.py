"""One round of traffic: chat websockets asking and checking their frames, browsers fetching pages."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus, WebSocketException
from websockets.typing import Origin

from labapp.ops.loadtest.cast import Cast, Person
from labapp.ops.loadtest.plan import PONG_WAIT_S, AskResult, LoadPlan, RoundResult

# chat.js reconnects 2 s after a closed or refused socket. Daphne refuses a handshake that
# the application has not accepted within its websocket_connect_timeout (5 s).
RECONNECT_S = 2.0
HANDSHAKE_TRIES = 5
REFUSED_RETRY_S = 1.0  # a refusal without a retry time: the page's button is live at once


def site_origin(web: str) -> Origin:
    """The Origin a page of ``web`` sends: scheme, host and port (the site accepts no other)."""
    parts = urlsplit(web)
    return Origin(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}")


def socket_url(web: str, path: str) -> str:
    """The websocket address of ``path`` on ``web`` (ws:// for http://, wss:// for https://)."""
    return web.replace("http://", "ws://").replace("https://", "wss://") + path


def _question(questions: list[str], n: int, marker: str) -> str:
    return f"{questions[n % len(questions)]} ({marker})"


class _Tab:
    """One chat tab of the load test: what it asked, and whether a frame is one of its own."""

    def __init__(self, number: int, username: str, result: RoundResult) -> None:
        self.number, self.username, self.result = number, username, result
        self.asks: dict[str, AskResult] = {}  # client id → ask, once sent
        self.answers: dict[int, str] = {}  # answer id → client id

    def belongs(self, frame: dict[str, Any]) -> bool:
        kind = frame.get("type")
        if kind == "overhead":
            return frame.get("answer_id") in self.answers
        ask = self.asks.get(str(frame.get("id")))
        if ask is None:
            return False
        if kind == "started":
            return ask.marker in str(frame.get("question")) and frame.get("answer_id") not in self.answers
        if kind == "done":
            answer = frame.get("answer") or {}
            return self.answers.get(int(answer.get("answer_id") or 0)) == ask.client_id and ask.marker in str(
                answer.get("question")
            )
        return True

    async def receive(self, socket: Any) -> dict[str, Any]:
        while True:
            frame = json.loads(await socket.recv())
            if self.belongs(frame):
                return dict(frame)
            self.result.misdelivered.append(f"socket {self.number} ({self.username}): {json.dumps(frame)[:200]}")

    async def ask(self, socket: Any, ask: AskResult, question: str, plan: LoadPlan) -> None:
        """Send one question, read its frames to the end, then report the client's timings as the page does."""
        self.asks[ask.client_id] = ask
        settings = {"top_k": plan.top_k, "max_tokens": plan.max_tokens}
        sent, sent_wall = time.perf_counter(), time.time()
        await socket.send(json.dumps({"type": "ask", "id": ask.client_id, "question": question, "settings": settings}))
        token_at: list[float] = []
        while True:
            frame = await self.receive(socket)
            now = time.perf_counter()
            if frame["type"] == "refused":
                # The chat page's "ask again" button unlocks after retry_s: a learner presses it then.
                ask.refused += 1
                await asyncio.sleep(frame.get("retry_s") or REFUSED_RETRY_S)
                sent, sent_wall = time.perf_counter(), time.time()
                await socket.send(
                    json.dumps({"type": "ask", "id": ask.client_id, "question": question, "settings": settings})
                )
            elif frame["type"] == "admitted":
                ask.queued_ms = frame.get("waited_ms")
            elif frame["type"] == "started":
                ask.answer_id = int(frame["answer_id"])
                self.answers[ask.answer_id] = ask.client_id
            elif frame["type"] == "token":
                token_at.append(now)
                ask.first_token_at = ask.first_token_at or now
                ask.tokens, ask.received = len(token_at), ask.received + str(frame.get("text", ""))
            elif frame["type"] == "error":
                ask.status, ask.error = "error", str(frame.get("error"))
                break
            elif frame["type"] == "done":
                _finish(ask, frame["answer"], sent, token_at, sent_wall)
                break
        if ask.status != "done" or ask.answer_id is None:
            return
        # As the browser does: report what the client measured; the server saves it.
        timing = {"type": "client_timing", "answer_id": ask.answer_id, "first_token_ms": ask.ttft_ms}
        timing["done_ms"] = round((time.perf_counter() - sent) * 1000, 1)
        await socket.send(json.dumps(timing))
        while (frame := await self.receive(socket))["type"] != "overhead":
            pass
        ask.overhead_saved_ms = frame.get("websocket_overhead_ms")


async def _socket(
    web: str, cast: Cast, number: int, round_no: int, plan: LoadPlan, questions: list[str], result: RoundResult
) -> None:
    """One tab: asks its questions one after the other and checks every frame it receives."""
    chatter = cast.chatters[cast.socket_owner[number]]
    url = socket_url(web, "/ws/chat/")
    origin = site_origin(web)
    ids = [f"s{number}r{round_no}a{n}" for n in range(plan.asks)]
    mine = [AskResult(number, client_id, f"{cast.marker}-{client_id}") for client_id in ids]
    result.asks.extend(mine)  # counted even if the socket never opens
    tab = _Tab(number, chatter.username, result)
    try:
        async with await _open(url, origin, chatter.cookie, number, result) as socket:
            for n, ask in enumerate(mine):
                await tab.ask(socket, ask, _question(questions, number + n + round_no, ask.marker), plan)
    except asyncio.CancelledError:
        for ask in mine:
            if ask.status == "unanswered":
                ask.status = "timeout"
        raise
    except (OSError, WebSocketException, ValueError) as exc:
        result.socket_errors.append(f"socket {number}: {type(exc).__name__}: {exc}")
        for ask in mine:
            if ask.status == "unanswered":
                ask.status, ask.error = "closed", str(exc)


async def _open(url: str, origin: Origin, cookie: str, number: int, result: RoundResult) -> ClientConnection:
    """Connect as the chat page does: a refused handshake is tried again after 2 s (counted)."""
    for attempt in range(1, HANDSHAKE_TRIES + 1):
        try:
            return await websockets.connect(
                url, origin=origin, additional_headers={"Cookie": cookie}, open_timeout=60, max_size=2**22
            )
        except InvalidStatus as exc:
            result.refused_handshakes.append(f"socket {number}, try {attempt}: {exc}")
            if attempt == HANDSHAKE_TRIES:
                raise
            await asyncio.sleep(RECONNECT_S)
    raise AssertionError("unreachable")


def _finish(
    ask: AskResult, answer: dict[str, Any], sent: float, token_at: list[float], sent_wall: float | None = None
) -> None:
    ask.status, ask.error, ask.tokens = str(answer.get("status")), str(answer.get("error") or ""), len(token_at)
    if not token_at:
        return
    timings = answer.get("timings") or {}
    ask.ttft_ms = round((token_at[0] - sent) * 1000, 1)
    last_ms = (token_at[-1] - sent) * 1000
    if timings.get("server_first_token_ms") is not None:
        ask.first_delay_ms = round(ask.ttft_ms - timings["server_first_token_ms"], 1)
        if sent_wall is not None and timings.get("received_wall") is not None:  # one machine: one clock
            ask.inbound_ms = round((timings["received_wall"] - sent_wall) * 1000, 1)
    if timings.get("server_done_ms") is not None:
        ask.last_delay_ms = round(last_ms - timings["server_done_ms"], 1)
    ask.gaps_ms = [round((b - a) * 1000, 1) for a, b in itertools.pairwise(token_at)]


async def _browse(
    web: str, person: Person, paths: list[str], offset: int, plan: LoadPlan, stop: asyncio.Event, result: RoundResult
) -> None:
    headers = {"Cookie": person.cookie}
    async with httpx.AsyncClient(base_url=web, headers=headers, timeout=120, follow_redirects=False) as client:
        n = offset
        while not stop.is_set():
            path = paths[n % len(paths)]
            n += 1
            began = time.perf_counter()
            try:
                response = await client.get(path)
                status = response.status_code
            except httpx.HTTPError:
                status = 0
            result.pages.append((path, status, round((time.perf_counter() - began) * 1000, 1)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), plan.think_s)


LAG_TICK_S = 0.02


async def _loop_lag(stop: asyncio.Event, result: RoundResult) -> None:
    """How late this process's own event loop wakes a 20 ms sleep, all round: the part of every delay
    measured here that is the load client's own queueing, not the server's."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        asked = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        result.client_lag_ms.append(round(max(0.0, loop.time() - asked - LAG_TICK_S) * 1000, 1))


PING_EVERY_S = 0.25


async def _pinger(web: str, person: Person, stop: asyncio.Event, result: RoundResult) -> None:
    """The delay split by direction, on the clock client and server share (one machine): every 250 ms
    a ping on the status page's socket (/ws/ping/) that the server stamps with its wall clock on
    arrival. Inbound is the path a chat ask takes (the server's event loop included); outbound comes
    back through the channel layer (Redis), a hop a token frame does not take."""
    url = socket_url(web, "/ws/ping/")
    headers = {"Cookie": person.cookie}
    waiting: set[float] = set()  # the pings sent whose pong has not come back (each pong names its ping)
    try:
        async with websockets.connect(url, origin=site_origin(web), additional_headers=headers) as socket:
            while not stop.is_set():
                sent = time.time()
                await socket.send(json.dumps({"type": "ping", "sent": sent}))
                waiting.add(sent)
                try:  # not waited on for ever (a run hung on one pong for minutes): a late one comes next turn
                    async with asyncio.timeout(PONG_WAIT_S):
                        frame = json.loads(await socket.recv())
                except TimeoutError:
                    continue
                arrived = time.time()
                if frame.get("type") == "pong":
                    waiting.discard(frame["sent"])
                    if arrived - frame["sent"] > PONG_WAIT_S:
                        result.pongs_late.append(round((arrived - frame["sent"]) * 1000))
                    result.ping_in_ms.append(round((frame["server_received"] - frame["sent"]) * 1000, 1))
                    result.ping_out_ms.append(round((arrived - frame["server_received"]) * 1000, 1))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), PING_EVERY_S)
    except (OSError, WebSocketException, ValueError, KeyError) as exc:
        result.socket_errors.append(f"ping socket: {type(exc).__name__}: {exc}")
    # Lost: never came back, though sent long enough before the end to have (not the last one in flight).
    result.pongs_lost += sum(1 for sent in waiting if time.time() - sent > PONG_WAIT_S)


async def round_run(
    web: str, cast: Cast, plan: LoadPlan, round_no: int, questions: list[str], paths: tuple[list[str], list[str]]
) -> RoundResult:
    """All sockets ask their questions while the browsers browse; browsing stops when the sockets are done."""
    result = RoundResult()
    learner_paths, instructor_paths = paths
    stop = asyncio.Event()
    began = time.perf_counter()
    browsers = [
        asyncio.create_task(
            _browse(web, p, instructor_paths if p.instructor else learner_paths, n * 3, plan, stop, result)
        )
        for n, p in enumerate(cast.browsers)
    ]
    sockets = [
        asyncio.create_task(_socket(web, cast, n, round_no, plan, questions, result)) for n in range(plan.sockets)
    ]
    probes = [
        asyncio.create_task(_loop_lag(stop, result)),
        asyncio.create_task(_pinger(web, cast.browsers[0], stop, result)),
    ]
    try:
        async with asyncio.timeout(plan.round_limit_s):
            await asyncio.gather(*sockets)
    except TimeoutError:
        result.socket_errors.append(f"round {round_no} stopped after {plan.round_limit_s:.0f} s")
    finally:
        for task in sockets:
            task.cancel()
        await asyncio.gather(*sockets, return_exceptions=True)
        stop.set()
        await asyncio.gather(*browsers, *probes, return_exceptions=True)
    result.seconds = round(time.perf_counter() - began, 1)
    return result
