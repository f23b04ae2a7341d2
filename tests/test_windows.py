"""WindowPools on its own: spans, hits and the pool bound."""

from __future__ import annotations

from collections.abc import Callable

from kvbudget.cache.request import SeqBlocks
from kvbudget.cache.windows import WindowPools
from kvbudget.cost import WindowGroup
from kvbudget.plan_types import Plan

WINDOW = WindowGroup(window_tokens=8, num_layers=1, bytes_per_token=2, blocks_per_seq=4)


def pools(make_plan: Callable[..., Plan]) -> WindowPools:
    plan = make_plan(gpu_blocks=16, target_window_groups=(WINDOW,), max_batch_size=2)
    return WindowPools(plan.managers[0])


def test_span_is_the_window_of_the_next_token(make_plan: Callable[..., Plan]) -> None:
    w = pools(make_plan)
    # blocks of 4 tokens, window 8: after 20 tokens the next token sees 13..19 -> 3, 4
    assert w.span(0, 20, 20) == (3, 5)
    assert w.span(0, 20, 24) == (3, 6)  # + 4 lookahead tokens: block 5 too
    assert w.span(0, 5, 5) == (0, 2)  # short sequences start at block 0
    assert w.pools[0].num_blocks == 8  # blocks_per_seq 4 x max_batch_size 2


def test_a_hit_needs_the_window_at_its_position(make_plan: Callable[..., Plan]) -> None:
    from kvbudget.cache.hashing import extend_block_hashes
    from kvbudget.cache.ids import BlockHash

    w = pools(make_plan)
    hashes: list[BlockHash] = []
    extend_block_hashes(hashes, list(range(20)), 4)
    seq = SeqBlocks()
    w.admit(seq, 20, hashes, 0)  # prefill leaves blocks 0..2 cached, keeps 3, 4
    assert (seq.window_first, seq.window_tables) == ([3], [[3, 4]])
    w.release_all(seq)  # 3, 4 hashed: cached too
    # a 4-block hit needs the window at 16 tokens: blocks 2, 3; a 2-block hit blocks 0, 1
    assert w.hit(hashes, 4) and w.hit(hashes, 2)
    assert w.shortage(None, 20, 20, hashes, 4) is None
