"""``Engine``: the reference speculative-decoding engine on a plan's paged cache.

::

    plan = kvbudget.plan(target=DIR, draft=DRAFT_DIR, spec="draft-target", kv_budget=...)
    engine = Engine(plan, target=DIR, draft=DRAFT_DIR, device="cpu", seed=0)
    outs = engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=32))
    outs[0].token_ids, engine.stats()

The cache is :class:`~kvbudget.cache.SpecDecodeCache` built from the plan with real
storage on ``device``; every layer of the target (and of the draft or EAGLE3 head) reads
and writes its K/V through that cache's block tables. The number of drafts per step is
the plan's ``max_draft_len``. Models come from a checkpoint directory (safetensors) or a
bare ``config.json`` (random weights from ``seed``; the draft from ``seed + 1``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvbudget.cache import PreemptMode, RequestId, SpecDecodeCache
from kvbudget.engine.accounting import storage_report
from kvbudget.engine.checkpoint import build_model
from kvbudget.engine.config import SPECS
from kvbudget.engine.kv_layout import KvLayout
from kvbudget.engine.model import Decoder, Eagle3Head, eagle3_aux_layers
from kvbudget.engine.runner import RoleModel, StepRunner
from kvbudget.engine.sampling import SamplingParams
from kvbudget.engine.scheduler import FinishReason, Scheduler, SeqState
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Plan, Role


@dataclass(frozen=True, kw_only=True)
class RequestOutput:
    """One prompt's result: the generated tokens only, and why generation stopped
    (``"length"``: ``max_new_tokens``; ``"max_seq_len"``: the plan's longest sequence)."""

    index: int
    token_ids: list[int]
    finish_reason: FinishReason
    prompt_tokens: int


@dataclass(slots=True)
class _Totals:
    steps: int = 0
    proposed: int = 0
    accepted: int = 0
    generated: int = 0
    prefill: int = 0
    requests: int = 0
    seconds: float = 0.0


class Engine:
    """Target (+ draft) models over one plan's cache; see the module docstring.

    Not thread-safe. ``generate`` may be called many times; stats accumulate."""

    def __init__(
        self,
        plan: Plan,
        target: str | Path,
        draft: str | Path | None = None,
        *,
        device: str = "cpu",
        seed: int = 0,
        preempt_mode: PreemptMode = "swap",
    ) -> None:
        """Build the models and the cache.

        Raises:
            InvalidArgumentError: a plan the engine cannot run (tp/pp > 1, spec other than
                none / draft-target / eagle3, a draft given or missing against the plan's
                spec, geometry or vocabulary mismatch), a bad device or preempt mode.
            ConfigError: a config or checkpoint that cannot be read or built.
        """
        if not isinstance(plan, Plan):
            raise InvalidArgumentError(f"plan must be a Plan (from kvbudget.plan), got {plan!r}")
        if plan.tp != 1 or plan.pp != 1 or plan.dp != 1:
            raise InvalidArgumentError(
                f"the reference engine runs one rank: plan with tp=1, pp=1, dp=1 (got "
                f"tp={plan.tp}, pp={plan.pp}, dp={plan.dp})"
            )
        if plan.spec not in SPECS:
            raise InvalidArgumentError(
                f"the reference engine runs spec {', '.join(SPECS)}; the plan's is {plan.spec!r}"
            )
        if (draft is None) != (plan.spec == "none"):
            want = "no draft" if plan.spec == "none" else "a draft checkpoint or config"
            raise InvalidArgumentError(f"the plan's spec is {plan.spec!r}: pass {want}")
        if preempt_mode not in ("swap", "recompute"):
            raise InvalidArgumentError(
                f"preempt_mode must be 'swap' or 'recompute', got {preempt_mode!r}"
            )
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise InvalidArgumentError(f"seed must be an integer, got {seed!r}")
        self.plan = plan
        self.device = device
        self.cache = SpecDecodeCache.from_plan(plan, device=device)
        target_model = build_model(target, seed=seed, device=device)
        if not isinstance(target_model, Decoder):
            raise InvalidArgumentError(f"{target} is an EAGLE3 head; pass it as draft")
        if plan.vocab_size is not None and plan.vocab_size != target_model.config.vocab_size:
            raise InvalidArgumentError(
                f"the plan's vocabulary is {plan.vocab_size} tokens, the target's "
                f"{target_model.config.vocab_size}: plan with the same target config"
            )
        positions = target_model.config.max_position_embeddings
        if plan.capacity.max_seq_len > positions:
            raise InvalidArgumentError(
                f"the plan's max_seq_len {plan.capacity.max_seq_len} is more than the "
                f"{positions} positions of the target (max_position_embeddings): plan with "
                f"max_seq_len <= {positions}"
            )
        self.target = self._role("target", target_model)
        self.draft: RoleModel | None = None
        aux: tuple[int, ...] = ()
        if draft is not None:
            draft_model = build_model(draft, seed=seed + 1, device=device, target=target_model)
            if isinstance(draft_model, Eagle3Head) != (plan.spec == "eagle3"):
                raise InvalidArgumentError(
                    f"the plan's spec is {plan.spec!r} but {draft} is "
                    f"{'an EAGLE3 head' if isinstance(draft_model, Eagle3Head) else 'a model'}"
                )
            if draft_model.config.vocab_size != target_model.config.vocab_size:
                raise InvalidArgumentError(
                    f"the draft's vocabulary ({draft_model.config.vocab_size}) is not the "
                    f"target's ({target_model.config.vocab_size})"
                )
            if isinstance(draft_model, Eagle3Head):
                if draft_model.config.target_hidden_size != target_model.config.hidden_size:
                    raise InvalidArgumentError(
                        f"the EAGLE3 head fuses hidden states of width "
                        f"{draft_model.config.target_hidden_size}; the target's are "
                        f"{target_model.config.hidden_size}"
                    )
                aux = eagle3_aux_layers(target_model.config.num_layers)
            self.draft = self._role("draft", draft_model)
        can_swap = all(not m.window_groups and not m.state_bytes_per_seq for m in plan.managers)
        self.scheduler = Scheduler(
            self.cache,
            num_draft_tokens=plan.capacity.lookahead_tokens if draft is not None else 0,
            preempt_mode=preempt_mode if can_swap else "recompute",
            unique_salts=bool(self.target.layout.windows)
            or bool(self.draft and self.draft.layout.windows),
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.runner = StepRunner(
            self.cache, self.target, self.draft, generator=self.generator, aux_layers=aux
        )
        self._totals = _Totals()
        self._next_id = 0

    def _role(self, role: Role, model: Decoder | Eagle3Head) -> RoleModel:
        manager = self.plan.manager(role)
        if manager is None:
            raise InvalidArgumentError(f"the plan has no {role} cache")
        layout = KvLayout.for_config(model.config, self.plan.capacity.max_seq_len)
        dtype = layout.check(manager)
        storage = self.cache.storage
        assert storage is not None
        index = self.cache.roles.index(role)
        views = layout.views(storage.roles[index], dtype, self.cache.tokens_per_block)
        return RoleModel(role=role, model=model, layout=layout, caches=views)

    def _check_prompts(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        vocab = self.target.model.config.vocab_size
        max_len = self.plan.capacity.max_seq_len
        out = []
        for i, p in enumerate(prompts):
            if isinstance(p, (str, bytes)) or not isinstance(p, Sequence):
                raise InvalidArgumentError(f"prompt {i} must be a list of token ids, got {p!r}")
            tokens = list(p)
            if not tokens:
                raise InvalidArgumentError(f"prompt {i} is empty")
            if any(isinstance(t, bool) or not isinstance(t, int) for t in tokens):
                raise InvalidArgumentError(f"prompt {i} holds a token that is not an int")
            if not all(0 <= t < vocab for t in tokens):
                raise InvalidArgumentError(
                    f"prompt {i} holds a token outside the vocabulary [0, {vocab})"
                )
            if len(tokens) > max_len:
                raise InvalidArgumentError(
                    f"prompt {i} has {len(tokens)} tokens; the plan's max_seq_len is {max_len}"
                )
            out.append(tokens)
        return out

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | None = None,
        *,
        on_step: Callable[[int], None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (token id lists); outputs in prompt order.

        ``on_step(new_tokens)`` is called after each step with the tokens it emitted.
        Raises InvalidArgumentError for bad prompts or params (nothing runs)."""
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise InvalidArgumentError(f"params must be SamplingParams, got {params!r}")
        checked = self._check_prompts(prompts)
        states = []
        for i, tokens in enumerate(checked):
            rid = RequestId(f"req{self._next_id}")
            self._next_id += 1
            s = SeqState(index=i, request_id=rid, prompt=tokens, params=params, tokens=list(tokens))
            states.append(s)
            self.scheduler.add(s)
        t0 = time.perf_counter()
        totals = self._totals
        while self.scheduler.has_work:
            plan = self.scheduler.schedule()
            result = self.runner.run(plan)
            before = sum(len(s.output) for s, _ in result.prefilled) + sum(
                len(s.output) for s, _, _ in result.decoded
            )
            self.scheduler.finish_step(result.prefilled, result.decoded)
            after = sum(len(s.output) for s, _ in result.prefilled) + sum(
                len(s.output) for s, _, _ in result.decoded
            )
            totals.steps += 1
            totals.proposed += result.proposed_tokens
            totals.accepted += result.accepted_tokens
            totals.prefill += result.prefill_tokens
            if on_step is not None:
                on_step(after - before)
        totals.seconds += time.perf_counter() - t0
        totals.requests += len(states)
        totals.generated += sum(len(s.output) for s in states)
        outs = []
        for s in states:
            assert s.finish_reason is not None
            outs.append(
                RequestOutput(
                    index=s.index,
                    token_ids=list(s.output),
                    finish_reason=s.finish_reason,
                    prompt_tokens=len(s.prompt),
                )
            )
        return outs

    def stats(self) -> dict[str, Any]:
        """Totals since the engine was built, JSON-ready.

        Keys: ``steps``, ``requests``, ``generated_tokens``, ``prefill_tokens``,
        ``proposed_tokens``, ``accepted_tokens``, ``acceptance_rate`` (accepted / proposed,
        0.0 without drafts), ``mean_accepted_per_step``, ``seconds``, ``tokens_per_s``,
        ``preemptions`` (swap + recompute), ``preemptions_swap``,
        ``preemptions_recompute``, ``swap_fallbacks``, ``resumed``, ``offloaded_blocks``
        (kv blocks copied into the host or disk tier), ``onboarded_blocks`` (copied back
        up to the GPU), ``prefix_hit_tokens``, ``preempt_mode``, and ``storage``: per role
        and tier, ``bytes`` of the cache's tensors, ``plan_bytes`` and
        ``padding_bytes`` (``bytes + padding_bytes == plan_bytes``).
        """
        t = self._totals
        c = self.scheduler.counters
        cache_stats = self.cache.stats()
        role0 = self.cache.roles[0]
        offloaded = sum(
            cache_stats.pool(role0, tier, "kv").offloaded_blocks for tier in ("host", "disk")
        )
        onboarded = sum(
            cache_stats.pool(role0, tier, "kv").onboarded_blocks for tier in ("host", "disk")
        )
        storage = self.cache.storage
        assert storage is not None
        return {
            "steps": t.steps,
            "requests": t.requests,
            "generated_tokens": t.generated,
            "prefill_tokens": t.prefill,
            "proposed_tokens": t.proposed,
            "accepted_tokens": t.accepted,
            "acceptance_rate": t.accepted / t.proposed if t.proposed else 0.0,
            "mean_accepted_per_step": t.accepted / t.steps if t.steps else 0.0,
            "seconds": t.seconds,
            "tokens_per_s": t.generated / t.seconds if t.seconds else 0.0,
            "preemptions": c.preempted_swap + c.preempted_recompute,
            "preemptions_swap": c.preempted_swap,
            "preemptions_recompute": c.preempted_recompute,
            "swap_fallbacks": c.swap_fallbacks,
            "resumed": c.resumed,
            "offloaded_blocks": offloaded,
            "onboarded_blocks": onboarded,
            "prefix_hit_tokens": cache_stats.hit_tokens,
            "preempt_mode": self.scheduler.preempt_mode,
            "storage": storage_report(self.plan, storage),
        }
