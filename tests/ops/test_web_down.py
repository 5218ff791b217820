"""nginx's page for a request a web process took and never answered (``labapp.ops.web_down``): the
learner reads what happened and what to do in their language, not nginx's bare "502 Bad Gateway"."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labapp.ops import web_down

HANGUL = re.compile(r"[\uac00-\ud7a3]")


def test_the_page_is_written_once_per_language_each_in_its_own_language(tmp_path: Path) -> None:
    written = web_down.write(tmp_path / "pages")
    assert [p.name for p in written] == ["ko.html", "en.html"]
    korean, english = (p.read_text() for p in written)
    assert '<html lang="ko">' in korean and "웹 프로세스가 답하지 못했습니다" in korean
    assert '<html lang="en">' in english and "A web process did not answer" in english
    assert "go back in this tab (what you typed is still there)" in english
    assert not HANGUL.search(english), HANGUL.findall(english)


def test_nginx_picks_the_page_by_the_cookie_the_language_switch_and_an_lms_launch_set() -> None:
    from django.conf import settings

    assert web_down.NGINX_MAP.startswith(f"map $cookie_{settings.LANGUAGE_COOKIE_NAME} $lab_language {{")
    assert f"default {settings.LANGUAGE_CODE};" in web_down.NGINX_MAP
    assert all(f" {code} {code};" in web_down.NGINX_MAP for code, _ in settings.LANGUAGES if code != "ko")


class DiesUnderRequests:
    """A web process killed under each request it takes: it answers nginx's ready check (GET /healthz),
    and reads any other request whole, then closes the connection without a word."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.taken = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                head = conn.recv(65536)
                if head.startswith(b"GET /healthz"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                else:
                    self.taken += 1


@pytest.fixture
def nginx_in_front(tmp_path: Path) -> Iterator[tuple[str, DiesUnderRequests]]:
    from labapp.ops.rehearsal import cluster
    from labapp.ops.stack import launch

    web = DiesUnderRequests()
    port = cluster.free_port()
    service = launch.start_component(cluster.nginx(port, [web.port], tmp_path / "nginx"), tmp_path)
    try:
        service.wait_ready()
        yield f"http://127.0.0.1:{port}", web
    finally:
        service.stop()
        web.server.close()


@pytest.mark.integration
def test_a_form_sent_to_a_web_process_that_dies_under_it_gets_the_labs_page_in_the_readers_language(
    nginx_in_front: tuple[str, DiesUnderRequests],
) -> None:
    """Debian's nginx as the rehearsal configures it: the POST was handed over, so nginx may not send it
    again; it answers 502 itself, with the page in the language switch's language (Korean without it)."""
    front, web = nginx_in_front
    form = {"prediction": "1200"}
    korean = httpx.post(f"{front}/labs/1/run/", data=form, timeout=30)
    english = httpx.post(f"{front}/labs/1/run/", data=form, cookies={"django_language": "en"}, timeout=30)
    time.sleep(0.1)
    assert korean.status_code == english.status_code == 502  # a 5xx still: a script knows to check and send again
    assert web.taken >= 2  # the requests reached the web process: this is the case nginx cannot retry
    assert "이 요청을 받은 웹 프로세스가 답하기 전에 멈췄습니다" in korean.text
    assert "The web process that took this request stopped before answering" in english.text
    assert not HANGUL.search(english.text)
    assert httpx.get(f"{front}/_lab/web-down/en.html", timeout=30).status_code == 404  # not a page of its own


def test_the_command_the_docker_web_service_runs_writes_the_pages(tmp_path: Path) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("web_down_pages", str(tmp_path / "web-down"), stdout=out)
    assert sorted(p.name for p in (tmp_path / "web-down").iterdir()) == ["en.html", "ko.html"]
    assert out.getvalue().count("web-down page: ") == 2
