"""The scripted server's simulated prefix cache: what vLLM's automatic prefix caching reports, in small.

It remembers the prompts it has served in fixed blocks of ``block_bytes`` bytes of the prompt's
UTF-8 text (16 tokens at the scripted tokenizer's 3 bytes a token), each block keyed by a hash of
the whole prefix up to its end, as vLLM keys a KV block by its parent's hash and its own tokens. A
prompt's cached part is its longest run of leading blocks seen before; every block of the prompt
is then remembered (least recently used ones forgotten past ``max_blocks``). A partial last block
is never cached, as in vLLM.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class PrefixCache:
    block_bytes: int = 48
    max_blocks: int = 4096
    prefill_s_per_token: float = 0.0  # TTFT grows by this for every prompt token not served from the cache
    queries: int = 0  # prompt tokens looked up (vllm:prefix_cache_queries_total)
    hits: int = 0  # of which found (vllm:prefix_cache_hits_total)
    _blocks: OrderedDict[bytes, None] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _keys(self, prompt: str) -> list[bytes]:
        data = prompt.encode()
        keys, parent = [], b""
        for start in range(0, len(data) - self.block_bytes + 1, self.block_bytes):
            parent = hashlib.blake2b(parent + data[start : start + self.block_bytes], digest_size=16).digest()
            keys.append(parent)
        return keys

    def serve(self, prompt: str, prompt_tokens: int) -> int:
        """The prompt's cached tokens (its longest block-aligned prefix served before); remembers its blocks."""
        keys = self._keys(prompt)
        total = len(prompt.encode())
        with self._lock:
            matched = 0
            while matched < len(keys) and keys[matched] in self._blocks:
                matched += 1
            for key in keys:
                self._blocks[key] = None
                self._blocks.move_to_end(key)
            while len(self._blocks) > self.max_blocks:
                self._blocks.popitem(last=False)
            cached = prompt_tokens * matched * self.block_bytes // total if total else 0
            cached = min(cached, max(0, prompt_tokens - 1))  # as vLLM: the last prompt token is always computed
            self.queries += prompt_tokens
            self.hits += cached
        return cached

    def ttft_s(self, base_s: float, prompt_tokens: int, cached: int) -> float:
        return base_s + self.prefill_s_per_token * max(0, prompt_tokens - cached)

    def reset(self) -> None:
        """Forget every block (vLLM's ``POST /reset_prefix_cache``); the counters keep counting."""
        with self._lock:
            self._blocks.clear()
