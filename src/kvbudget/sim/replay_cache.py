"""The cache a replay drives: the engine's cache, or the same counts kept per extent.

:class:`ReplayCache` is what :mod:`kvbudget.sim.replay` and its fast path call. Two
implementations:

* :class:`EngineCache`: the real :class:`~kvbudget.SpecDecodeCache` built from the
  plan, fed the replay's synthetic ids (:class:`~kvbudget.sim.prompt_ids.PromptIds`);
  the reference, and the only one for plans with window or state pools or a host or
  disk tier;
* :class:`~kvbudget.sim.counted_cache.CountedCache`: the same counts without block ids
  or hashes, for plans whose cache is kv blocks on the GPU
  (:func:`~kvbudget.sim.counted_cache.counted_cache_fits`).

:func:`replay_cache` picks one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from kvbudget.cache import PreemptMode, RequestId, SpecDecodeCache
from kvbudget.cache.tokens import CheckedIds
from kvbudget.plan_types import Plan
from kvbudget.scheduling import preempt
from kvbudget.sim.counted_cache import CountedCache, counted_cache_fits
from kvbudget.sim.prompt_ids import OUTPUT_TOKEN, PromptIds
from kvbudget.sim.trace import TraceRequest

# (GPU used, GPU cached, host used, host cached, host blocks moved so far)
SampleCounts = tuple[int, int, int, int, int]
# (prompt tokens, hit tokens, GPU hit blocks, host hit blocks, offloaded, onboarded)
Totals = tuple[int, int, int, int, int, int]


class DecodeSteps(Protocol):
    """A run of decode steps touched only where blocks change
    (:class:`~kvbudget.cache.decode_run.DecodeRun`'s methods the fast path calls)."""

    hash_at: list[int]

    def available(self) -> int: ...
    def free(self) -> int: ...
    def take(self, index: int, count: int) -> None: ...
    def settle(self, index: int, tokens: int) -> None: ...
    def finish(self, tokens: Sequence[int], evict: int) -> bool: ...
    def close(self, tokens: Sequence[int]) -> None: ...


class ReplayCache(Protocol):
    """The cache operations of one replay (module docstring)."""

    @property
    def available_gpu_blocks(self) -> int: ...
    def admit(self, request_id: RequestId, req: TraceRequest, num_tokens: int) -> int: ...
    def reserve(self, request_id: RequestId, num_tokens: int) -> None: ...
    def commit(self, request_id: RequestId, accepted: int) -> None: ...
    def free(self, request_id: RequestId) -> None: ...
    def preempt(self, request_id: RequestId, swap: bool) -> tuple[PreemptMode, int]: ...
    def resume(self, request_id: RequestId) -> None: ...
    def decode_run(self, request_ids: Sequence[RequestId]) -> DecodeSteps | None: ...
    def sample_counts(self) -> SampleCounts: ...
    def totals(self) -> Totals: ...
    def check(self) -> None: ...
    def notes(self) -> tuple[str, ...]: ...


class EngineCache:
    """:class:`~kvbudget.SpecDecodeCache` with the replay's ids (module docstring)."""

    __slots__ = ("_cache", "_ids", "_out", "_role")

    def __init__(self, plan: Plan, ids: PromptIds, max_accepted: int) -> None:
        self._cache = SpecDecodeCache.from_plan(plan)
        self._ids = ids
        self._role = plan.managers[0].role
        self._out = [(OUTPUT_TOKEN,) * n for n in range(max_accepted + 1)]

    @property
    def available_gpu_blocks(self) -> int:
        return self._cache.available_gpu_blocks

    def admit(self, request_id: RequestId, req: TraceRequest, num_tokens: int) -> int:
        """Admit ``req``'s prompt, or after a recompute its ``num_tokens`` verified
        tokens (the prompt, then output tokens)."""
        ids = self._ids.prompt(req)
        more = num_tokens - req.prompt_tokens
        if more > 0:
            ids = CheckedIds.join([ids, CheckedIds.of((OUTPUT_TOKEN,) * more)])
        return self._cache.admit(request_id, ids)

    def reserve(self, request_id: RequestId, num_tokens: int) -> None:
        self._cache.reserve(request_id, num_tokens)

    def commit(self, request_id: RequestId, accepted: int) -> None:
        self._cache.commit(request_id, self._out[accepted])

    def free(self, request_id: RequestId) -> None:
        self._cache.free(request_id)

    def preempt(self, request_id: RequestId, swap: bool) -> tuple[PreemptMode, int]:
        """Swap out (when ``swap`` and the host takes it), else drop for recompute
        (:func:`kvbudget.scheduling.preempt`): the mode used and the verified tokens."""
        mode, tokens = preempt(self._cache, request_id, "swap" if swap else "recompute")
        return mode, len(tokens)

    def resume(self, request_id: RequestId) -> None:
        self._cache.resume(request_id)

    def decode_run(self, request_ids: Sequence[RequestId]) -> DecodeSteps | None:
        return self._cache.decode_run(request_ids, OUTPUT_TOKEN)

    def sample_counts(self) -> SampleCounts:
        gpu = self._cache.kv_counts("gpu")
        host = self._cache.kv_counts("host")
        moved = host.offloaded_blocks + host.onboarded_blocks
        return gpu.used_blocks, gpu.cached_blocks, host.used_blocks, host.cached_blocks, moved

    def totals(self) -> Totals:
        stats = self._cache.stats()
        gpu, host = stats.pool(self._role, "gpu"), stats.pool(self._role, "host")
        return (
            stats.prompt_tokens,
            stats.hit_tokens,
            gpu.hit_blocks,
            host.hit_blocks,
            host.offloaded_blocks,
            host.onboarded_blocks,
        )

    def check(self) -> None:
        self._cache.check_invariants()

    def notes(self) -> tuple[str, ...]:
        return ()


def replay_cache(plan: Plan, ids: PromptIds, max_accepted: int, *, counted: bool) -> ReplayCache:
    """The counted cache when ``counted`` and the plan fits it, else the engine's cache.
    ``max_accepted``: the most tokens one commit appends (``K + 1``)."""
    if counted and counted_cache_fits(plan):
        return CountedCache(plan, ids)
    return EngineCache(plan, ids, max_accepted)


__all__ = ["DecodeSteps", "EngineCache", "ReplayCache", "replay_cache"]
