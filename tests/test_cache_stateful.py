"""Random admit / reserve / commit / free / preempt / resume under tight budgets.

A model of each request (tokens, reservation, swapped) predicts which operations are
invalid; every refused operation must leave ``stats()`` unchanged, and
``check_invariants()`` runs after every step. The storage machine also writes each full
block's bytes (a pattern of its role and token prefix, as an engine writes KV) and checks
after every step that every running request reads its own bytes back, through eviction,
host offload, onboarding and swaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_cache_support import tiny_plan

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cost import WindowGroup
from kvbudget.errors import InvalidCacheOperationError, OutOfBlocksError, UnknownRequestError
from kvbudget.plan_types import Plan

IDS = [RequestId(f"r{i}") for i in range(6)]
# a few shared "system prompts" so that prefixes repeat
BASES = [list(range(100, 112)), list(range(200, 209)), [7, 7, 7, 7, 8, 8, 8, 8]]
# (extra_keys, cache_salt) of an admission: none, a LoRA-like key, a tenant's salt, and an
# extra key spelled like that salt (which must not share its blocks)
Salt = tuple[tuple[Any, ...], str | None]
SALTS: list[Salt] = [
    ((), None),
    ((), None),
    (("salt",), None),
    ((), "salt"),
    ((("cache_salt", "salt"),), None),
]
SETTINGS = settings(
    max_examples=40,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class Model:
    tokens: list[int]
    salt: Salt = ((), None)
    reserved: int = 0
    swapped: bool = False
    written: set[tuple[str, int]] = field(default_factory=set)  # (role, block index)


class CacheMachine(RuleBasedStateMachine):
    plan: Plan = tiny_plan(gpu_blocks=6, host_blocks=4)
    device: str | None = None
    can_swap = True

    def __init__(self) -> None:
        super().__init__()
        self.cache = SpecDecodeCache.from_plan(self.plan, device=self.device)
        self.model: dict[RequestId, Model] = {}
        self.next_token = 1000
        # (salt, tokens) each full block's K/V was ever computed from (its prefix, and for
        # an EAGLE3 draft the token after it too): a hit must be one
        self.computed: set[tuple[Salt, tuple[int, ...]]] = set()
        self.hit_tokens = 0

    # ------------------------------------------------------------------ helpers
    def snapshot(self) -> Any:
        """stats() plus every request's tokens, reservation and block tables."""
        rows = []
        for rid, m in sorted(self.model.items()):
            tables = (
                None
                if m.swapped
                else [
                    (self.cache.block_table(rid, r), self.cache.window_tables(rid, r))
                    for r in self.cache.roles
                ]
            )
            rows.append((rid, self.cache.num_tokens(rid), self.cache.num_reserved(rid), tables))
        return self.cache.stats(), rows

    def refused(self, op: Any, error: type[Exception]) -> bool:
        """Run ``op``; True if it raised ``error`` (state must then be unchanged)."""
        before = self.snapshot()
        try:
            op()
        except error:
            assert self.snapshot() == before
            return True
        return False

    def reads(self, role: str) -> int:
        """How many tokens past its block a block's K/V in ``role`` reads: 1 for a draft
        whose input is the next token (EAGLE3 / MTP, policy drop_last_block), else 0."""
        return int(role == "draft" and self.cache.draft_prefix == "drop_last_block")

    def known(self, m: Model, role: str) -> int:
        """The blocks of ``m`` whose K/V in ``role`` its verified tokens determine."""
        return (len(m.tokens) - self.reads(role)) // self.cache.tokens_per_block

    def note_computed(self, m: Model) -> None:
        tpb = self.cache.tokens_per_block
        shift = max(self.reads(r) for r in self.cache.roles)  # a hit serves every role
        for i in range(1, (len(m.tokens) - shift) // tpb + 1):
            self.computed.add((m.salt, tuple(m.tokens[: i * tpb + shift])))

    def fresh(self, n: int) -> list[int]:
        self.next_token += n
        return list(range(self.next_token - n, self.next_token))

    def write_full_blocks(self, rid: RequestId) -> None:
        """Write, as an engine does, every block whose K/V the verified tokens now fix:
        a pattern of the role, the salt and the tokens that K/V reads."""
        if self.cache.storage is None:
            return
        m = self.model[rid]
        tpb = self.cache.tokens_per_block
        for role in self.cache.roles:
            for i in range(self.known(m, role)):
                if (role, i) not in m.written:
                    page = self.cache.page(rid, role, i)
                    read = m.tokens[: (i + 1) * tpb + self.reads(role)]
                    page.copy_(pattern(role, m.salt, read, page.numel()))
                    m.written.add((role, i))

    # ------------------------------------------------------------------ rules
    @rule(
        rid=st.sampled_from(IDS),
        base=st.sampled_from(BASES),
        cut=st.integers(0, 12),
        tail=st.integers(0, 9),
        salt=st.sampled_from(SALTS),
    )
    def admit(self, rid: RequestId, base: list[int], cut: int, tail: int, salt: Salt) -> None:
        prompt = base[:cut] + self.fresh(tail)

        def op() -> int:
            return self.cache.admit(rid, prompt, extra_keys=salt[0], cache_salt=salt[1])

        if rid in self.model or not prompt:
            assert self.refused(op, InvalidCacheOperationError)
            return
        if self.refused(op, OutOfBlocksError):
            assert rid not in self.cache
            return
        hit = self.cache.stats().hit_tokens - self.hit_tokens
        self.hit_tokens += hit
        tpb = self.cache.tokens_per_block
        assert hit % tpb == 0 and hit < len(prompt)
        shift = max(self.reads(r) for r in self.cache.roles)
        for i in range(1, hit // tpb + 1):  # only blocks computed from these tokens can hit
            assert (salt, tuple(prompt[: i * tpb + shift])) in self.computed, (rid, i)
        m = self.model[rid] = Model(tokens=list(prompt), salt=salt)
        m.written = {(r, i) for r in self.cache.roles for i in range(hit // tpb)}
        self.note_computed(m)
        self.write_full_blocks(rid)

    @rule(rid=st.sampled_from(IDS), cut=st.integers(0, 12), flag=st.booleans())
    def admit_or_commit_a_bool(self, rid: RequestId, cut: int, flag: bool) -> None:
        # bool is an int subclass (True == 1); as a token id it is refused, changing nothing
        m = self.model.get(rid)
        if m is None:
            prompt = [*BASES[0][:cut], flag]
            assert self.refused(lambda: self.cache.admit(rid, prompt), InvalidCacheOperationError)
        elif m.swapped or m.reserved == 0:
            return
        else:
            op = lambda: self.cache.commit(rid, [flag])  # noqa: E731
            assert self.refused(op, InvalidCacheOperationError)

    @rule(rid=st.sampled_from(IDS), n=st.integers(0, 5))
    def reserve(self, rid: RequestId, n: int) -> None:
        m = self.model.get(rid)
        if m is None:
            assert self.refused(lambda: self.cache.reserve(rid, n), UnknownRequestError)
            return
        if m.swapped or m.reserved + n > self.cache.max_reserve_tokens:
            assert self.refused(lambda: self.cache.reserve(rid, n), InvalidCacheOperationError)
            return
        if not self.refused(lambda: self.cache.reserve(rid, n), OutOfBlocksError):
            m.reserved += n

    @rule(rid=st.sampled_from(IDS), n=st.integers(0, 5))
    def commit(self, rid: RequestId, n: int) -> None:
        m = self.model.get(rid)
        accepted = self.fresh(n)
        if m is None:
            assert self.refused(lambda: self.cache.commit(rid, accepted), UnknownRequestError)
            return
        if m.swapped or n > m.reserved:
            assert self.refused(
                lambda: self.cache.commit(rid, accepted), InvalidCacheOperationError
            )
            return
        self.cache.commit(rid, accepted)
        m.tokens += accepted
        m.reserved = 0
        self.note_computed(m)
        self.write_full_blocks(rid)

    @rule(rid=st.sampled_from(IDS))
    def free(self, rid: RequestId) -> None:
        if rid not in self.model:
            assert self.refused(lambda: self.cache.free(rid), UnknownRequestError)
            return
        self.cache.free(rid)
        del self.model[rid]

    @rule(rid=st.sampled_from(IDS), swap=st.booleans())
    def preempt(self, rid: RequestId, swap: bool) -> None:
        m = self.model.get(rid)
        mode = "swap" if swap else "recompute"
        if m is None:
            assert self.refused(lambda: self.cache.preempt(rid, mode=mode), UnknownRequestError)
            return
        if m.swapped or (swap and not self.can_swap):
            assert self.refused(
                lambda: self.cache.preempt(rid, mode=mode), InvalidCacheOperationError
            )
            return
        if not swap:
            assert self.cache.preempt(rid, mode="recompute") == tuple(m.tokens)
            del self.model[rid]
            return
        if not self.refused(lambda: self.cache.preempt(rid, mode="swap"), OutOfBlocksError):
            m.swapped, m.reserved = True, 0

    @precondition(lambda self: any(m.swapped for m in self.model.values()))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(r for r, m in self.model.items() if m.swapped)))
        if not self.refused(lambda: self.cache.resume(rid), OutOfBlocksError):
            self.model[rid].swapped = False

    # ------------------------------------------------------------------ checks
    @invariant()
    def consistent(self) -> None:
        self.cache.check_invariants()
        assert len(self.cache) == len(self.model)
        for rid, m in self.model.items():
            assert self.cache.num_tokens(rid) == len(m.tokens)
            assert self.cache.num_reserved(rid) == m.reserved
            assert self.cache.is_swapped(rid) == m.swapped

    @invariant()
    def bytes_survive(self) -> None:
        if self.cache.storage is None:
            return
        tpb = self.cache.tokens_per_block
        for rid, m in self.model.items():
            if m.swapped:
                continue
            for role, i in sorted(m.written):
                page = self.cache.page(rid, role, i)
                read = m.tokens[: (i + 1) * tpb + self.reads(role)]
                want = pattern(role, m.salt, read, page.numel())
                assert bool((page == want).all()), (rid, role, i)


def pattern(role: str, salt: Salt, prefix: list[int], nbytes: int) -> Any:
    import torch

    seed = hash((role, salt, tuple(prefix)))
    step = seed % 13 + 1
    return ((torch.arange(nbytes, dtype=torch.int64) * step + seed % 256) % 256).to(torch.uint8)


class TwoRolesWithHost(CacheMachine):
    plan = tiny_plan(gpu_blocks=6, host_blocks=4)


class EagleUnequalBlocksWithDisk(CacheMachine):
    plan = tiny_plan(gpu_blocks=7, draft_gpu_blocks=6, host_blocks=2, disk_blocks=3, spec="eagle3")


class WindowAndState(CacheMachine):
    plan = tiny_plan(
        gpu_blocks=10,
        host_blocks=4,
        max_batch_size=3,
        target_window_groups=(
            WindowGroup(window_tokens=6, num_layers=1, bytes_per_token=2, blocks_per_seq=4),
        ),
        target_state_bytes_per_seq=16,
    )
    can_swap = False


class WindowsWithReuse(CacheMachine):
    """Sliding-window prefix reuse (no recurrent state): hits need cached window blocks."""

    plan = tiny_plan(
        gpu_blocks=10,
        host_blocks=4,
        max_batch_size=3,
        spec="eagle3",
        target_window_groups=(
            WindowGroup(window_tokens=6, num_layers=1, bytes_per_token=2, blocks_per_seq=4),
        ),
    )
    can_swap = False


class StateReuse(CacheMachine):
    """Recurrent state with cached states: hits restart from a state at their boundary."""

    plan = tiny_plan(
        gpu_blocks=10,
        host_blocks=4,
        max_batch_size=3,
        spec="eagle3",
        target_window_groups=(
            WindowGroup(window_tokens=6, num_layers=1, bytes_per_token=2, blocks_per_seq=4),
        ),
        target_state_bytes_per_seq=16,
        target_cached_states=2,
        target_state_bytes_per_checkpoint=4,
    )
    can_swap = False


class TargetOnly(CacheMachine):
    plan = tiny_plan(gpu_blocks=5, host_blocks=3, draft=False, spec="ngram")


class WithStorage(CacheMachine):
    plan = tiny_plan(gpu_blocks=6, host_blocks=3, disk_blocks=2)
    device = "cpu"


class EagleWithStorage(CacheMachine):
    """Room for three requests at once, so hits can chain blocks of different writers."""

    plan = tiny_plan(gpu_blocks=9, host_blocks=2, spec="eagle3")
    device = "cpu"


TestTwoRolesWithHost = TwoRolesWithHost.TestCase
TestTwoRolesWithHost.settings = SETTINGS
TestEagleUnequalBlocksWithDisk = EagleUnequalBlocksWithDisk.TestCase
TestEagleUnequalBlocksWithDisk.settings = SETTINGS
TestWindowAndState = WindowAndState.TestCase
TestWindowAndState.settings = SETTINGS
TestWindowsWithReuse = WindowsWithReuse.TestCase
TestWindowsWithReuse.settings = SETTINGS
TestStateReuse = StateReuse.TestCase
TestStateReuse.settings = SETTINGS
TestTargetOnly = TargetOnly.TestCase
TestTargetOnly.settings = settings(SETTINGS, max_examples=20)


@pytest.mark.parametrize("machine", [WithStorage, EagleWithStorage])
def test_storage_machine(machine: type[CacheMachine]) -> None:
    pytest.importorskip("torch")
    machine.TestCase.settings = settings(SETTINGS, max_examples=25)
    machine.TestCase("runTest").runTest()


def test_eagle_storage_machine_replays_issue_21() -> None:
    # the machine's steps of issue #21's scenario (tpb 4): X = base[:8], then 1 token
    # committed (X's draft K/V of block 1 reads it); Y = base[:12] + 1 fresh token while
    # X runs; Z the same shape. Z's block 1 must be Y's (followed by base[8], as in Z),
    # not X's: the bytes check reads each page's draft pattern (tokens through the next).
    pytest.importorskip("torch")
    m = EagleWithStorage()
    x, y, z = IDS[:3]
    m.admit(rid=x, base=BASES[0], cut=8, tail=0, salt=((), None))
    m.reserve(rid=x, n=1)
    m.commit(rid=x, n=1)
    m.admit(rid=y, base=BASES[0], cut=12, tail=1, salt=((), None))
    m.admit(rid=z, base=BASES[0], cut=12, tail=1, salt=((), None))
    # X: 9 tokens in 0..2; Y: 13 tokens, block 0 hit (8 follows it in both), new 3..5;
    # Z: 13 tokens, blocks 0 (X's) and 3 (Y's block 1) hit, new 6, 7
    assert m.cache.block_table(z, "draft") == (0, 3, 6, 7)
    m.consistent()
    m.bytes_survive()
