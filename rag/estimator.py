"""The chapter's time estimator: seconds of prefill and of decode for a request shape."""

from __future__ import annotations


def gen_seconds(
    prompt_tokens: int, output_tokens: int, prefill_speed: float, decode_speed: float
) -> tuple[float, float]:
    """(prefill seconds, decode seconds), each rounded to 0.01 s, as in the chapter."""
    if prefill_speed <= 0 or decode_speed <= 0:
        raise ValueError("speeds must be positive tokens per second")
    return round(prompt_tokens / prefill_speed, 2), round(output_tokens / decode_speed, 2)
