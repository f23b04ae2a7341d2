"""Real storage (CPU torch): sizes equal the plan, offload/onboard copy exact bytes."""

from __future__ import annotations

import pytest
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cost import WindowGroup
from kvbudget.errors import InvalidArgumentError, InvalidCacheOperationError

torch = pytest.importorskip("torch")

A, B, C = RequestId("a"), RequestId("b"), RequestId("c")


def fill(cache: SpecDecodeCache, rid: RequestId, seed: int) -> dict[tuple[str, int], bytes]:
    """Write a distinct byte pattern into every block of ``rid`` in every role."""
    written = {}
    for r, role in enumerate(cache.roles):
        for i, _ in enumerate(cache.block_table(rid, role)):
            page = cache.page(rid, role, i)
            data = (torch.arange(page.numel(), dtype=torch.int64) * 7 + seed + 31 * i + r) % 251
            page.copy_(data.to(torch.uint8))
            written[(role, i)] = bytes(page.tolist())
    return written


def test_tensor_bytes_equal_the_plan() -> None:
    window = WindowGroup(window_tokens=8, num_layers=1, bytes_per_token=4, blocks_per_seq=4)
    plan = tiny_plan(
        gpu_blocks=6,
        host_blocks=3,
        disk_blocks=2,
        target_window_groups=(window,),
        target_state_bytes_per_seq=10,
        max_batch_size=2,
    )
    cache = SpecDecodeCache.from_plan(plan, device="cpu")
    storage = cache.storage
    assert storage is not None and storage.device == "cpu"
    for m, rs in zip(plan.managers, storage.roles, strict=True):
        for tier in ("gpu", "host", "disk"):
            assert rs.tier_bytes(tier) + rs.padding_bytes[tier] == m.tier(tier).bytes
            assert rs.padding_bytes[tier] == m.tier(tier).padding_bytes == 0
    target = storage.roles[0]
    # 6 x 32 kv + 2 x 4 x (4 x 4) window + 2 x 10 state
    assert target.tier_bytes("gpu") == 192 + 128 + 20
    assert [t.shape for t in target.kv] == [(6, 32), (3, 32), (2, 32)]
    cache.check_invariants()


def test_offload_and_onboard_copy_exact_bytes() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4, host_blocks=4), device="cpu")
    cache.admit(A, range(9))
    written = fill(cache, A, seed=3)
    cache.free(A)  # blocks 0, 1 cached on gpu, 2 free
    cache.admit(B, range(100, 116))  # evicts A's blocks 1, 0 to the host tier
    fill(cache, B, seed=99)  # overwrite every gpu block
    assert cache.stats().pool("target", "host").offloaded_blocks == 2
    cache.free(B)
    assert cache.admit(C, [*range(8), 5]) == 8  # onboarded from host
    for role in cache.roles:
        for i in range(2):
            assert bytes(cache.page(C, role, i).tolist()) == written[(role, i)]
    cache.check_invariants()


def test_swap_round_trip_keeps_bytes() -> None:
    cache = SpecDecodeCache.from_plan(
        tiny_plan(gpu_blocks=4, host_blocks=4, disk_blocks=2), device="cpu"
    )
    cache.admit(A, range(7))  # one full block, one partial
    written = fill(cache, A, seed=11)
    cache.preempt(A, mode="swap")
    cache.admit(B, range(100, 116))
    fill(cache, B, seed=77)
    cache.free(B)
    cache.resume(A)
    for role in cache.roles:
        for i in range(2):
            assert bytes(cache.page(A, role, i).tolist()) == written[(role, i)]
    cache.check_invariants()


def test_disk_round_trip_keeps_bytes() -> None:
    cache = SpecDecodeCache.from_plan(
        tiny_plan(gpu_blocks=3, host_blocks=1, disk_blocks=4), device="cpu"
    )
    cache.admit(A, range(9))
    written = fill(cache, A, seed=5)
    cache.free(A)
    cache.admit(B, range(100, 112))  # A's block 1 ends on disk, block 0 on host
    fill(cache, B, seed=1)
    cache.free(B)
    assert cache.admit(C, [*range(8), 3]) == 8
    assert cache.stats().pool("target", "disk").onboarded_blocks == 1
    for role in cache.roles:
        for i in range(2):
            assert bytes(cache.page(C, role, i).tolist()) == written[(role, i)]


def test_metadata_only_has_no_pages() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=2))
    assert cache.storage is None
    cache.admit(A, [1])
    with pytest.raises(InvalidCacheOperationError, match="metadata-only"):
        cache.page(A, "target", 0)


def test_unusable_device_is_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=2), device="no-such-device")
    if not torch.cuda.is_available():
        with pytest.raises(InvalidArgumentError, match="no CUDA device"):
            SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=2), device="cuda")


def test_a_host_block_written_twice_in_one_admit_keeps_the_last_copy() -> None:
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=2, host_blocks=1), device="cpu")
    cache.admit(A, range(8))  # gpu 0, 1 (full)
    pages = fill(cache, A, seed=5)
    cache.free(A)  # LRU [1, 0]
    # 2 new blocks evict gpu 1 -> host 0, then gpu 0 -> host 0 (the first copy evicted):
    # both copies target host block 0 in one batch; the second must win
    cache.admit(B, range(100, 108))
    storage = cache.storage
    assert storage is not None
    for r, role in enumerate(cache.roles):
        host = storage.roles[r].kv[1][0]
        assert bytes(host.tolist()) == pages[(role, 0)]
    cache.free(B)
    assert cache.admit(C, [*range(4), 9]) == 4  # A's head comes back from the host
    assert bytes(cache.page(C, "draft", 0).tolist()) == pages[("draft", 0)]
    cache.check_invariants()


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_offload_and_onboard_byte_integrity(device: str) -> None:
    # on CUDA: device-to-host copies must land before the host scatter reads them
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device: the CUDA copy path is checked on a GPU machine")
    cache = SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=8, host_blocks=16), device=device)
    written: dict[RequestId, dict[tuple[str, int], bytes]] = {}
    for n in range(6):  # each admit evicts the previous prompts' cached blocks to the host
        rid = RequestId(f"r{n}")
        cache.admit(rid, range(1000 * n, 1000 * n + 17))
        written[rid] = fill(cache, rid, seed=n)
        cache.free(rid)
    hits = []
    for n in range(6):  # every prefix still cached comes back, byte for byte
        rid = RequestId(f"s{n}")
        hit = cache.admit(rid, range(1000 * n, 1000 * n + 17))
        hits.append(hit)
        for (role, i), data in written[RequestId(f"r{n}")].items():
            if i * 4 < hit:
                assert bytes(cache.page(rid, role, i).cpu().tolist()) == data, (n, role, i)
        cache.free(rid)
    # 6 prompts x 4 full blocks = 24 > 8 GPU blocks: the older ones came back from the host
    assert cache.stats().pool("target", "host").onboarded_blocks > 0
    assert sum(hits) > 0
    cache.check_invariants()


def test_misuse_of_storage_is_typed() -> None:
    plan = tiny_plan(gpu_blocks=4)
    with pytest.raises(InvalidArgumentError, match="'mps' is not supported"):
        SpecDecodeCache.from_plan(plan, device="mps")
    cache = SpecDecodeCache.from_plan(plan, device="cpu")
    cache.admit(A, range(9))  # 3 blocks of 4
    for index in (3, -1, "0"):
        with pytest.raises(InvalidCacheOperationError, match="outside the table"):
            cache.page(A, "target", index)  # type: ignore[arg-type]
    assert [] not in cache  # unhashable: never admitted, no TypeError


def test_a_plan_too_large_for_the_machine_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_memory(*args: object, **kwargs: object) -> None:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(torch, "zeros", no_memory)
    with pytest.raises(InvalidArgumentError, match="could not allocate the cache's"):
        SpecDecodeCache.from_plan(tiny_plan(gpu_blocks=4), device="cpu")


def test_a_hand_built_plan_with_no_block_size_is_refused() -> None:
    import dataclasses

    plan = tiny_plan(gpu_blocks=4)
    bad = dataclasses.replace(
        plan,
        tokens_per_block=0,
        managers=tuple(dataclasses.replace(m, tokens_per_block=0) for m in plan.managers),
    )
    with pytest.raises(InvalidArgumentError, match="tokens_per_block must be a positive int"):
        SpecDecodeCache.from_plan(bad)
