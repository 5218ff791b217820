"""Reading a job's settings from a form or a saved row: every bad value names its field.

Pure functions over plain dicts (what a form posts and what ``BenchJob.config``
stores), so the page, the terminal command and the worker share one set of rules.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from labapp.said import gettext as _  # a saved config that no longer reads fails its job: said per reader


class ConfigError(ValueError):
    """A setting that cannot run; ``field`` is the form field (or JSONL file) it came from."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field + ": " + message)  # keeps the message's msgid (``labapp.said``)
        self.field = field
        self.message = message


def _parsed_number(field: str, value: Any, *, whole: bool) -> float:
    if isinstance(value, bool):
        raise ConfigError(field, _("숫자가 아닙니다: %(value)s") % {"value": value})
    try:
        number = float(str(value).strip()) if not isinstance(value, int | float) else float(value)
    except (ValueError, OverflowError):  # OverflowError: a whole number past float's range
        raise ConfigError(field, _("숫자가 아닙니다: %(value)s") % {"value": value}) from None
    if not math.isfinite(number):
        raise ConfigError(field, _("유한한 숫자여야 합니다: %(value)s") % {"value": value})
    if whole and number != int(number):
        raise ConfigError(field, _("정수여야 합니다: %(value)s") % {"value": value})
    return number


def _bounded(field: str, number: float, low: float, high: float) -> None:
    if number < low or number > high:
        raise ConfigError(
            field,
            _("%(low)s 이상 %(high)s 이하여야 합니다 (받은 값 %(value)s)")
            % {"low": f"{low:g}", "high": f"{high:g}", "value": f"{number:g}"},
        )


def integer(raw: dict[str, Any], field: str, default: int, low: int, high: int) -> int:
    value = raw.get(field)
    if value is None or value == "":
        return default
    number = _parsed_number(field, value, whole=True)
    _bounded(field, number, low, high)
    return int(number)


def real(raw: dict[str, Any], field: str, default: float, low: float, high: float) -> float:
    value = raw.get(field)
    if value is None or value == "":
        return default
    number = _parsed_number(field, value, whole=False)
    _bounded(field, number, low, high)
    return number


def _items(raw: dict[str, Any], field: str) -> list[Any] | None:
    value = raw.get(field)
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        items = [part for part in value.replace(" ", ",").split(",") if part]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        items = []
    if not items:  # also "," alone: no value at all is not a list of them
        raise ConfigError(field, _("쉼표로 구분한 숫자 목록이어야 합니다"))
    return items


def _numbers(raw: dict[str, Any], field: str, low: float, high: float, *, whole: bool, most: int) -> list[float] | None:
    items = _items(raw, field)
    if items is None:
        return None
    numbers = []
    for item in items:
        number = _parsed_number(field, item, whole=whole)
        _bounded(field, number, low, high)
        numbers.append(number)
    return _checked_list(field, numbers, most)


def integers(
    raw: dict[str, Any], field: str, default: tuple[int, ...], low: int, high: int, *, most: int = 12
) -> tuple[int, ...]:
    """A list like "1, 2, 4, 8" (or a JSON list): whole numbers in range, no repeats, sorted."""
    numbers = _numbers(raw, field, low, high, whole=True, most=most)
    return default if numbers is None else tuple(int(n) for n in numbers)


def reals(
    raw: dict[str, Any], field: str, default: tuple[float, ...], low: float, high: float, *, most: int = 12
) -> tuple[float, ...]:
    numbers = _numbers(raw, field, low, high, whole=False, most=most)
    return default if numbers is None else tuple(numbers)


def _checked_list(field: str, numbers: list[float], most: int) -> list[float]:
    if len(numbers) > most:
        raise ConfigError(field, _("값은 %(most)d개까지입니다") % {"most": most})
    if len(set(numbers)) != len(numbers):
        raise ConfigError(field, _("같은 값이 두 번 있습니다"))
    return sorted(numbers)


def choice(raw: dict[str, Any], field: str, default: str, choices: Iterable[str]) -> str:
    value = raw.get(field)
    if value is None or value == "":
        return default
    allowed = list(choices)
    if value not in allowed:
        raise ConfigError(
            field,
            _("알 수 없는 값 %(value)s (가능한 값: %(allowed)s)") % {"value": value, "allowed": ", ".join(allowed)},
        )
    return str(value)


# --- custom workloads: one JSON object per line ------------------------------------------

MAX_CUSTOM_LINES = 1000
MAX_CUSTOM_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class CustomPrompt:
    prompt: str
    max_tokens: int | None = None  # None: the job's output length


def jsonl_parse(data: bytes, *, field: str = "custom_file") -> tuple[CustomPrompt, ...]:
    """A custom workload file: ``{"prompt": "...", "max_tokens": 64}`` per line.

    ``max_tokens`` is optional (also accepted as ``output_tokens``); blank lines are
    skipped; the first bad line is named with its number and nothing is kept.
    """
    if not data.strip():
        raise ConfigError(field, _("파일이 비어 있습니다"))
    if len(data) > MAX_CUSTOM_BYTES:
        raise ConfigError(field, _("파일이 너무 큽니다 (최대 2 MB)"))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(field, _("UTF-8 텍스트가 아닙니다")) from None
    prompts: list[CustomPrompt] = []
    # JSON Lines end lines with \n (or \r\n) only: str.splitlines would also cut at U+2028,
    # U+0085 and other characters that JSON allows inside a string.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue

        def bad(message: str, number: int = number) -> ConfigError:
            return ConfigError(field, _("%(line)d번째 줄: %(message)s") % {"line": number, "message": message})

        try:
            item = json.loads(line)
        except (ValueError, RecursionError) as exc:  # also: too many digits, nested too deep
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).split(":")[0]
            raise bad(_("JSON이 아닙니다 (%(error)s)") % {"error": why}) from None
        if not isinstance(item, dict):
            raise bad(_('{"prompt": "..."} 형태의 객체여야 합니다'))
        prompt = item.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise bad(_('"prompt"가 없거나 빈 문자열입니다'))
        if "\x00" in prompt:  # no database stores it in text (PostgreSQL refuses it)
            raise bad(_('"prompt"에 NUL 문자가 있습니다'))
        unknown = sorted(set(item) - {"prompt", "max_tokens", "output_tokens"})
        if unknown:
            raise bad(_("알 수 없는 키: %(keys)s") % {"keys": ", ".join(unknown)})
        limit = item.get("max_tokens", item.get("output_tokens"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise bad(_('"max_tokens"는 1 이상의 정수여야 합니다'))
        prompts.append(CustomPrompt(prompt=prompt, max_tokens=limit))
        if len(prompts) > MAX_CUSTOM_LINES:
            raise ConfigError(field, _("프롬프트는 %(most)d개까지입니다") % {"most": MAX_CUSTOM_LINES})
    if not prompts:
        raise ConfigError(field, _("프롬프트가 한 줄도 없습니다"))
    return tuple(prompts)


def custom_from_raw(raw: dict[str, Any], field: str = "custom") -> tuple[CustomPrompt, ...]:
    """The parsed prompts as a saved job config stores them (what ``jsonl_parse`` made)."""
    items = raw.get(field) or []

    def well_formed(item: Any) -> bool:
        limit = item.get("max_tokens") if isinstance(item, dict) else None
        return (
            isinstance(item, dict)
            and isinstance(item.get("prompt"), str)
            and (limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1))
        )

    if not isinstance(items, list | tuple) or not all(well_formed(item) for item in items):
        raise ConfigError("custom_file", _('저장된 사용자 작업량이 {"prompt": …, "max_tokens": …} 목록이 아닙니다'))
    return tuple(CustomPrompt(prompt=i["prompt"], max_tokens=i.get("max_tokens")) for i in items)
