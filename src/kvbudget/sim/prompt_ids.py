"""The replay's synthetic prompt token ids (see :mod:`kvbudget.sim.replay`).

A request's prompt is its prefix group's tokens (seeded per group, so equal groups give
equal blocks), then up to two marker tokens that encode its index, then a fixed filler
(the hash chain makes every later block unique); output tokens are the fixed id
:data:`OUTPUT_TOKEN`. The ids of at most :data:`MAX_KEPT_PREFIX_TOKENS` tokens of prefix
groups are kept, the least recently used group's dropped first; a dropped group that
comes back is drawn again from its seed, the same ids, so the bound changes time, never
results.
"""

from __future__ import annotations

import random
from collections import OrderedDict

from kvbudget.cache.tokens import CheckedIds
from kvbudget.sim.trace import TraceRequest

# tokens of prefix-group ids kept between requests (each group holds at least 1,024);
# they are kept as int64 arrays, 8 bytes per id: 2^20 tokens are 8 MiB
MAX_KEPT_PREFIX_TOKENS = 1 << 20
OUTPUT_TOKEN = 1  # the id every output token has


class PromptIds:
    """Prompt token ids for the cache (module docstring). Internal, mutable.

    Keeps the ids of at most ``max_tokens`` tokens of prefix groups (a group longer
    than that alone is kept until the next group is drawn), least recently used
    dropped first."""

    __slots__ = ("_filler", "_groups", "_kept_tokens", "_max_tokens", "_seed", "vocab")

    def __init__(
        self, vocab_size: int, seed: int, *, max_tokens: int = MAX_KEPT_PREFIX_TOKENS
    ) -> None:
        self.vocab = max(vocab_size, 3)
        self._seed = seed
        self._max_tokens = max_tokens
        self._groups: OrderedDict[str, CheckedIds] = OrderedDict()  # oldest use first
        self._kept_tokens = 0
        self._filler = CheckedIds.of(())

    def prompt(self, req: TraceRequest) -> CheckedIds:
        """``req``'s prompt ids, joined from pieces checked once (the cache does not
        read them again)."""
        v = self.vocab
        parts: list[CheckedIds] = []
        head = 0
        if req.prefix_group is not None and req.prefix_tokens:
            parts.append(self.group(req.prefix_group, req.prefix_tokens).slice(req.prefix_tokens))
            head = req.prefix_tokens
        rest = req.prompt_tokens - head
        marker = CheckedIds.of(self.marker(req.index, rest))
        fill = rest - len(marker)
        if len(self._filler) < fill:
            size = max(fill, 2 * len(self._filler))
            self._filler = CheckedIds.of([(k * 7919 + 13) % v for k in range(size)])
        parts.append(marker)
        parts.append(self._filler.slice(fill))
        return CheckedIds.join(parts)

    def marker(self, index: int, rest: int) -> tuple[int, ...]:
        """The marker tokens of request ``index`` whose prompt has ``rest`` tokens after
        its prefix: at most two, each in ``1 .. vocab - 1``."""
        v = self.vocab - 1
        return (1 + index % v, 1 + (index // v) % v)[:rest]

    def group(self, name: str, length: int) -> CheckedIds:
        """Group ``name``'s ids, at least ``length`` of them, now its most recently
        used."""
        group = self._groups.get(name)
        if group is None or len(group) < length:
            return self._draw(name, length)
        self._groups.move_to_end(name)
        return group

    def kept(self) -> tuple[int, int]:
        """Groups and tokens whose ids are kept now (tests)."""
        return len(self._groups), self._kept_tokens

    def _draw(self, name: str, length: int) -> CheckedIds:
        """Group ``name``'s first ``max(length, 1024)`` ids, drawn from its seed (the
        same ids whenever drawn), kept as the most recently used."""
        rng = random.Random(f"{self._seed}:{name}")
        tokens = CheckedIds.of([rng.randrange(self.vocab) for _ in range(max(length, 1024))])
        old = self._groups.pop(name, None)
        self._kept_tokens += len(tokens) - (len(old) if old is not None else 0)
        self._groups[name] = tokens
        while self._kept_tokens > self._max_tokens and len(self._groups) > 1:
            _, dropped = self._groups.popitem(last=False)
            self._kept_tokens -= len(dropped)
        return tokens


__all__ = ["MAX_KEPT_PREFIX_TOKENS", "OUTPUT_TOKEN", "PromptIds"]
