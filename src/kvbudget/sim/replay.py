"""Replay a trace through one policy's metadata-only :class:`~kvbudget.SpecDecodeCache`.

The engine loop, one step at a time (a continuous-batching scheduler, vLLM-like)::

    arrivals up to now join the waiting queue (FIFO)
    1. every running request whose prefill is done reserves K + 1 slots
         (refused: preempt the newest running request, swap when the plan has a host
          tier, else recompute; the request itself when it is the newest)
    2. swapped-out requests resume, oldest first, while the GPU takes them
    3. prefills continue in chunks, then waiting requests are admitted (prefix hits from
         the cache), while the step has tokens left (max_num_batched_tokens, less K + 1
         per decoding request) and fewer than max_batch_size requests run
    4. the clock advances by the roofline step time; every sample_steps steps the
         cache's counters are read: the host copies of that window take bytes / host
         link seconds on the copy engines, alongside the steps, and delay the clock only
         by what they take beyond the window
    5. decoding requests commit 1 + accepted tokens (seeded acceptance draws); a request
         whose prefill completed emits its first token (TTFT); finished ones are freed

The admission and preemption rules are :mod:`kvbudget.scheduling`'s, shared with the
reference engine, with the simulator's settings (``admit_while_swapped=True``,
``watermark=False``); steady decode steps take the fast path of
:mod:`kvbudget.sim.fast_decode` (the same metrics).

The cache is :mod:`kvbudget.sim.replay_cache`'s: the engine's
:class:`~kvbudget.SpecDecodeCache` fed synthetic prompt ids (:mod:`kvbudget.sim.
prompt_ids`: a request's prefix group's seeded ids, marker tokens, a filler; outputs one
fixed id), or, for plans whose cache is kv blocks on the GPU, the same counts kept per
extent (:mod:`kvbudget.sim.counted_cache`; ``ReplayConfig(counted_cache=False)`` or
``fast_forward=False`` for the engine's cache).

Not finished, with a reason (every request is either completed or counted in one):

* ``prompt_exceeds_max_seq_len``: the prompt has ``max_seq_len`` tokens or more;
* ``prompt_exceeds_gpu_blocks``: the prompt needs more GPU blocks than the plan has;
* ``not_admissible``: refused by an empty cache (window or state pools);
* ``outgrew_gpu``: a lone running request could not reserve its lookahead.

Outputs longer than ``max_seq_len - prompt`` tokens are cut there (``truncated_outputs``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from kvbudget.cache import RequestId
from kvbudget.errors import InvalidArgumentError, OutOfBlocksError
from kvbudget.scheduling import BatchRules, Reserved, reserve_or_preempt
from kvbudget.sim.acceptance import AcceptanceDraw, AcceptanceModel
from kvbudget.sim.fast_decode import run_steady
from kvbudget.sim.metrics import LatencyRecorder, Percentiles, PolicyMetrics, Series
from kvbudget.sim.policies import PolicyPlan
from kvbudget.sim.prompt_ids import PromptIds
from kvbudget.sim.replay_cache import replay_cache
from kvbudget.sim.roofline import Roofline
from kvbudget.sim.trace import TraceRequest

NO_BOUND = 1 << 62  # more steps than any run takes

PreemptChoice = Literal["auto", "swap", "recompute"]
ProgressFn = Callable[[int], None]


@dataclass(frozen=True, kw_only=True)
class ReplayConfig:
    """Settings of one replay (the same for every policy).

    ``max_num_batched_tokens``: tokens per step (decode slots plus prefill chunks);
    ``preempt``: ``"auto"`` swaps when the plan has host blocks, else recomputes;
    ``sample_steps``: steps between reads of the cache's counters (series points and
    host traffic); ``seed``: acceptance draws and prefix-group tokens; ``fast_forward``:
    run steady decode steps in integers (:mod:`kvbudget.sim.fast_decode`, the same
    metrics), False for the step-by-step loop with the engine's cache alone (the
    reference both are tested against); ``counted_cache``: count a plan's blocks per
    extent where it fits (:mod:`kvbudget.sim.counted_cache`, the same metrics), False
    for the engine's cache.
    """

    acceptance: AcceptanceModel
    max_num_batched_tokens: int = 8192
    preempt: PreemptChoice = "auto"
    sample_steps: int = 64
    max_series_points: int = 2048
    seed: int = 0
    fast_forward: bool = True
    counted_cache: bool = True

    def __post_init__(self) -> None:
        if type(self.max_num_batched_tokens) is not int or self.max_num_batched_tokens < 1:
            raise InvalidArgumentError(
                f"max_num_batched_tokens must be an int >= 1, got {self.max_num_batched_tokens!r}"
            )
        if self.preempt not in ("auto", "swap", "recompute"):
            raise InvalidArgumentError(
                f"preempt must be auto, swap or recompute, got {self.preempt!r} (--preempt)"
            )
        for name in ("fast_forward", "counted_cache"):
            if type(getattr(self, name)) is not bool:
                raise InvalidArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if type(self.sample_steps) is not int or self.sample_steps < 1:
            raise InvalidArgumentError(
                f"--sample-steps must be an int >= 1, got {self.sample_steps!r}"
            )


class _Live:
    """A request inside the replay (internal, mutable)."""

    __slots__ = (
        "active",
        "context",
        "first_token_s",
        "generated",
        "output",
        "preempted",
        "prefill_left",
        "readmit",
        "req",
        "rid",
    )

    def __init__(self, req: TraceRequest, output: int) -> None:
        self.req = req
        self.rid = RequestId(f"r{req.index}")
        self.output = output  # output tokens to produce (cut at max_seq_len)
        self.generated = 0  # output tokens produced
        self.prefill_left = 0  # tokens of the admitted sequence still to compute
        self.context = 0  # tokens whose KV is computed
        self.first_token_s = -1.0
        self.preempted = False
        self.readmit: int | None = None  # verified tokens after a recompute
        self.active = False  # in the running list

    @property
    def admit_tokens(self) -> int:
        """Tokens its next admission brings: the prompt, or the verified tokens after a
        recompute."""
        return self.req.prompt_tokens if self.readmit is None else self.readmit


def replay(
    policy: PolicyPlan,
    trace: Iterable[TraceRequest],
    roofline: Roofline,
    config: ReplayConfig,
    *,
    progress: ProgressFn | None = None,
    check_every: int = 0,
) -> PolicyMetrics:
    """Replay ``trace`` (consumed once, in arrival order) against ``policy``'s plan.

    ``progress(n)`` is called with the number of requests done (completed or not
    finished) every few hundred steps and at the end. ``check_every`` > 0 runs the cache's
    integrity check every that many steps (tests). Returns the metrics; the trace's
    requests are not kept (memory stays flat but for the latency samples).

    Raises:
        InvalidArgumentError: a plan the cache cannot be built from.
    """
    return _Replay(policy, roofline, config).run(trace, progress, check_every)


class _Replay:
    """One replay's cache, queues, clock and counters (the module docstring's loop, one
    method per stage of a step). Internal, mutable; used once."""

    def __init__(self, policy: PolicyPlan, roofline: Roofline, config: ReplayConfig) -> None:
        plan = policy.plan
        self.policy, self.config = policy, config
        cap = plan.capacity
        self.tpb = plan.tokens_per_block
        self.k = cap.lookahead_tokens
        self.step_slots = self.k + 1
        self.max_seq, self.max_batch = cap.max_seq_len, cap.max_batch_size
        self.gpu_blocks, self.host_blocks = cap.gpu_blocks, cap.host_blocks
        # kvbudget.scheduling's rules, with the simulator's settings
        self.rules = BatchRules(
            max_batch_size=self.max_batch, admit_while_swapped=True, watermark=False
        )
        self.swap_first = config.preempt == "swap" or (
            config.preempt == "auto" and self.host_blocks > 0
        )
        self.block_pair_bytes = sum(m.block_bytes for m in plan.managers)
        ids = PromptIds(plan.vocab_size or 32000, config.seed)
        counted = config.counted_cache and config.fast_forward
        self.cache = replay_cache(plan, ids, self.step_slots, counted=counted)
        self.accept = AcceptanceDraw(config.acceptance, self.k, config.seed)
        self.link = roofline.rates.host_link_bytes_per_s
        if self.host_blocks and not self.link:
            raise InvalidArgumentError(
                f"{roofline.rates.name} has no host-link bandwidth in gpus.csv, but the plan "
                "has a host tier; simulate with --host-budget 0 or another --gpu"
            )
        self.step_time = roofline.stepper()
        self.decode_terms = roofline.decode_terms()
        weights, _, bandwidth, *_ = self.decode_terms
        self.min_step_s = weights / bandwidth  # no decode step is shorter
        self.waiting: deque[_Live] = deque()
        self.swapped: deque[_Live] = deque()
        self.running: list[_Live] = []
        self.latencies = LatencyRecorder()
        self.series = Series(config.max_series_points)
        self.reasons: dict[str, int] = {}
        self.arrived = self.completed = self.truncated = self.preempted_requests = 0
        self.swaps = self.recomputes = self.output_total = self.steps = 0
        self.max_waiting = self.max_running = self.host_moved_blocks = 0
        self.clock = self.window_start = self.last_finish = 0.0
        self.preempted_now = False
        self.first_arrival: float | None = None

    def run(
        self, trace: Iterable[TraceRequest], progress: ProgressFn | None, check_every: int
    ) -> PolicyMetrics:
        """Every step until the trace is consumed and every request is done."""
        it = iter(trace)
        pending = next(it, None)
        # the stages, bound once: the loop runs once per simulated step
        arrive, decode, resume = self._arrive, self._reserve_decodes, self._resume_swapped
        prefill, sample, finish = self._prefill, self.sample, self._finish_step
        step_time, slots = self.step_time, self.step_slots
        sample_steps, max_tokens = self.config.sample_steps, self.config.max_num_batched_tokens
        running, waiting, swapped = self.running, self.waiting, self.swapped
        fast = self.config.fast_forward
        while True:
            if pending is not None and pending.arrival_s <= self.clock:
                pending = arrive(pending, it)
            if not running and not waiting and not swapped:
                if pending is None:
                    break
                self.clock = self.window_start = max(self.clock, pending.arrival_s)
                continue
            if (
                fast
                and not waiting
                and not swapped
                and run_steady(
                    self, math.inf if pending is None else pending.arrival_s, progress, check_every
                )
            ):
                continue
            self.preempted_now = False
            decoders, context = decode()
            if swapped:
                resume()
            prefilled, work = prefill(max_tokens - len(decoders) * slots)
            steps = self.steps = self.steps + 1
            self.clock += step_time(len(decoders), context, *work)
            if steps % sample_steps == 0:
                sample()
            finish(decoders, prefilled)
            if check_every and steps % check_every == 0:
                self.cache.check()
            if progress is not None and steps % 256 == 0:
                progress(self.completed + sum(self.reasons.values()))
        if progress is not None:
            progress(self.completed + sum(self.reasons.values()))
        return self._metrics()

    def steps_before(self, until_s: float) -> int:
        """At least the decode steps that start before ``until_s`` (each takes at least
        ``min_step_s``): a bound for the fast path, which finds the exact count."""
        if until_s == math.inf or self.min_step_s <= 0:
            return NO_BOUND
        return int((until_s - self.clock) / self.min_step_s) + 2

    def _arrive(
        self, pending: TraceRequest | None, it: Iterator[TraceRequest]
    ) -> TraceRequest | None:
        """Arrivals up to the clock join the waiting queue; returns the next one."""
        while pending is not None and pending.arrival_s <= self.clock:
            if self.first_arrival is None:
                self.first_arrival = pending.arrival_s
            self.arrived += 1
            live = _admissible(pending, self.max_seq, self.gpu_blocks, self.tpb, self.reasons)
            if live is not None:
                if live.output < pending.output_tokens:
                    self.truncated += 1
                self.waiting.append(live)
            pending = next(it, None)
        return pending

    def _fail(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def _reserve_decodes(self) -> tuple[list[_Live], int]:
        """1. decode reservations, oldest first (victims are the newest,
        :func:`kvbudget.scheduling.reserve_or_preempt`): the decoding requests and their
        summed context."""
        decoders: list[_Live] = []
        context = 0
        cache, running, reserve, slots = (
            self.cache,
            self.running,
            self.cache.reserve,
            self.step_slots,
        )
        for live in [r for r in running if not r.prefill_left]:
            if not live.active:
                continue  # preempted earlier in this step
            try:
                reserve(live.rid, slots)
            except OutOfBlocksError:
                done = reserve_or_preempt(cache, running, live, live.rid, slots, self._preempt)
                if done is Reserved.ALONE:
                    running.remove(live)
                    live.active = False
                    cache.free(live.rid)
                    self._fail("outgrew_gpu")
                if done is not Reserved.RESERVED:
                    continue
            decoders.append(live)
            context += live.context
        return decoders, context

    def _preempt(self, victim: _Live) -> None:
        """Swap ``victim`` out (when the plan has a host tier and it fits), else drop its
        blocks for recompute (:meth:`ReplayCache.preempt
        <kvbudget.sim.replay_cache.ReplayCache.preempt>`)."""
        self.preempted_now = True
        if not victim.preempted:
            victim.preempted = True
            self.preempted_requests += 1
        mode, tokens = self.cache.preempt(victim.rid, self.swap_first)
        self.running.remove(victim)
        victim.active = False
        if mode == "swap":
            self.swaps += 1
            self.swapped.append(victim)
            return
        victim.readmit = tokens
        self.recomputes += 1
        victim.context = 0
        self.waiting.appendleft(victim)

    def _resume_swapped(self) -> None:
        """2. swapped requests come back first, in a step that preempted none (else the
        request swapped out to make room would come straight back and out again)."""
        swapped, running, rules = self.swapped, self.running, self.rules
        while swapped and rules.may_resume(running=len(running), preempted=self.preempted_now):
            live = swapped[0]
            try:
                self.cache.resume(live.rid)
            except OutOfBlocksError:
                if running:
                    break
                swapped.popleft()
                self.cache.free(live.rid)
                self._fail("outgrew_gpu")
                continue
            swapped.popleft()
            running.append(live)
            live.active = True

    def _prefill(self, budget: int) -> tuple[list[_Live], tuple[int, int, int]]:
        """3. prefill chunks: running prefills first, then admissions, within ``budget``
        tokens. Returns the requests whose prefill completed and the step's prefill work
        (tokens, attention pairs, KV tokens read) for the roofline."""
        prefill_tokens = pairs = kv_tokens = 0
        prefilled: list[_Live] = []
        for live in [r for r in self.running if r.prefill_left]:
            if budget <= 0:
                break
            chunk = min(live.prefill_left, budget)
            budget -= chunk
            pairs += chunk * live.context + chunk * (chunk + 1) // 2
            kv_tokens += live.context + chunk
            prefill_tokens += chunk
            live.context += chunk
            live.prefill_left -= chunk
            if not live.prefill_left:
                prefilled.append(live)
        waiting, running, swapped, rules = self.waiting, self.running, self.swapped, self.rules
        while (
            waiting
            and budget > 0
            and rules.may_admit(
                running=len(running),
                swapped=len(swapped),
                preempted=self.preempted_now,
                available_blocks=self.cache.available_gpu_blocks,
                need_blocks=-(-waiting[0].admit_tokens // self.tpb),
            )
        ):
            live = waiting[0]
            admit_tokens = live.admit_tokens
            try:
                hit = self.cache.admit(live.rid, live.req, admit_tokens)
            except OutOfBlocksError:
                if running or self.swapped:
                    break
                waiting.popleft()
                self._fail("not_admissible")
                continue
            waiting.popleft()
            live.readmit = None
            running.append(live)
            live.active = True
            live.context = hit
            left = admit_tokens - hit
            chunk = min(left, budget)
            budget -= chunk
            pairs += chunk * hit + chunk * (chunk + 1) // 2
            kv_tokens += hit + chunk
            prefill_tokens += chunk
            live.context += chunk
            live.prefill_left = left - chunk
            if not live.prefill_left:
                prefilled.append(live)
        return prefilled, (prefill_tokens, pairs, kv_tokens)

    def sample(self) -> None:
        """4. every sample_steps steps: the window's host copies (they delay the clock
        only by what they take beyond the window) and one series point."""
        gpu_used, gpu_cached, host_used, host_cached, moved = self.cache.sample_counts()
        if self.host_blocks:
            copied = (moved - self.host_moved_blocks) * self.block_pair_bytes
            host_s = copied / self.link if self.link else 0.0
            self.host_moved_blocks = moved
            if host_s > self.clock - self.window_start:
                self.clock = self.window_start + host_s
        self.window_start = self.clock
        self.series.add(
            (
                self.clock,
                len(self.running),
                len(self.waiting),
                len(self.swapped),
                gpu_used,
                gpu_cached,
                host_used,
                host_cached,
            )
        )

    def _finish_step(self, decoders: list[_Live], prefilled: list[_Live]) -> None:
        """5. commits (1 + accepted tokens, seeded draws), first tokens, finishes."""
        finished: list[_Live] = []
        commit = self.cache.commit
        # 1 + accepted per decoding request, in running order
        for live, n in zip(decoders, self.accept.counts(len(decoders)), strict=True):
            left = live.output - live.generated
            if n > left:
                n = left
            commit(live.rid, n)
            live.generated += n
            live.context += n
            if live.generated >= live.output:
                finished.append(live)
        clock = self.clock
        for live in prefilled:
            if live.generated == 0:
                live.generated = 1
                live.first_token_s = clock
                self.latencies.ttft.append(clock - live.req.arrival_s)
                if live.output <= 1:
                    finished.append(live)
        self.retire(finished)

    def retire(self, finished: list[_Live]) -> None:
        """The end of a step: ``finished`` requests freed and counted (TPOT), the queue
        maxima updated."""
        clock = self.clock
        for live in finished:
            self.running.remove(live)
            self.cache.free(live.rid)
            self.completed += 1
            self.output_total += live.generated
            self.last_finish = clock
            if live.output > 1:
                self.latencies.tpot.append((clock - live.first_token_s) / (live.output - 1))
        self.max_waiting = max(self.max_waiting, len(self.waiting))
        self.max_running = max(self.max_running, len(self.running))

    def _metrics(self) -> PolicyMetrics:
        """The replay's metrics, from its counters and the cache's."""
        prompt, hits, gpu_hits, host_hits, offloaded, onboarded = self.cache.totals()
        policy, tpb, pair = self.policy, self.tpb, self.block_pair_bytes
        makespan = max(0.0, self.last_finish - (self.first_arrival or 0.0))
        return PolicyMetrics(
            policy=policy.name,
            requests=self.arrived,
            completed=self.completed,
            not_finished=dict(sorted(self.reasons.items())),
            truncated_outputs=self.truncated,
            preempted_requests=self.preempted_requests,
            preemptions=self.swaps + self.recomputes,
            swapped_out=self.swaps,
            recomputed=self.recomputes,
            max_waiting=self.max_waiting,
            max_running=self.max_running,
            steps=self.steps,
            prompt_tokens=prompt,
            hit_tokens=hits,
            hit_tokens_by_tier={"gpu": gpu_hits * tpb, "host": host_hits * tpb},
            output_tokens=self.output_total,
            host_offloaded_bytes=offloaded * pair,
            host_onboarded_bytes=onboarded * pair,
            pinned_host_bytes=policy.pinned_host_bytes,
            host_budget_bytes=policy.host_budget_bytes,
            node_pinned_host_bytes=policy.node_pinned_host_bytes,
            node_host_memory_bytes=policy.node_host_memory_bytes,
            gpu_overcommit_bytes=policy.gpu_overcommit_bytes,
            gpu_blocks=self.gpu_blocks,
            host_blocks=self.host_blocks,
            makespan_s=makespan,
            output_tokens_per_s=self.output_total / makespan if makespan > 0 else 0.0,
            ttft_s=Percentiles.of(self.latencies.ttft),
            tpot_s=Percentiles.of(self.latencies.tpot),
            series=self.series.columns(),
            notes=policy.notes + self.cache.notes(),
        )


def _admissible(
    req: TraceRequest, max_seq: int, gpu_blocks: int, tpb: int, reasons: dict[str, int]
) -> _Live | None:
    """A live request for ``req``, or None (counted in ``reasons``) when it can never run."""
    if req.prompt_tokens >= max_seq:
        reasons["prompt_exceeds_max_seq_len"] = reasons.get("prompt_exceeds_max_seq_len", 0) + 1
        return None
    if -(-req.prompt_tokens // tpb) > gpu_blocks:
        reasons["prompt_exceeds_gpu_blocks"] = reasons.get("prompt_exceeds_gpu_blocks", 0) + 1
        return None
    return _Live(req, min(req.output_tokens, max_seq - req.prompt_tokens))
