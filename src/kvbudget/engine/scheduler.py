"""Continuous batching over the paged cache: who runs in the next step.

Each request is a :class:`SeqState`. Its verified tokens are in the cache (``tokens``,
the cache's own count); ``pending`` is the last token the target chose, emitted but not
yet in the cache (it is the first token the next step feeds). A step (:meth:`Scheduler.
schedule`):

1. **Decode** every running request that has been prefilled, oldest first: reserve room
   for its ``k + 1`` new positions (``pending`` and ``k`` drafts, ``k`` cut near
   ``max_seq_len`` and ``max_new_tokens``). When the GPU has no blocks left the youngest
   other running request is preempted (``swap`` to the host tier, or ``recompute``:
   dropped and re-admitted later, its pending token kept); a swap the host tier cannot
   take falls back to recompute. The oldest request never waits for a younger one, so
   every request finishes, and a budget that fits one sequence runs them one at a time.
2. **Resume** swapped requests, oldest first, then **admit** waiting ones (recomputed
   ones first), only in a step that preempted nothing, while ``max_batch_size`` allows
   and the GPU keeps one free block per running request after the prompt. An admitted
   prompt is prefilled in this same step (from its prefix hit on).

The rules are :mod:`kvbudget.scheduling`'s, shared with the simulator's replay, with
the engine's settings (``admit_while_swapped=False``, ``watermark=True``). The runner
computes the step; :meth:`Scheduler.finish_step` commits what was accepted and frees
finished requests. Only this module (through :mod:`kvbudget.scheduling`) calls the
cache's mutating methods.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kvbudget.cache import PreemptMode, RequestId, SpecDecodeCache
from kvbudget.engine.sampling import SamplingParams
from kvbudget.errors import OutOfBlocksError
from kvbudget.scheduling import BatchRules, Reserved, preempt, reserve_or_preempt

if TYPE_CHECKING:
    import torch

FinishReason = Literal["length", "max_seq_len"]


@dataclass(slots=True, eq=False)
class SeqState:
    """One request's progress (mutable; owned by the scheduler, updated by the runner
    only through :meth:`Scheduler.finish_step`)."""

    index: int
    request_id: RequestId
    prompt: list[int]
    params: SamplingParams
    tokens: list[int]  # verified tokens, as the cache holds them
    output: list[int] = field(default_factory=list)  # generated, ``pending`` included
    pending: int | None = None
    prefilled: bool = False  # K/V of every verified token written in every role
    hit_tokens: int = 0  # the prefix hit of the current admission
    admissions: int = 0
    draft_valid: int = 0  # positions whose draft K/V is written (draft-target)
    eagle_next: int | None = None  # EAGLE3: the first draft of the next step
    eagle_probs: torch.Tensor | None = None  # its distribution (sampling)
    eagle_feature: torch.Tensor | None = None  # the head's feature after it
    finish_reason: FinishReason | None = None


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """What one step computes: prefills (admitted this step) and decodes with their
    number of drafts."""

    prefill: tuple[SeqState, ...]
    decode: tuple[tuple[SeqState, int], ...]


@dataclass(slots=True)
class SchedulerCounters:
    """Running totals of the scheduler's decisions."""

    preempted_swap: int = 0
    preempted_recompute: int = 0
    swap_fallbacks: int = 0  # swaps the host tier refused, recomputed instead
    resumed: int = 0
    admitted: int = 0


class Scheduler:
    """Continuous batching over one :class:`SpecDecodeCache`; see the module docstring."""

    def __init__(
        self,
        cache: SpecDecodeCache,
        *,
        num_draft_tokens: int,
        preempt_mode: PreemptMode,
        unique_salts: bool,
    ) -> None:
        """``unique_salts``: give every admission its own cache salt (no prefix reuse),
        for models whose window prefill cannot read cached window blocks."""
        self.cache = cache
        self.num_draft_tokens = num_draft_tokens
        self.preempt_mode: PreemptMode = preempt_mode
        self.unique_salts = unique_salts
        plan = cache.plan
        self.max_seq_len = plan.capacity.max_seq_len
        self.max_batch_size = plan.capacity.max_batch_size
        # kvbudget.scheduling's rules, with the engine's settings
        self.rules = BatchRules(
            max_batch_size=self.max_batch_size, admit_while_swapped=False, watermark=True
        )
        self._preempted = False
        self.waiting: deque[SeqState] = deque()
        self.running: list[SeqState] = []
        self.swapped: deque[SeqState] = deque()
        self.counters = SchedulerCounters()

    def add(self, state: SeqState) -> None:
        """Queue a new request."""
        self.waiting.append(state)

    @property
    def has_work(self) -> bool:
        """True while any request is waiting, running or swapped out."""
        return bool(self.waiting or self.running or self.swapped)

    def _num_drafts(self, s: SeqState) -> int:
        committed = len(s.tokens)
        room = self.max_seq_len - committed - 1
        remaining = s.params.max_new_tokens - len(s.output)
        return max(0, min(self.num_draft_tokens, room, remaining - 1))

    def _preempt(self, victim: SeqState) -> None:
        mode, _ = preempt(self.cache, victim.request_id, self.preempt_mode)
        if mode != self.preempt_mode:
            self.counters.swap_fallbacks += 1
        self._preempted = True
        self.running.remove(victim)
        if mode == "swap":
            self.counters.preempted_swap += 1
            self.swapped.append(victim)
        else:
            self.counters.preempted_recompute += 1
            victim.prefilled = False
            victim.eagle_next = victim.eagle_probs = victim.eagle_feature = None
            self.waiting.appendleft(victim)

    def schedule(self) -> StepPlan:
        """Reserve, preempt, resume and admit for the next step (module docstring).

        Raises OutOfBlocksError only when one request alone cannot fit (a plan whose GPU
        tier cannot hold one sequence: the planner refuses those)."""
        decode: list[tuple[SeqState, int]] = []
        self._preempted = False
        for s in list(self.running):
            if s not in self.running or not s.prefilled:
                continue
            k = self._num_drafts(s)
            done = reserve_or_preempt(
                self.cache, self.running, s, s.request_id, k + 1, self._preempt
            )
            if done is Reserved.ALONE:  # alone and still no room: a plan bug
                self.cache.reserve(s.request_id, k + 1)  # raises OutOfBlocksError
            if done is Reserved.RESERVED:
                decode.append((s, k))
        prefill: list[SeqState] = []
        rules = self.rules
        if not self._preempted:
            while self.swapped and rules.may_resume(running=len(self.running), preempted=False):
                s = self.swapped[0]
                try:
                    self.cache.resume(s.request_id)
                except OutOfBlocksError:
                    break
                self.swapped.popleft()
                self.running.append(s)
                self.counters.resumed += 1
                k = self._num_drafts(s)
                try:
                    self.cache.reserve(s.request_id, k + 1)
                except OutOfBlocksError:
                    break
                decode.append((s, k))
            tpb = self.cache.tokens_per_block
            while self.waiting:
                s = self.waiting[0]
                if not rules.may_admit(
                    running=len(self.running),
                    swapped=len(self.swapped),
                    preempted=False,
                    available_blocks=self.cache.available_gpu_blocks,
                    need_blocks=-(-len(s.tokens) // tpb),
                ):
                    break
                salt = f"{s.request_id}/{s.admissions}" if self.unique_salts else None
                try:
                    hit = self.cache.admit(s.request_id, s.tokens, cache_salt=salt)
                except OutOfBlocksError:
                    if not self.running:
                        raise
                    break
                self.waiting.popleft()
                s.admissions += 1
                s.hit_tokens = hit
                s.draft_valid = hit
                self.running.append(s)
                self.counters.admitted += 1
                prefill.append(s)
        return StepPlan(prefill=tuple(prefill), decode=tuple(decode))

    def finish_step(
        self,
        prefilled: list[tuple[SeqState, int | None]],
        decoded: list[tuple[SeqState, list[int], int]],
    ) -> list[SeqState]:
        """Record a step's results and return the requests that finished (freed).

        ``prefilled``: each prefilled request and the token the target chose after its
        prompt (None when it already had one: a recomputed request). ``decoded``: each
        decoded request, its accepted drafts and the target's next token. Commits
        ``[pending, *accepted]`` to the cache."""
        finished: list[SeqState] = []
        for s, token in prefilled:
            s.prefilled = True
            if token is not None:
                s.pending = token
                s.output.append(token)
            if self._done(s):
                finished.append(s)
        for s, accepted, token in decoded:
            assert s.pending is not None
            verified = [s.pending, *accepted]
            self.cache.commit(s.request_id, verified)
            s.tokens.extend(verified)
            # at most max_new_tokens, and prompt + output at most max_seq_len (as vLLM's
            # max_model_len counts every token of a request)
            room = min(
                s.params.max_new_tokens - len(s.output),
                self.max_seq_len - len(s.prompt) - len(s.output),
            )
            s.output.extend([*accepted, token][:room])
            s.pending = token
            if self._done(s):
                finished.append(s)
        for s in finished:
            self.cache.free(s.request_id)
            self.running.remove(s)
        return finished

    def _done(self, s: SeqState) -> bool:
        if len(s.output) >= s.params.max_new_tokens:
            s.finish_reason = "length"
        elif len(s.prompt) + len(s.output) >= self.max_seq_len:
            s.finish_reason = "max_seq_len"
        return s.finish_reason is not None
