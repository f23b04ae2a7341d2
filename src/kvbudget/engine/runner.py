"""One engine step's forward passes: draft proposals, target verification, draft catch-up.

For a :class:`~kvbudget.engine.scheduler.StepPlan` (decodes with ``k`` drafts each,
prefills of newly admitted prompts), :meth:`StepRunner.run` does, batched over requests:

1. **propose**: the draft extends each decode request by ``k`` tokens, one pass per
   draft position. A draft model feeds ``pending, d1, ..`` at positions ``c, c+1, ..``
   (``c``: verified tokens). An EAGLE3 head already holds ``d1`` (from step 3 of the
   previous step) and feeds ``d1, d2, ..`` at ``c, c+1, ..`` with its own features.
2. **verify**: one target pass over every prefill chunk (positions from the prefix hit
   to the prompt's end) and every decode's ``[pending, d1 .. dk]``; greedy or rejection
   sampling (:mod:`kvbudget.engine.sampling`) picks ``a`` accepted drafts and the next
   token.
3. **catch up**: one draft pass writes the draft K/V of every verified position the draft
   has not computed from verified inputs: the prompt (prefills), a draft model's last
   accepted draft when all ``k`` were accepted, and for EAGLE3 every newly verified
   position (its K/V depends on the target's hidden states there and on the next
   token, known only now). Its last output is EAGLE3's ``d1`` for the next step.

After a step every verified position has K/V in every role, so the blocks the cache
hashes at commit (and reuses for other prompts, offloads, swaps) hold real K/V of both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvbudget.cache import SpecDecodeCache
from kvbudget.engine.kv_layout import KvLayout
from kvbudget.engine.model import Decoder, Eagle3Head
from kvbudget.engine.paged_attention import LayerCache, SeqSpan, build_batch
from kvbudget.engine.sampling import (
    check_logits,
    probabilities,
    sample,
    verify_greedy,
    verify_rejection,
)
from kvbudget.engine.scheduler import SeqState, StepPlan
from kvbudget.plan_types import Role


@dataclass(frozen=True, kw_only=True)
class RoleModel:
    """A model and where its cache lives: its role, layout and per-layer page views."""

    role: Role
    model: Decoder | Eagle3Head
    layout: KvLayout
    caches: tuple[LayerCache, ...]


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What a step computed, for :meth:`Scheduler.finish_step` and the stats."""

    prefilled: list[tuple[SeqState, int | None]]
    decoded: list[tuple[SeqState, list[int], int]]
    proposed_tokens: int
    accepted_tokens: int
    prefill_tokens: int


@dataclass(slots=True)
class _Draft:
    tokens: list[int]
    probs: list[torch.Tensor]  # CPU, sampling only


class StepRunner:
    """Runs the passes of a step on the target and the optional draft; stateless
    between steps except for the sampling generator (owned by the engine)."""

    def __init__(
        self,
        cache: SpecDecodeCache,
        target: RoleModel,
        draft: RoleModel | None,
        *,
        generator: torch.Generator,
        aux_layers: tuple[int, ...],
    ) -> None:
        self.cache = cache
        self.target = target
        self.draft = draft
        self.generator = generator
        self.aux_layers = aux_layers
        self.tpb = cache.tokens_per_block
        self.device = next(target.model.parameters()).device
        self.eagle = draft is not None and isinstance(draft.model, Eagle3Head)

    # -------------------------------------------------------------- helpers
    def _span(self, rm: RoleModel, s: SeqState, start: int, num_new: int) -> SeqSpan:
        rid = s.request_id
        windows = self.cache.window_tables(rid, rm.role) if rm.layout.windows else ()
        return SeqSpan(
            start=start,
            num_new=num_new,
            table=self.cache.block_table(rid, rm.role),
            window_tables=windows,
        )

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        return torch.tensor(tokens, dtype=torch.long, device=self.device)

    def _pick(
        self, logits: torch.Tensor, params_greedy: Sequence[bool], temps: Sequence[float]
    ) -> tuple[list[int], list[torch.Tensor | None]]:
        """Per row of the draft's ``logits``: the argmax (greedy rows) or a sample, and its
        distribution (CPU). Raises ModelOutputError for logits that are not finite."""
        check_logits(logits, "draft")
        if all(params_greedy):
            return logits.argmax(-1).tolist(), [None] * logits.shape[0]
        cpu = logits.float().cpu()
        tokens: list[int] = []
        dists: list[torch.Tensor | None] = []
        for row, greedy, t in zip(cpu, params_greedy, temps, strict=True):
            if greedy:
                tokens.append(int(row.argmax()))
                dists.append(None)
            else:
                p = probabilities(row, t, "draft")
                tokens.append(sample(p, self.generator))
                dists.append(p)
        return tokens, dists

    # -------------------------------------------------------------- the step
    def run(self, plan: StepPlan) -> StepResult:
        """Compute one step (module docstring); writes K/V into the cache storage."""
        with torch.inference_mode():
            drafts = self._propose(plan.decode)
            return self._verify_and_catch_up(plan, drafts)

    def _propose(self, decode: Sequence[tuple[SeqState, int]]) -> list[_Draft]:
        drafts = [_Draft([], []) for _ in decode]
        rm = self.draft
        if rm is None or not decode:
            return drafts
        features: list[torch.Tensor | None] = [None] * len(decode)
        if self.eagle:
            for i, (s, k) in enumerate(decode):
                if k:
                    assert s.eagle_next is not None
                    drafts[i].tokens.append(s.eagle_next)
                    if s.eagle_probs is not None:
                        drafts[i].probs.append(s.eagle_probs)
                    features[i] = s.eagle_feature
        first = 1 if self.eagle else 0
        max_k = max(k for _, k in decode)
        for j in range(first, max_k):
            active = [i for i, (_, k) in enumerate(decode) if k > j]
            spans, ids = [], []
            for i in active:
                s, _ = decode[i]
                c = len(s.tokens)
                assert s.pending is not None
                token = s.pending if j == 0 else drafts[i].tokens[j - 1]
                pos = c + j - first
                spans.append(self._span(rm, s, pos, 1))
                ids.append(token)
            batch = build_batch(
                spans, tokens_per_block=self.tpb, windows=rm.layout.windows, device=self.device
            )
            if self.eagle:
                assert isinstance(rm.model, Eagle3Head)
                feats = torch.stack([f for i in active if (f := features[i]) is not None])
                hidden, prenorm = rm.model(
                    self._ids(ids), feats, batch, rm.layout.layer_kinds, rm.caches
                )
                for n, i in enumerate(active):
                    features[i] = prenorm[n]
            else:
                assert isinstance(rm.model, Decoder)
                hidden, _ = rm.model(self._ids(ids), batch, rm.layout.layer_kinds, rm.caches)
            logits = rm.model.logits(hidden)
            states = [decode[i][0] for i in active]
            toks, dists = self._pick(
                logits,
                [s.params.greedy for s in states],
                [s.params.temperature for s in states],
            )
            for n, i in enumerate(active):
                drafts[i].tokens.append(toks[n])
                d = dists[n]
                if d is not None:
                    drafts[i].probs.append(d)
        for i, (s, _) in enumerate(decode):
            if not self.eagle:
                s.draft_valid = len(s.tokens) + len(drafts[i].tokens)
        return drafts

    def _verify_and_catch_up(self, plan: StepPlan, drafts: list[_Draft]) -> StepResult:
        rm = self.target
        spans: list[SeqSpan] = []
        ids: list[int] = []
        for s in plan.prefill:
            c = len(s.tokens)
            spans.append(self._span(rm, s, s.hit_tokens, c - s.hit_tokens))
            ids.extend(s.tokens[s.hit_tokens :])
        for (s, _), d in zip(plan.decode, drafts, strict=True):
            assert s.pending is not None
            spans.append(self._span(rm, s, len(s.tokens), 1 + len(d.tokens)))
            ids.append(s.pending)
            ids.extend(d.tokens)
        batch = build_batch(
            spans, tokens_per_block=self.tpb, windows=rm.layout.windows, device=self.device
        )
        assert isinstance(rm.model, Decoder)
        hidden, aux = rm.model(
            self._ids(ids), batch, rm.layout.layer_kinds, rm.caches, capture=self.aux_layers
        )
        # rows whose logits are needed: each prefill's last token, every decode token
        lens = [sp.num_new for sp in spans]
        offsets = [sum(lens[:i]) for i in range(len(lens))]
        num_prefill = len(plan.prefill)
        rows: list[int] = [offsets[i] + lens[i] - 1 for i in range(num_prefill)]
        for i in range(num_prefill, len(spans)):
            rows.extend(range(offsets[i], offsets[i] + lens[i]))
        logits = rm.model.logits(hidden[torch.tensor(rows, device=self.device)])
        check_logits(logits, "target")
        any_sampled = any(not s.params.greedy for s in plan.prefill) or any(
            not s.params.greedy for s, _ in plan.decode
        )
        argmax = logits.argmax(-1).tolist()
        cpu_logits = logits.float().cpu() if any_sampled else None
        prefilled: list[tuple[SeqState, int | None]] = []
        for n, s in enumerate(plan.prefill):
            token: int | None = None
            if s.pending is None:
                if s.params.greedy:
                    token = argmax[n]
                else:
                    assert cpu_logits is not None
                    p = probabilities(cpu_logits[n], s.params.temperature)
                    token = sample(p, self.generator)
            prefilled.append((s, token))
        decoded: list[tuple[SeqState, list[int], int]] = []
        proposed = accepted_total = 0
        row = num_prefill
        for (s, _), d in zip(plan.decode, drafts, strict=True):
            k = len(d.tokens)
            if s.params.greedy:
                a, token = verify_greedy(d.tokens, argmax[row : row + k + 1])
            else:
                assert cpu_logits is not None
                p = probabilities(cpu_logits[row : row + k + 1], s.params.temperature)
                q = torch.stack(d.probs) if k else p[:0]
                a, token = verify_rejection(d.tokens, q, p, self.generator)
            row += k + 1
            decoded.append((s, d.tokens[:a], token))
            proposed += k
            accepted_total += a
        if self.draft is not None:
            self._catch_up(plan, prefilled, decoded, spans, offsets, aux)
        return StepResult(
            prefilled=prefilled,
            decoded=decoded,
            proposed_tokens=proposed,
            accepted_tokens=accepted_total,
            prefill_tokens=sum(lens[:num_prefill]),
        )

    def _catch_up(
        self,
        plan: StepPlan,
        prefilled: list[tuple[SeqState, int | None]],
        decoded: list[tuple[SeqState, list[int], int]],
        target_spans: list[SeqSpan],
        offsets: list[int],
        aux: list[torch.Tensor],
    ) -> None:
        rm = self.draft
        assert rm is not None
        spans: list[SeqSpan] = []
        ids: list[int] = []
        rows: list[int] = []  # EAGLE3: target rows whose features each token uses
        states: list[SeqState] = []
        for n, (s, token) in enumerate(prefilled):
            c = len(s.tokens)
            start = s.hit_tokens
            if self.eagle:
                nxt = token if token is not None else s.pending
                assert nxt is not None
                ids.extend([*s.tokens[start + 1 :], nxt])
                rows.extend(range(offsets[n], offsets[n] + c - start))
            else:
                ids.extend(s.tokens[start:])
            spans.append(self._span(rm, s, start, c - start))
            states.append(s)
        for n, (s, accepted, token) in enumerate(decoded, start=len(prefilled)):
            c = len(s.tokens)
            assert s.pending is not None
            verified = [s.pending, *accepted]
            if self.eagle:
                ids.extend([*accepted, token])
                rows.extend(range(offsets[n], offsets[n] + len(verified)))
                spans.append(self._span(rm, s, c, len(verified)))
                states.append(s)
            else:
                end = c + len(verified)
                start = min(s.draft_valid, end)
                if start < end:
                    ids.extend(verified[start - c :])
                    spans.append(self._span(rm, s, start, end - start))
                    states.append(s)
        if not spans:
            return
        batch = build_batch(
            spans, tokens_per_block=self.tpb, windows=rm.layout.windows, device=self.device
        )
        if not self.eagle:
            assert isinstance(rm.model, Decoder)
            rm.model(self._ids(ids), batch, rm.layout.layer_kinds, rm.caches)
            return
        assert isinstance(rm.model, Eagle3Head)
        index = torch.tensor(rows, device=self.device)
        feats = rm.model.fuse([a[index] for a in aux])
        hidden, prenorm = rm.model(self._ids(ids), feats, batch, rm.layout.layer_kinds, rm.caches)
        last = batch.last_index
        logits = rm.model.logits(hidden[last])
        toks, dists = self._pick(
            logits, [s.params.greedy for s in states], [s.params.temperature for s in states]
        )
        for n, s in enumerate(states):
            s.eagle_next = toks[n]
            s.eagle_probs = dists[n]
            s.eagle_feature = prenorm[last[n]]
