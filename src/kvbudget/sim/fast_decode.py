"""The replay's fast path: runs of steady decode steps, counted in integers.

A step is *steady* when every running request decodes (no prefill left), nothing waits
or is swapped out, and no arrival is due: then the step-by-step loop (:mod:`kvbudget.
sim.replay`) reserves ``K + 1`` slots for each running request, advances the clock by
the roofline's decode time and commits ``1 + accepted`` tokens to each. :func:`run_steady`
runs such steps with the same acceptance draws in the same order and the same clock
additions, keeps each request's tokens as an integer, and touches the cache only where
blocks change (:class:`~kvbudget.cache.decode_run.DecodeRun`), so the metrics are those
of the step-by-step loop, bit for bit. It stops before a step that is not steady, one
that reads the cache's counters (every ``sample_steps``, and ``check_every``), one whose
reservations the GPU cannot take (the step-by-step loop preempts there), and after a
step in which a request finishes (freed as the step-by-step loop frees it). Steps in
which no request can reach its threshold (each commits at most ``K + 1`` tokens) are
only draws and clock additions (:func:`_quiet_steps`).
"""

from __future__ import annotations

from bisect import bisect_right
from operator import add, ge, sub
from typing import TYPE_CHECKING

from kvbudget.cache.decode_run import NEVER

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.sim.replay import _Replay

OUTPUT_TOKEN = 1  # the id every output token has (replay's module docstring)


def run_steady(
    rp: _Replay, until_s: float, progress: Callable[[int], None] | None, check_every: int
) -> int:
    """Steady decode steps of ``rp`` while its clock is before ``until_s`` (the next
    arrival); returns how many ran (0: the next step is not one, run it step by step).

    Each request carries one threshold, the fewest tokens at which its commit needs more
    than an addition: its next block hashed, its next reservation needing a block, or its
    output done. Below it a decode step of that request is a draw and an addition."""
    running = rp.running
    if rp.waiting or rp.swapped or not running or rp.clock >= until_s:
        return 0
    for live in running:
        if live.prefill_left:
            return 0
    sample_steps = rp.config.sample_steps
    last = rp.steps + sample_steps - rp.steps % sample_steps - 1  # before the next sample
    if check_every:
        last = min(last, rp.steps + check_every - rp.steps % check_every - 1)
    if last <= rp.steps:
        return 0
    run = rp.cache.decode_run([live.rid for live in running], OUTPUT_TOKEN)
    if run is None:
        return 0
    tpb, slots, max_seq = rp.tpb, rp.step_slots, rp.max_seq
    blocks, hash_at = run.blocks, run.hash_at
    tokens = [live.context for live in running]
    done_at = [live.context + live.output - live.generated for live in running]

    def take_at(j: int) -> int:
        """Tokens from which request ``j``'s next reservation needs a block."""
        held = blocks[j] * tpb
        return NEVER if held >= max_seq else held - slots + 1

    order = range(len(running))
    takes = [take_at(j) for j in order]
    event_at = [min(hash_at[j], takes[j], done_at[j]) for j in order]
    took = [False] * len(running)
    rand, ascending, top = rp.accept.random, rp.accept.ascending, 1 + rp.k
    weights, kv, bandwidth, per_decoder, per_context, peak = rp.decode_terms
    fixed_flops = per_decoder * len(running)
    clock, steps, ctx = rp.clock, rp.steps, sum(tokens)
    finished = False
    takers = [j for j in order if tokens[j] >= takes[j]]
    while steps < last and clock < until_s:
        if not takers:
            # steps in which no request can reach its threshold (each commits at most
            # ``top`` tokens): draws and clock additions only, as the loop below runs them
            quiet = (min(map(sub, event_at, tokens)) - 1) // top
            if quiet > 0:
                steps, clock, ctx, tokens = _quiet_steps(
                    rp, min(last, steps + quiet), until_s, (steps, clock, ctx, tokens), progress
                )
                continue
        if takers:  # reservations that need blocks: all fit, or the step preempts
            extra = []
            need = 0
            for j in takers:
                c = tokens[j]
                total = c + slots
                if total > max_seq:  # the cache cuts a reservation at max_seq_len
                    total = max_seq if c < max_seq else c
                count = -(-total // tpb) - blocks[j]
                extra.append(count)
                need += count
            if need > run.available():
                break  # someone is preempted in this step: step by step
        # 1 + accepted per request, in running order (as _Replay._finish_step draws them)
        drawn = [top - bisect_right(ascending, rand()) for _ in order]
        if takers:
            from_free = need <= run.free()  # no eviction: skip what is released
            for j, count in zip(takers, extra, strict=True):
                if from_free and min(tokens[j] + drawn[j], done_at[j]) <= blocks[j] * tpb:
                    continue  # taken and released again this step: nothing changes
                run.take(j, count)
                took[j] = True
                event_at[j] = 0
            takers = []
        steps += 1
        memory_s = (weights + ctx * kv) / bandwidth
        if peak is None:
            clock += memory_s
        else:
            compute_s = (fixed_flops + per_context * ctx) / peak
            clock += memory_s if memory_s > compute_s else compute_s
        after = list(map(add, tokens, drawn))
        if any(map(ge, after, event_at)):  # commits past a threshold, in running order
            for j in [j for j in order if after[j] >= event_at[j]]:
                c = after[j]
                if c >= done_at[j]:
                    c = after[j] = done_at[j]
                    finished = True
                if took[j] or c >= hash_at[j]:
                    run.settle(j, c)
                    took[j] = False
                    takes[j] = take_at(j)
                if c >= takes[j]:
                    takers.append(j)
                event_at[j] = min(hash_at[j], takes[j], done_at[j])
            ctx = sum(after)
        else:
            ctx += sum(drawn)
        tokens = after
        if progress is not None and steps % 256 == 0:
            progress(rp.completed + sum(rp.reasons.values()))
        if finished:
            break
    ran = steps - rp.steps
    rp.clock, rp.steps = clock, steps
    run.close(tokens)
    done = []
    for j, live in enumerate(running):
        live.generated += tokens[j] - live.context
        live.context = tokens[j]
        if tokens[j] == done_at[j]:
            done.append(live)
    if ran:
        rp.retire(done)
    return ran


def _quiet_steps(
    rp: _Replay,
    stop: int,
    until_s: float,
    at: tuple[int, float, int, list[int]],
    progress: Callable[[int], None] | None,
) -> tuple[int, float, int, list[int]]:
    """Steps of :func:`run_steady` in which no request can reach its threshold, until
    step ``stop`` or the clock reaches ``until_s``: the same draws, in the same order,
    and the same clock additions, with no threshold compared. ``at`` and the result are
    (steps, clock, summed context, each running request's tokens)."""
    steps, clock, ctx, tokens = at
    rand, ascending, top = rp.accept.random, rp.accept.ascending, 1 + rp.k
    weights, kv, bandwidth, per_decoder, per_context, peak = rp.decode_terms
    width = len(tokens)
    fixed_flops = per_decoder * width
    order = range(width)
    flat: list[int] = []
    while steps < stop and clock < until_s:
        drawn = [top - bisect_right(ascending, rand()) for _ in order]
        flat += drawn
        steps += 1
        memory_s = (weights + ctx * kv) / bandwidth
        if peak is None:
            clock += memory_s
        else:
            compute_s = (fixed_flops + per_context * ctx) / peak
            clock += memory_s if memory_s > compute_s else compute_s
        ctx += sum(drawn)
        if progress is not None and steps % 256 == 0:
            progress(rp.completed + sum(rp.reasons.values()))
    if width == 1:
        return steps, clock, ctx, [tokens[0] + sum(flat)]
    return steps, clock, ctx, [t + sum(flat[j::width]) for j, t in enumerate(tokens)]
