"""What a load run is asked to do, and what each ask and round came back with."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoadPlan:
    sockets: int = 50
    tab_pairs: int = 10  # users with two sockets (two tabs); the other sockets have a user each
    browsers: int = 30  # users fetching pages; one in ten (at least one) is an instructor of the class
    rounds: int = 2  # RSS is read before the first and after each; the last round must not grow it
    asks: int = 1  # questions per socket per round, one after the other
    max_tokens: int = 32
    top_k: int = 2
    job: bool = True
    think_s: float = 1.0  # a browser's pause between two pages
    round_limit_s: float = 600.0  # a round still running after this is stopped and its asks fail
    job_wait_s: float = 300.0  # after the last round, how long to wait for the job to finish
    rss_bound_mib: float = 64.0
    first_question_chunks: int = 100_000  # a new process's first question at this size, during the last round (0: none)

    def check(self) -> None:
        if self.sockets < 1 or self.tab_pairs < 0 or 2 * self.tab_pairs > self.sockets:
            raise ValueError("need at least one socket and at most sockets/2 tab pairs")
        if self.browsers < 1 or self.rounds < 2 or self.asks < 1:
            raise ValueError("need at least one browser, two rounds and one ask per socket")
        if self.first_question_chunks < 0:
            raise ValueError("the first question's collection size cannot be negative (0: no first question)")


PONG_WAIT_S = 5.0  # the probe waits this long for a pong; one back later is late, one never back lost (traffic._pinger)

FULL = LoadPlan()
REDUCED = LoadPlan(sockets=12, tab_pairs=3, browsers=6, first_question_chunks=1000)


@dataclass
class AskResult:
    socket: int
    client_id: str
    marker: str
    answer_id: int | None = None
    status: str = "unanswered"  # the done frame's status, or error / timeout / closed
    error: str = ""
    tokens: int = 0
    ttft_ms: float | None = None
    first_delay_ms: float | None = None
    last_delay_ms: float | None = None
    inbound_ms: float | None = None  # of first_delay_ms: the question's way in (client sent → server received)
    overhead_saved_ms: float | None = None  # what the server's overhead frame sent back
    gaps_ms: list[float] = field(default_factory=list)
    refused: int = 0  # times the chat's admission turned it away (full line); asked again as the page lets
    queued_ms: float | None = None  # how long it waited in the admission's line ("admitted" frame)
    received: str = ""  # the token frames' text as it arrived (what the page showed if the socket closed)
    first_token_at: float | None = None  # perf_counter when its first token frame arrived


@dataclass
class RoundResult:
    asks: list[AskResult] = field(default_factory=list)
    pages: list[tuple[str, int, float]] = field(default_factory=list)  # path, status (0: no answer), ms
    misdelivered: list[str] = field(default_factory=list)
    socket_errors: list[str] = field(default_factory=list)
    refused_handshakes: list[str] = field(default_factory=list)  # tried again, as the chat page does
    client_lag_ms: list[float] = field(default_factory=list)  # the load client's own event loop, every 20 ms
    ping_in_ms: list[float] = field(default_factory=list)  # /ws/ping/: client → server, on the shared clock
    ping_out_ms: list[float] = field(default_factory=list)  # server → channel layer → client
    pongs_lost: int = 0  # pings whose pong never came back (sent at least PONG_WAIT_S before the round ended)
    pongs_late: list[int] = field(default_factory=list)  # ms, pongs back later than PONG_WAIT_S (counted, not lost)
    seconds: float = 0.0
