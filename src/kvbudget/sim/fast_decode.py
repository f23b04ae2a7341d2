"""The replay's fast path: a run of steady decode steps computed in bulk.

A step is *steady* when every running request decodes (no prefill left), nothing waits
or is swapped out, and no arrival is due: then the step-by-step loop (:mod:`kvbudget.
sim.replay`) reserves ``K + 1`` slots for each running request, advances the clock by
the roofline's decode time and commits ``1 + accepted`` tokens to each. :func:`run_steady`
computes a whole run of such steps at once, with the same results bit for bit:

1. the run's acceptance draws are taken from the replay's stream at once (step after
   step, running order within a step: the order the step-by-step loop takes them in,
   :class:`~kvbudget.sim.acceptance.AcceptanceDraw`), and each request's tokens after
   every step are a prefix sum of its draws;
2. the run ends after the first step in which a request reaches its output (found by
   bisection), before the first step that starts at or after the next arrival (the
   clock, added step by step with the roofline's decode terms inlined exactly as the
   loop adds them), with the next step whose counters the replay samples (every
   ``sample_steps``: its reservations, the sample, then its commits, as the loop orders
   them), before the next ``check_every`` step, and before a step whose reservations
   the GPU cannot take (the step-by-step loop preempts there);
3. each request's reservation steps (its tokens within ``K + 1`` of its blocks' end)
   are found by bisection in its prefix sums; the blocks they evict are counted in
   integers as the loop takes and releases them (:func:`_evictions`: the free list
   first, a block taken from it and released in the same step skipped, ids being
   labels), and the cache is then brought to the run's end in one batch
   (:meth:`DecodeRun.finish <kvbudget.cache.decode_run.DecodeRun.finish>`: those
   evictions in LRU order, each request's new blocks, tokens and block hashes). Where a
   filled block's hash is indexed already (a twin, whose hand-over depends on when it
   is registered) the run's events go one by one in step order instead
   (:func:`_cache_events`).

The draws the run took past its end are put back for the next step. Between the
run's cache events only integers move, so counts, hashes, hits, evictions, host
traffic, clocks and latencies are those of the step-by-step loop.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.sim.replay import _Replay
    from kvbudget.sim.replay_cache import DecodeSteps as DecodeRun

NEVER = 1 << 62  # more output tokens than any request has
# sampled steps a run may go through besides the one it may end with
SAMPLED_STEPS_PER_RUN = 1

# step -> (request, new blocks, how many of them its commit keeps) of the reservations
# that need blocks; step -> requests whose commit fills a block (hashed)
Takes = dict[int, list[tuple[int, int, int]]]
Fills = dict[int, list[int]]


def run_steady(
    rp: _Replay, until_s: float, progress: Callable[[int], None] | None, check_every: int
) -> int:
    """Steady decode steps of ``rp`` while its clock is before ``until_s`` (the next
    arrival), computed in bulk (module docstring); returns how many ran (0: the next
    step is not one, run it step by step)."""
    running = rp.running
    if rp.waiting or rp.swapped or not running or rp.clock >= until_s:
        return 0
    done_at = []  # each request's tokens once its output is done
    left = NEVER  # the fewest output tokens a request has left
    for live in running:
        if live.prefill_left:
            return 0
        more = live.output - live.generated
        done_at.append(live.context + more)
        if more < left:
            left = more
    first = rp.steps
    sample_steps = rp.config.sample_steps
    # the run may go on past the next sampled step, to the one after (and end with it)
    last = first + (SAMPLED_STEPS_PER_RUN + 1) * sample_steps - first % sample_steps
    if check_every:
        last = min(last, first + check_every - first % check_every - 1)
    if last <= first:
        return 0
    run = rp.cache.decode_run([live.rid for live in running])
    if run is None:
        return 0
    width = len(running)
    # each step commits at least one token: some request finishes within ``span`` steps;
    # and a step takes at least the weights' read, so the arrival comes within as many
    # steps as fit before it at that pace (a bound: the clocks below cut the run exactly)
    span = min(last - first, left, rp.steps_before(until_s))
    drawn, at = rp.accept.window(span * width)
    stop = at + span * width
    # paths[j][s]: request j's tokens before step s (after step s - 1)
    paths = [
        list(accumulate(drawn[at + j : stop : width], initial=live.context))
        for j, live in enumerate(running)
    ]
    n = span
    for path, done in zip(paths, done_at, strict=True):
        end = bisect_left(path, done)  # it reaches its output in step index - 1
        if end < n:
            n = end
    for path, done in zip(paths, done_at, strict=True):
        if path[n] > done:
            path[n] = done  # the finishing commit is cut at the output's end
    clocks = _clocks(
        rp, paths[0] if width == 1 else list(map(sum, zip(*paths, strict=True))), n, until_s
    )
    n = len(clocks) - 1
    takes: Takes = {}
    if n:
        tpb, slots, max_seq = rp.tpb, rp.step_slots, rp.max_seq
        for j, path in enumerate(paths):
            if path[n - 1] + slots > -(-path[0] // tpb) * tpb:  # it reserves a block
                _reservations(takes, j, path, n, tpb, slots, max_seq)
    n = _advance(rp, run, paths, takes, clocks, first, n)
    rp.accept.unread((span - n) * width)
    if not n:
        run.close([path[0] for path in paths])
        return 0
    if progress is not None and first // 256 != (first + n) // 256:
        progress(rp.completed + sum(rp.reasons.values()))
    tokens = [path[n] for path in paths]
    run.close(tokens)
    finished = []
    for live, have, end in zip(running, tokens, done_at, strict=True):
        live.generated += have - live.context
        live.context = have
        if have == end:
            finished.append(live)
    if finished:  # (else nothing retire counts has changed: no admission, no arrival)
        rp.retire(finished)
    return n


def _clocks(rp: _Replay, contexts: list[int], steps: int, until_s: float) -> list[float]:
    """The clock before each of the first ``steps`` steps and after the last one that
    runs: a step runs while the clock before it is before ``until_s``. ``contexts[s]``
    is the summed context of step ``s``; the addition is the step-by-step loop's
    roofline time of a decode-only step (:meth:`Roofline.decode_terms
    <kvbudget.sim.roofline.Roofline.decode_terms>`, bit for bit)."""
    weights, kv, bandwidth, per_decoder, per_context, peak = rp.decode_terms
    run = contexts[:steps]
    fixed_flops = per_decoder * len(rp.running)
    if peak is None or (
        run
        and _memory_bound(run[0], rp.decode_terms, fixed_flops)
        and _memory_bound(run[-1], rp.decode_terms, fixed_flops)
    ):  # (memory - compute time is linear in the context: bound at both ends, throughout)
        times = [(weights + ctx * kv) / bandwidth for ctx in run]
    else:
        times = [
            memory_s if (memory_s := (weights + ctx * kv) / bandwidth) > (
                compute_s := (fixed_flops + per_context * ctx) / peak
            ) else compute_s
            for ctx in run
        ]  # fmt: skip
    # the clock added step by step (accumulate adds in order: the same floats)
    clocks = list(accumulate(times, initial=rp.clock))
    ran = bisect_left(clocks, until_s, 0, len(run))  # the first step starting at until_s
    return clocks[: ran + 1]


def _advance(
    rp: _Replay,
    run: DecodeRun,
    paths: list[list[int]],
    takes: Takes,
    clocks: list[float],
    first: int,
    steps: int,
) -> int:
    """Bring the cache and the clock through the run's first ``steps`` steps
    (``takes``: their reservations, ``clocks`` the clock before each): each stretch
    up to a step the replay samples in one batch (:func:`_evictions` and
    :meth:`DecodeRun.finish <kvbudget.cache.decode_run.DecodeRun.finish>`, or event by
    event where a twin refuses it), the sampled step one by one (:func:`_sampled_step`).
    Returns the steps that ran: fewer where the GPU cannot take a step's reservations
    (the step-by-step loop preempts there) or a sample moved the clock (host copies:
    the later clocks no longer hold)."""
    sample_steps = rp.config.sample_steps
    at = 0  # steps brought about so far
    while True:
        # the next sampled step: the one after which rp.steps is a multiple
        sampled = sample_steps - (first + at) % sample_steps - 1 + at
        end = sampled if sampled < steps else steps
        ran, evict = _evictions(run, takes, at, end)
        if ran > at and not run.finish([path[ran] for path in paths], evict):
            ran = _cache_events(run, paths, at, end, takes, rp.tpb)  # a twin: one by one
        rp.clock, rp.steps = clocks[ran], first + ran
        if ran < end or end == steps:
            return ran
        clock = clocks[end + 1]
        if not _sampled_step(rp, run, paths, end, takes.get(end, []), clock):
            return end
        if rp.clock != clock:  # the sample moved the clock on
            return end + 1
        at = end + 1
        if at == steps:
            return at


def _memory_bound(
    context: int, terms: tuple[int, int, float, float, float, float | None], fixed_flops: float
) -> bool:
    """Whether a step over ``context`` tokens reads memory for longer than it computes,
    by more than float rounding (then it takes the memory time, bit for bit); ``terms``:
    :meth:`Roofline.decode_terms <kvbudget.sim.roofline.Roofline.decode_terms>`."""
    weights, kv, bandwidth, _, per_context, peak = terms
    assert peak is not None
    memory_s = (weights + context * kv) / bandwidth
    return memory_s > (fixed_flops + per_context * context) / peak * (1 + 1e-9)


def _evictions(run: DecodeRun, takes: Takes, start: int, steps: int) -> tuple[int, int]:
    """The steps from ``start`` that run (to ``steps``, or the first whose reservations
    the GPU cannot take) and how many cached blocks their reservations evict, counted as
    :func:`_cache_events` takes and releases blocks (the free list first, blocks taken
    and released again from it skipped, an evicting step's unkept blocks released onto
    it), in integers. Exact when no block the run fills hands a twin's hash over
    (:meth:`DecodeRun.finish <kvbudget.cache.decode_run.DecodeRun.finish>` checks)."""
    free = run.free()
    cached = run.available() - free
    evict = 0
    for s in sorted(takes):
        if s < start:
            continue
        if s >= steps:
            break
        need = kept = 0
        for _, count, keep in takes[s]:
            need += count
            kept += keep
        if need > free + cached:
            return s, evict
        if need <= free:
            free -= kept
        else:
            evict += need - free
            cached -= need - free
            free = need - kept
    return steps, evict


def _sampled_step(
    rp: _Replay,
    run: DecodeRun,
    paths: list[list[int]],
    s: int,
    takers: list[tuple[int, int, int]],
    clock: float,
) -> bool:
    """Step ``s``, the run's last, whose counters the replay samples: its reservations
    taken (every one: the sample counts the blocks they hold), the clock advanced to
    ``clock``, the
    sample read (:meth:`_Replay.sample <kvbudget.sim.replay._Replay.sample>`, which may
    move the clock on for host copies), then the commits, as the step-by-step loop runs
    it. False, changing nothing, when the GPU cannot take the reservations."""
    need = 0
    for _, count, _ in takers:
        need += count
    if need > run.available():
        return False
    settle = set()
    for j, count, _ in takers:
        run.take(j, count)
        settle.add(j)
    rp.clock = clock
    rp.steps += 1
    rp.sample()
    for j, path in enumerate(paths):
        if j in settle or path[s + 1] >= run.hash_at[j]:
            run.settle(j, path[s + 1])
    return True


def _cache_events(
    run: DecodeRun, paths: list[list[int]], start: int, steps: int, takes: Takes, tpb: int
) -> int:
    """The cache events of steps ``start .. steps - 1`` (``takes``: their reservations),
    one by one in step order (a step's reservations, then its commits in running order);
    returns the steps that ran: ``steps``, or the first step whose reservations the GPU
    cannot take."""
    fills: Fills = {}
    for j, path in enumerate(paths):
        _fills(fills, j, path, steps, run.hash_at[j], tpb)
    if not takes and not fills:
        return steps
    for s in sorted(takes.keys() | fills.keys()):
        if s < start:
            continue
        if s >= steps:
            break
        settle = fills.get(s, [])
        takers = takes.get(s)
        if takers:
            need = 0
            for _, count, _ in takers:
                need += count
            if need > run.available():
                return s  # someone is preempted in this step: step by step
            from_free = need <= run.free()  # no eviction: skip what is released again
            took = False
            for j, count, keep in takers:
                if keep or not from_free:
                    run.take(j, count)
                    settle.append(j)
                    took = True
            if took:
                settle = sorted(set(settle))
        for j in settle:
            run.settle(j, paths[j][s + 1])
    return steps


def _reservations(
    takes: Takes, j: int, path: list[int], steps: int, tpb: int, slots: int, max_seq: int
) -> None:
    """Add to ``takes`` the steps before ``steps`` in which request ``j`` (tokens
    ``path``) reserves past the blocks it holds (``ceil(tokens / tpb)`` at a step's
    start), with how many blocks and how many of them its commit keeps."""
    s = 0
    end = -(-path[0] // tpb) * tpb  # the end of the blocks held
    while True:
        s = bisect_left(path, end - slots + 1, s, steps)
        if s >= steps:
            return
        t = path[s]
        if t > end:  # it holds more blocks by now
            end = -(-t // tpb) * tpb
            continue
        total = t + slots if t + slots <= max_seq else max_seq  # cut at max_seq_len
        count = -(-total // tpb) - end // tpb
        if count > 0:
            kept = -(-path[s + 1] // tpb) - end // tpb
            takes.setdefault(s, []).append((j, count, kept if kept > 0 else 0))
        s += 1


def _fills(fills: Fills, j: int, path: list[int], steps: int, hash_at: int, tpb: int) -> None:
    """Add to ``fills`` the steps before ``steps`` whose commit brings request ``j``
    (tokens ``path``) to its next block's hash threshold ``hash_at`` (the next
    thresholds are ``tpb`` apart)."""
    i = 1
    while True:
        i = bisect_left(path, hash_at, i, steps + 1)
        if i > steps:
            return
        fills.setdefault(i - 1, []).append(j)
        hash_at += ((path[i] - hash_at) // tpb + 1) * tpb
        i += 1
