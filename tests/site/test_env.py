"""Settings from the environment: typed helpers and start-up that names a bad variable."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from labapp import env

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, **overrides: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environment |= {"DJANGO_SETTINGS_MODULE": "labapp.settings"} | overrides
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DATABASE_URL", "nonsense"),
        ("DATABASE_URL", "mysql://u:p@h/db"),
        ("REDIS_URL", "http://not-redis:80"),
        ("CHROMA_URL", "chroma"),
        ("VLLM_BASE_URL", "localhost:8000"),
        ("DEBUG", "maybe"),
        ("LAB_MODE", "cloud"),
        ("WEB_PORT", "eighty"),
        ("VLLM_MAX_MODEL_LEN", "12"),
    ],
)
def test_a_malformed_value_stops_start_up_naming_the_variable(name: str, value: str) -> None:
    done = _manage("check", **{name: value})
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert name in done.stderr.splitlines()[-1]


def test_class_mode_refuses_to_start_without_a_secret_key() -> None:
    done = _manage("check", LAB_MODE="class", SECRET_KEY="")
    assert done.returncode != 0
    assert "SECRET_KEY must be set when LAB_MODE=class" in done.stderr


def test_class_mode_passes_the_deployment_checklist() -> None:
    done = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        LAB_MODE="class",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="lab.example.org",
    )
    assert done.returncode == 0, done.stderr + done.stdout


def test_local_mode_keeps_one_generated_secret_key(tmp_path: Path) -> None:
    first = _manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SECRET_KEY)",
        DATA_DIR=str(tmp_path),
        SECRET_KEY="",
    )
    second = _manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SECRET_KEY)",
        DATA_DIR=str(tmp_path),
        SECRET_KEY="",
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert len(first.stdout.strip()) >= 50
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


def test_helpers_parse_and_reject(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEBUG", "yes")
    assert env.env_bool("DEBUG") is True
    monkeypatch.setenv("ALLOWED_HOSTS", " a.org, ,b.org ")
    assert env.env_list("ALLOWED_HOSTS") == ["a.org", "b.org"]
    monkeypatch.setenv("CHROMA_URL", "http://chroma:8000/")
    assert env.env_url("CHROMA_URL", schemes=("http",)) == "http://chroma:8000"
    monkeypatch.setenv("CHROMA_URL", "http://chroma:99999")
    with pytest.raises(ImproperlyConfigured, match="CHROMA_URL"):
        env.env_url("CHROMA_URL", schemes=("http",))
    with pytest.raises(KeyError):
        env.env_str("NOT_DECLARED")


def test_the_sqlite_database_keeps_a_write_ahead_log(tmp_path: Path) -> None:
    """Readers never wait for a writer and a commit is one append (see labapp.settings._database)."""
    database = tmp_path / "lab.sqlite3"
    probe = "from django.db import connection; print(*connection.cursor().execute('PRAGMA journal_mode').fetchone())"
    done = _manage("shell", "-c", probe, DATABASE_URL=f"sqlite:///{database}", DATA_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "wal"


def test_without_a_database_url_the_database_lives_in_the_data_dir(tmp_path: Path) -> None:
    """A second stack started with its own DATA_DIR (another class, a rehearsal) must not share the
    first one's SQLite file."""
    probe = "from django.db import connection; print(connection.settings_dict['NAME'])"
    done = _manage("shell", "-c", probe, DATABASE_URL="", DATA_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "lab.sqlite3")
