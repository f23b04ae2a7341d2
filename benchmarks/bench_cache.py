"""Replay a request trace through SpecDecodeCache and through a trivial allocator.

Usage::

    python benchmarks/bench_cache.py                    # the whole trace
    python benchmarks/bench_cache.py --requests 2000    # a quick run
    python benchmarks/bench_cache.py --profile          # cProfile of the cache replay
    python benchmarks/bench_cache.py --ablate-exactness # what SHA-256 + token checks cost

Workload (one op stream, built before timing, replayed unchanged through both):

* requests from ``src/kvbudget/data/traces/azure-llm-inference-2023-conv.csv`` (the Azure
  LLM inference trace 2023, conversation; CC-BY 4.0; prompt and output lengths), in
  trace order, at most ``--running`` decoding at once;
* synthetic shared prefixes (a seeded RNG picks, per request): ``--followup-share`` of
  the requests are a later turn of one of the last ``--followup-window`` finished
  conversations (its prompt and output, cut to the new prompt length);
  ``--prefix-share`` start with one of ``--system-prompts`` system prompts (lengths 256,
  512, ... tokens), cut likewise; the rest of every prompt, and every generated token,
  is a random id of Llama-3.1's vocabulary (128,256 ids; a 16-token block of them never
  repeats by chance);
* decode-heavy speculative decoding: each step reserves ``K + 1`` tokens (K = 3 draft
  tokens + the bonus token) and commits ``accepted + 1`` of them, ``accepted`` cycling
  through a fixed pattern, until the request's output length is reached; then free.

The cache is metadata-only, with a target and an EAGLE3-style draft manager and a host
tier (4x the GPU blocks). The GPU holds enough blocks for the running set without any
sharing, plus 25%, so no operation can fail in either allocator; the remaining room and
the host tier hold cached prefixes. The baseline is one model, no tiers: a free list
(an OrderedDict, oldest first) and a dict of block hashes, written as simply as possible.

``--ablate-exactness`` measures what exact prefix hits cost: it also replays the stream
through the same cache with its SHA-256 block hashes replaced, in this process only, by
Python's ``hash`` (what the baseline uses; it collides, so the cache never ships it) and
its prompt checks skipped (commit's per-token check stays).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import gc
import pstats
import random
import sys
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.plan_types import Plan
from kvbudget.planner import plan

REPO = Path(__file__).resolve().parents[1]
# shipped with the package (CC-BY 4.0, attribution in its README.md)
DEFAULT_TRACE = REPO / "src/kvbudget/data/traces/azure-llm-inference-2023-conv.csv"
VOCAB_SIZE = 128_256  # Llama-3.1's: the cache checks token ids against it
ACCEPT_PATTERN = (3, 1, 0, 2, 3, 2)  # accepted draft tokens per step, cycled
ADMIT, RESERVE, COMMIT, FREE = 0, 1, 2, 3
Op = tuple[int, RequestId, Any]


# ---------------------------------------------------------------------------- workload
def load_trace(path: Path, limit: int | None) -> list[tuple[int, int]]:
    """(prompt tokens, generated tokens) per request, in trace order."""
    rows: list[tuple[int, int]] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            rows.append((max(1, int(row["ContextTokens"])), max(1, int(row["GeneratedTokens"]))))
            if limit is not None and len(rows) >= limit:
                break
    return rows


def build_ops(
    trace: list[tuple[int, int]],
    *,
    tokens_per_block: int,
    max_draft_len: int,
    running: int,
    system_prompts: int,
    prefix_share: float,
    followup_share: float,
    followup_window: int,
    seed: int,
) -> tuple[list[Op], int]:
    """The op stream and the peak blocks the running set holds without sharing."""
    rng = random.Random(seed)
    systems = [
        [rng.randrange(1, 32000) for _ in range(256 * (k + 1))] for k in range(system_prompts)
    ]
    vocab = range(VOCAB_SIZE)  # fresh tokens: random ids of the target's vocabulary

    def fresh(n: int) -> list[int]:
        return rng.choices(vocab, k=n)

    ops: list[Op] = []
    pending = list(enumerate(trace))
    pending.reverse()
    live: dict[RequestId, list[Any]] = {}  # rid -> [tokens, remaining output, step]
    finished: deque[list[int]] = deque(maxlen=followup_window)
    blocks: dict[RequestId, int] = {}
    peak = 0
    tpb = tokens_per_block
    reserve = max_draft_len + 1
    while pending or live:
        while pending and len(live) < running:
            i, (prompt_len, output_len) = pending.pop()
            rid = RequestId(f"r{i}")
            prompt: list[int] = []
            draw = rng.random()
            if draw < followup_share and finished:  # a later turn of a finished conversation
                prompt = finished[rng.randrange(len(finished))][:prompt_len]
            elif draw < followup_share + prefix_share:
                prompt = systems[rng.randrange(system_prompts)][:prompt_len]
            prompt = prompt + fresh(prompt_len - len(prompt))
            ops.append((ADMIT, rid, prompt))
            live[rid] = [list(prompt), output_len, 0]
        for rid in list(live):
            state = live[rid]
            tokens, remaining, step = state
            ops.append((RESERVE, rid, reserve))
            blocks[rid] = -(-(len(tokens) + reserve) // tpb)
            accepted = min(remaining, ACCEPT_PATTERN[step % len(ACCEPT_PATTERN)] + 1)
            new_tokens = tuple(fresh(accepted))
            ops.append((COMMIT, rid, new_tokens))
            tokens.extend(new_tokens)
            state[1] -= accepted
            state[2] += 1
            if state[1] == 0:
                ops.append((FREE, rid, None))
                finished.append(tokens)
                del live[rid]
        peak = max(peak, sum(blocks.values()))
        for rid in [r for r in blocks if r not in live]:
            del blocks[rid]
    return ops, peak


def make_plan(gpu_blocks: int, host_blocks: int, tokens_per_block: int, draft_len: int) -> Plan:
    """A one-rank plan from the planner: Llama-3.1-8B-Instruct + its EAGLE3 head.

    Budgets are whole multiples of one block of both managers
    ((131072 + 4096) B/token x tokens_per_block), so the slope split gives each manager
    exactly ``gpu_blocks`` / ``host_blocks`` blocks.
    """
    block_pair_bytes = (131072 + 4096) * tokens_per_block
    built = plan(
        kv_budget=gpu_blocks * block_pair_bytes,
        host_budget=host_blocks * block_pair_bytes,
        tokens_per_block=tokens_per_block,
        max_draft_len=draft_len,
        max_seq_len=gpu_blocks * tokens_per_block - draft_len,
        max_batch_size=1,
    )
    for m in built.managers:
        assert (m.gpu.blocks, m.host.blocks) == (gpu_blocks, host_blocks), m
    return built


# ---------------------------------------------------------------------------- baseline
class BaselineAllocator:
    """One model, no tiers, no checks: a free list and a dict of block hashes."""

    def __init__(self, num_blocks: int, tokens_per_block: int) -> None:
        self.tpb = tokens_per_block
        self.free_blocks: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.refcount = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.by_hash: dict[int, int] = {}
        self.requests: dict[RequestId, list[Any]] = {}  # tokens, table, hashes, reserved
        self.prompt_tokens = 0
        self.hit_tokens = 0

    def _alloc(self) -> int:
        block, _ = self.free_blocks.popitem(last=False)
        h = self.block_hash[block]
        if h is not None:
            del self.by_hash[h]
            self.block_hash[block] = None
        self.refcount[block] = 1
        return block

    def _release(self, block: int) -> None:
        self.refcount[block] -= 1
        if self.refcount[block] == 0:
            self.free_blocks[block] = None

    def _hash_full(self, tokens: list[int], hashes: list[int], table: list[int]) -> None:
        tpb = self.tpb
        while len(hashes) < len(tokens) // tpb:
            i = len(hashes)
            parent = hashes[-1] if hashes else 0
            h = hash((parent, tuple(tokens[i * tpb : (i + 1) * tpb])))
            hashes.append(h)
            if h not in self.by_hash:
                self.by_hash[h] = table[i]
                self.block_hash[table[i]] = h

    def admit(self, rid: RequestId, prompt: Sequence[int]) -> int:
        tpb = self.tpb
        tokens = list(prompt)
        hashes: list[int] = []
        parent = 0
        for i in range(len(tokens) // tpb):
            parent = hash((parent, tuple(tokens[i * tpb : (i + 1) * tpb])))
            hashes.append(parent)
        table: list[int] = []
        for h in hashes[: (len(tokens) - 1) // tpb]:
            block = self.by_hash.get(h)
            if block is None:
                break
            if self.refcount[block] == 0:
                del self.free_blocks[block]
            self.refcount[block] += 1
            table.append(block)
        hit = len(table)
        while len(table) < -(-len(tokens) // tpb):
            table.append(self._alloc())
        for i in range(hit, len(hashes)):
            if hashes[i] not in self.by_hash:
                self.by_hash[hashes[i]] = table[i]
                self.block_hash[table[i]] = hashes[i]
        self.requests[rid] = [tokens, table, hashes, 0]
        self.prompt_tokens += len(tokens)
        self.hit_tokens += hit * tpb
        return hit * tpb

    def reserve(self, rid: RequestId, n: int) -> None:
        req = self.requests[rid]
        req[3] += n
        table = req[1]
        need = -(-(len(req[0]) + req[3]) // self.tpb)
        while len(table) < need:
            table.append(self._alloc())

    def commit(self, rid: RequestId, accepted: Sequence[int]) -> None:
        req = self.requests[rid]
        tokens, table, hashes, _ = req
        tokens.extend(accepted)
        req[3] = 0
        self._hash_full(tokens, hashes, table)
        keep = -(-len(tokens) // self.tpb)
        while len(table) > keep:
            self._release(table.pop())

    def free(self, rid: RequestId) -> None:
        for block in reversed(self.requests.pop(rid)[1]):
            self._release(block)


# ---------------------------------------------------------------------------- replay
def replay(ops: list[Op], alloc: Any) -> float:
    """Seconds to run ``ops`` through ``alloc`` (admit/reserve/commit/free)."""
    admit: Callable[..., Any] = alloc.admit
    reserve: Callable[..., Any] = alloc.reserve
    commit: Callable[..., Any] = alloc.commit
    free: Callable[..., Any] = alloc.free
    gc.collect()
    gc.disable()  # as timeit does: collections scanning the op stream are noise
    start = time.perf_counter()
    for code, rid, arg in ops:
        if code == RESERVE:
            reserve(rid, arg)
        elif code == COMMIT:
            commit(rid, arg)
        elif code == ADMIT:
            admit(rid, arg)
        else:
            free(rid)
    elapsed = time.perf_counter() - start
    gc.enable()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--requests", type=int, default=None, help="replay the first N only")
    parser.add_argument("--tokens-per-block", type=int, default=16)
    parser.add_argument("--max-draft-len", type=int, default=3)
    parser.add_argument("--running", type=int, default=64, help="requests decoding at once")
    parser.add_argument("--system-prompts", type=int, default=4)
    parser.add_argument("--prefix-share", type=float, default=0.5)
    parser.add_argument("--followup-share", type=float, default=0.2)
    parser.add_argument("--followup-window", type=int, default=1024)
    parser.add_argument("--host-factor", type=int, default=4, help="host blocks / gpu blocks")
    parser.add_argument("--repeat", type=int, default=5, help="best of N timed replays")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="cProfile one cache replay")
    parser.add_argument(
        "--ablate-exactness",
        action="store_true",
        help="also time the cache with Python's hash and no prompt checks (measurement only)",
    )
    args = parser.parse_args(argv)

    if not args.trace.is_file():
        print(
            f"trace not found: {args.trace}\n"
            "put azure-llm-inference-2023-conv.csv there or pass --trace PATH",
            file=sys.stderr,
        )
        return 2
    trace = load_trace(args.trace, args.requests)
    tpb = args.tokens_per_block
    ops, peak = build_ops(
        trace,
        tokens_per_block=tpb,
        max_draft_len=args.max_draft_len,
        running=args.running,
        system_prompts=args.system_prompts,
        prefix_share=args.prefix_share,
        followup_share=args.followup_share,
        followup_window=args.followup_window,
        seed=args.seed,
    )
    gpu_blocks = peak + peak // 4
    host_blocks = gpu_blocks * args.host_factor
    plan = make_plan(gpu_blocks, host_blocks, tpb, args.max_draft_len)

    def new_cache() -> SpecDecodeCache:
        return SpecDecodeCache.from_plan(plan)

    def new_baseline() -> BaselineAllocator:
        return BaselineAllocator(gpu_blocks, tpb)

    if args.profile:
        cache = new_cache()
        profiler = cProfile.Profile()
        profiler.enable()
        replay(ops, cache)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        return 0

    best_cache = best_base = float("inf")
    cache, base = new_cache(), new_baseline()
    for _ in range(max(1, args.repeat)):
        base = new_baseline()
        best_base = min(best_base, replay(ops, base))
        cache = new_cache()
        best_cache = min(best_cache, replay(ops, cache))
    cache.check_invariants()
    stats = cache.stats()
    host = stats.pool("target", "host")
    n = len(ops)
    print(f"trace: {args.trace.name}, {len(trace)} requests, {n} ops")
    print(f"blocks: gpu {gpu_blocks} per role, host {host_blocks} per role, {tpb} tokens each")
    print(
        f"baseline (1 model, no tiers):      {n / best_base:12,.0f} ops/s  "
        f"hit rate {base.hit_tokens / base.prompt_tokens:.3f}"
    )
    print(
        f"SpecDecodeCache (target+draft+host): {n / best_cache:10,.0f} ops/s  "
        f"hit rate {stats.hit_rate:.3f}  (host: {host.offloaded_blocks} offloaded, "
        f"{host.onboarded_blocks} onboarded)"
    )
    print(f"ratio: {best_base / best_cache:.2f}x of the baseline")
    if args.ablate_exactness:
        best_ablated = float("inf")
        with ablated_exactness():
            for _ in range(max(1, args.repeat)):
                best_ablated = min(best_ablated, replay(ops, new_cache()))
        print(
            f"ablation (Python hash, no prompt checks): {n / best_ablated:9,.0f} ops/s  "
            f"ratio {best_base / best_ablated:.2f}x of the baseline"
        )
    return 0


@contextmanager
def ablated_exactness() -> Iterator[None]:
    """Inside: the cache hashes blocks with Python's ``hash`` and skips token checks."""
    from kvbudget.cache import spec_decode_cache as module

    saved = (module.extend_block_hashes, module.checked_prompt_ids)

    def python_hashes(
        hashes: list[Any],
        token_ids: Sequence[int],
        tpb: int,
        extra: Any = (),
        packed: Any = None,
        root: Any = 0,
        *,
        with_next: bool = False,
    ) -> int:
        start, end = len(hashes), (len(token_ids) - with_next) // tpb
        parent = hashes[-1] if hashes else root
        for i in range(start, end):  # with_next: the token after the block too
            parent = hash((parent, tuple(token_ids[i * tpb : (i + 1) * tpb + with_next])))
            hashes.append(parent)
        return max(0, end - start)

    def unchecked(token_ids: Any, request_id: object, vocab_size: int) -> tuple[Any, None]:
        return array("q", token_ids), None

    module.extend_block_hashes = python_hashes  # type: ignore[assignment]
    module.checked_prompt_ids = unchecked  # type: ignore[assignment]
    try:
        yield
    finally:
        module.extend_block_hashes, module.checked_prompt_ids = saved


if __name__ == "__main__":
    raise SystemExit(main())
