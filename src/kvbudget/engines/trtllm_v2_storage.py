"""How TensorRT-LLM's V2 KV cache runtime turns a manager's layers and tier quotas into
pool groups of slots: life cycles, pool groups, the initial pool ratio, slot floors and
slot counts per cache level.

Facts from ``NVIDIA/TensorRT-LLM`` (as transcribed in ``shared/trtllm-src``, SOURCES.md):
``runtime/kv_cache_manager_v2/_storage/_config.py`` @ 1148a82f (``create_storage_config``),
``_life_cycle_registry.py`` @ 1548780d (``AttnLifeCycle``, ``get_stale_range``),
``_storage/_core.py`` (``CacheLevelStorage.ratio_to_slot_count_list``,
``_grains_to_slots``) and ``cpp/tensorrt_llm/batch_manager/kv_cache_manager_v2/
storageManager.cpp`` (the default runtime at the newest commits: the initial ratio, the
slot floors, the cold-tier regrouping).

* **Life cycles**: one per distinct window (None: full length), numbered in the order
  the layers first show it.
* **Slots**: a life cycle's buffers (K and V of every layer; MLA: the latent only) are
  grouped by size; its slot is the list of ``size x count`` per size, largest first.
  Life cycles whose lists are equal share one pool group (one pool per list entry).
* **Floors** (no ``avg_seq_len``, so no constraints): a window ``w`` needs
  ``(w + block - 2) // block + 1`` slots, a full-length life cycle as many as the
  largest window (at least 1); a pool group needs the sum of its life cycles'. A hybrid
  manager's recurrent-state life cycle (``MambaHybridCacheManagerV2``: one SSM and one
  conv buffer per layer, one slot per request) needs ``ceil(live / 0.95)`` slots for its
  constraint of ``live`` state-only requests.
* **Initial ratio** (no ``pool_ratio``, no ``avg_seq_len``): the bytes one request of
  2,049 tokens with 2,048 in history holds per pool group (each pool rounded up to the
  granularity), normalised; a hybrid manager's typical batch instead (its requests of
  ``max_seq_len // 2`` tokens and its dummy state-only requests).
* **Slot counts** (``ratio_to_slot_count_list``): the level's quota (rounded up to its
  granularity, at least the floors' bytes) in grains, shared by ratio between the pool
  groups, smallest ratio first; a group at or below its floor gets its floor and the
  rest is shared again; each group keeps as many slots as its grains hold.
* **Cold tiers** (host, disk): life cycles regroup by their hot slot's total bytes (one
  pool each), each taking an even part of its hot group's ratio; granularity 4 KiB on
  the host, 2 MiB on disk.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

GPU_PAGE = 2 << 20  # cacheTierGranularity: 2 MiB physical chunks
HOST_GRANULARITY = 4 << 10  # HostMem::kAlignment
DISK_GRANULARITY = 2 << 20
FALLBACK_CAPACITY, FALLBACK_HISTORY = 2049, 2048  # the one-request fallback batch


def gpu_granularity(quota: int) -> int:
    """``cacheTierGranularity(GPU_MEM, quota)``: 2 MiB, doubled per doubling of the quota
    past 1 GiB, at most 32 MiB."""
    return GPU_PAGE << min(4, max(0, int(math.log(quota / (GPU_PAGE * 512), 2))))


def round_up(value: int, granularity: int) -> int:
    return -(-value // granularity) * granularity


@dataclass(frozen=True, kw_only=True)
class Layer:
    """One cache layer of a manager: its buffers' bytes per block (K and V, or the MLA
    latent) and its window (None: full length)."""

    buffer_bytes: tuple[int, ...]
    window: int | None
    ssm: bool = False  # a recurrent-state layer (SSM and conv state buffers, one slot each)


@dataclass(frozen=True, kw_only=True)
class PoolGroup:
    """A pool group at one level: its life cycles' windows, slot bytes per pool, slots
    and pool bytes."""

    windows: tuple[int | None, ...]
    slot_bytes: tuple[int, ...]
    slots: int
    bytes: int
    ssm: bool = False  # the recurrent-state life cycle's group


@dataclass(frozen=True, kw_only=True)
class Storage:
    """A manager's pool groups per level (GPU first, then host and disk where given)."""

    gpu: tuple[PoolGroup, ...]
    host: tuple[PoolGroup, ...]
    disk: tuple[PoolGroup, ...]
    min_slots: tuple[int, ...]  # the GPU pool groups' floors


Key = int | str | None  # a life cycle: its window, None (full length) or SSM


SSM = "ssm"


def life_cycles(layers: Sequence[Layer]) -> tuple[list[Key], list[tuple[int, ...]]]:
    """The life cycles in order (window, None or SSM), and each one's slot size list."""
    keys: list[Key] = []
    sizes: list[dict[int, int]] = []
    for layer in layers:
        key: Key = SSM if layer.ssm else layer.window
        if key not in keys:
            keys.append(key)
            sizes.append({})
        counts = sizes[keys.index(key)]
        for b in layer.buffer_bytes:
            counts[b] = counts.get(b, 0) + 1
    lists = [tuple(sorted((b * n for b, n in c.items()), reverse=True)) for c in sizes]
    return keys, lists


def _grains_for(slots: int, sizes: Sequence[int], g: int) -> int:
    return sum(-(-slots * s // g) for s in sizes)


def _slots_in(grains: int, sizes: Sequence[int], g: int) -> tuple[int, int]:
    """(most slots whose pools fit in ``grains`` grains, the grains they use)."""
    if grains < _grains_for(1, sizes, g):
        return 0, 0
    lo, hi = 1, grains * g // sum(sizes) + 1  # hi never fits: n x sum(sizes) > grains x g
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _grains_for(mid, sizes, g) <= grains else (lo, mid)
    return lo, _grains_for(lo, sizes, g)


def slot_counts(
    quota: int,
    sizes: Sequence[Sequence[int]],
    ratio: Sequence[float],
    g: int,
    floors: Sequence[int],
) -> list[int]:
    """Slots per pool group for a level of ``quota`` bytes (``ratio_to_slot_count_list``
    on the quota rounded up to ``g`` and raised to the floors' bytes)."""
    floor_bytes = sum(round_up(f * s, g) for f, ss in zip(floors, sizes, strict=True) for s in ss)
    remaining = max(floor_bytes, round_up(quota, g)) // g
    counts = [0] * len(sizes)
    active = list(range(len(sizes)))
    while active:
        order = sorted(range(len(active)), key=lambda i: ratio[active[i]])
        got: dict[int, int] = {}
        budget = remaining
        for i, idx in enumerate(order):
            share = ratio[active[idx]] / sum(ratio[active[j]] for j in order[i:])
            n, used = _slots_in(round(budget * share), sizes[active[idx]], g)
            got[active[idx]] = n
            budget -= used
        low = [pg for pg in active if got[pg] <= floors[pg]]
        if not low:
            for pg in active:
                counts[pg] = got[pg]
            break
        for pg in low:
            counts[pg], used = _slots_in(_grains_for(floors[pg], sizes[pg], g), sizes[pg], g)
            remaining -= used
        active = [pg for pg in active if pg not in low]
        if active and remaining <= 0:
            raise ValueError("Insufficient quota to satisfy min_slots constraints")
    for pg, ss in enumerate(sizes):  # a group keeps every slot its grains hold
        while _grains_for(counts[pg] + 1, ss, g) <= _grains_for(counts[pg], ss, g):
            counts[pg] += 1
    return counts


def _floors(keys: Sequence[Key], tpb: int, ssm_floor: int) -> list[int]:
    """Slot floor per life cycle: a window's live blocks while it slides; full-length
    life cycles the largest of those (at least 1); the SSM one 1, or with the hybrid
    manager's constraint of ``ssm_floor`` state-only requests ceil(ssm_floor / 0.95)."""
    swa = [(k + tpb - 2) // tpb + 1 for k in keys if isinstance(k, int)]
    top = max([1, *swa])
    out = []
    for k in keys:
        if k == SSM:
            out.append(max(1, math.ceil(float(ssm_floor) / float(MAX_UTIL)) if ssm_floor else 1))
        else:
            out.append(top if k is None else (int(k) + tpb - 2) // tpb + 1)
    return out


@dataclass(frozen=True, kw_only=True)
class Batch:
    """A batch the initial ratio is taken from: ``requests`` of ``capacity`` tokens with
    ``history`` of them in history, and ``idle`` state-only requests (capacity 0)."""

    requests: int
    capacity: int
    history: int
    idle: int = 0


FALLBACK = Batch(requests=1, capacity=FALLBACK_CAPACITY, history=FALLBACK_HISTORY)
MAX_UTIL = 0.95  # KvCacheConfig.max_util_for_resume


def _ratio(
    keys: Sequence[Key], grouping: Sequence[int], sizes: Sequence[Sequence[int]],
    tpb: int, g: int, batch: Batch,
) -> list[float]:  # fmt: skip
    """Bytes per pool group of ``batch`` (``ratio_from_batch``), normalised: a request
    holds its blocks outside its window's stale range, one SSM slot each."""
    slots = [0] * len(sizes)
    for k, pg in zip(keys, grouping, strict=True):
        if k == SSM:
            slots[pg] += batch.requests + batch.idle
            continue
        stale = 0 if k is None else max(0, (batch.history + 1 - int(k)) // tpb)
        slots[pg] += batch.requests * (-(-batch.capacity // tpb) - stale)
    per_group = [sum(round_up(n * s, g) for s in ss) for n, ss in zip(slots, sizes, strict=True)]
    return [x / sum(per_group) for x in per_group]


def storage(
    layers: Sequence[Layer], tpb: int, *, gpu_quota: int, host_quota: int = 0,
    disk_quota: int = 0, batch: Batch = FALLBACK, ssm_floor: int = 0,
) -> Storage:  # fmt: skip
    """The pool groups a V2 manager of ``layers`` builds on each level; ``batch`` is the
    one its initial ratio comes from, ``ssm_floor`` the hybrid manager's state floor."""
    windows, lists = life_cycles(layers)
    group_lists: list[tuple[int, ...]] = []
    grouping = []
    for sizes in lists:
        if sizes not in group_lists:
            group_lists.append(sizes)
        grouping.append(group_lists.index(sizes))
    lc_floors = _floors(windows, tpb, ssm_floor)
    floors = [0] * len(group_lists)
    for pg, f in zip(grouping, lc_floors, strict=True):
        floors[pg] += f
    g = gpu_granularity(gpu_quota)
    ratio = _ratio(windows, grouping, group_lists, tpb, g, batch)
    counts = slot_counts(gpu_quota, group_lists, ratio, g, floors)
    gpu = _level(windows, grouping, group_lists, counts, g)
    cold_bytes = [sum(group_lists[pg]) for pg in grouping]
    cold_sizes = list(dict.fromkeys(cold_bytes))
    cold_grouping = [cold_sizes.index(b) for b in cold_bytes]
    per_hot = [grouping.count(pg) for pg in range(len(group_lists))]
    cold_ratio = [0.0] * len(cold_sizes)
    cold_floors = [0] * len(cold_sizes)
    for lc, pg in enumerate(grouping):
        cold_ratio[cold_grouping[lc]] += ratio[pg] / per_hot[pg]
        cold_floors[cold_grouping[lc]] += lc_floors[lc]
    cold_ratio = [x / sum(cold_ratio) for x in cold_ratio]
    cold_lists = [(b,) for b in cold_sizes]

    def cold(quota: int, gran: int) -> tuple[PoolGroup, ...]:
        if quota <= 0:
            return ()
        counts = slot_counts(quota, cold_lists, cold_ratio, gran, cold_floors)
        return _level(windows, cold_grouping, cold_lists, counts, gran)

    return Storage(
        gpu=gpu,
        host=cold(host_quota, HOST_GRANULARITY),
        disk=cold(disk_quota, DISK_GRANULARITY),
        min_slots=tuple(floors),
    )


def _level(
    keys: Sequence[Key], grouping: Sequence[int], lists: Sequence[tuple[int, ...]],
    counts: Sequence[int], g: int,
) -> tuple[PoolGroup, ...]:  # fmt: skip
    return tuple(
        PoolGroup(
            windows=tuple(k for k, p in zip(keys, grouping, strict=True) if p == pg and k != SSM),  # type: ignore[misc]
            slot_bytes=sizes,
            slots=n,
            bytes=sum(round_up(n * s, g) for s in sizes),
            ssm=any(k == SSM for k, p in zip(keys, grouping, strict=True) if p == pg),
        )
        for pg, (sizes, n) in enumerate(zip(lists, counts, strict=True))
    )


__all__ = [
    "SSM",
    "Batch",
    "Layer",
    "PoolGroup",
    "Storage",
    "gpu_granularity",
    "slot_counts",
    "storage",
]
