"""Attention over the cache's pages: write new K/V into their slots, gather by block table.

Storage layout (one role): the cache gives uint8 rows (:mod:`kvbudget.cache.storage`);
the engine views them as

* kv tier rows ``[blocks, growing layers, 2 (K, V), tokens_per_block, kv_heads,
  head_dim]``: the layers whose cache grows (full attention, and windows at least
  ``max_seq_len`` long), in layer order;
* window pool ``g`` rows ``[blocks, layers of group g, 2, tokens_per_block, kv_heads,
  head_dim]``, groups ordered by window size as the plan's ``window_groups``.

A forward pass works on a batch of sequences, each adding ``num_new`` tokens from position
``start`` (a prefill chunk, or the verified token plus the drafts). For each *kind* of
layer (kind 0: the kv table; kind ``g + 1``: window group ``g``) :func:`build_batch`
computes once per pass: where each new token is written, which cached positions each
sequence reads (positions ``< start``: all of them, or the last ``window - 1``) and the
mask (causal, and the window). :func:`attend` then, per layer: writes the new K/V,
gathers the cached K/V, concatenates the new K/V (from registers, so a prefill chunk whose
window slid past some of its own positions still sees them) and runs PyTorch SDPA. The
same code runs on CPU and CUDA; index tensors are built on the CPU and moved once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kvbudget.errors import InvalidArgumentError


@dataclass(frozen=True, kw_only=True)
class SeqSpan:
    """One sequence of a pass: ``num_new`` tokens from position ``start``.

    ``table``: its kv block ids (None: no cache, only ``start == 0`` allowed);
    ``window_tables``: per window group, (first kept block index, block ids).
    """

    start: int
    num_new: int
    table: Sequence[int] | None = None
    window_tables: Sequence[tuple[int, Sequence[int]]] = ()


@dataclass(frozen=True, kw_only=True)
class KindBatch:
    """The indices and mask of one layer kind for one pass (see the module docstring).

    ``write_tokens`` (flat token indices), ``write_rows`` and ``write_offsets`` say where
    each new token's K/V goes; ``ctx_rows``/``ctx_offsets`` ``[B, C]`` where the cached
    context is; ``mask`` ``[B, 1, Q, C + Q]`` which keys each query sees.
    """

    write_tokens: torch.Tensor
    write_rows: torch.Tensor
    write_offsets: torch.Tensor
    ctx_rows: torch.Tensor
    ctx_offsets: torch.Tensor
    mask: torch.Tensor

    @property
    def num_context(self) -> int:
        """C: the cached positions gathered per sequence (padded)."""
        return int(self.ctx_rows.shape[1])


@dataclass(frozen=True, kw_only=True)
class AttentionBatch:
    """One pass's token layout and per-kind indices; built by :func:`build_batch`.

    ``positions`` ``[T]``: each flat token's position; ``seq_index``/``query_index``
    ``[T]``: its sequence and place among that sequence's new tokens; ``last_index``
    ``[B]``: the flat index of each sequence's last new token. ``uniform``: every
    sequence adds ``max_new`` tokens, so the flat tokens are already ``[B, max_new]``
    (decode passes) and need no padding.
    """

    num_seqs: int
    max_new: int
    uniform: bool
    positions: torch.Tensor
    seq_index: torch.Tensor
    query_index: torch.Tensor
    last_index: torch.Tensor
    kinds: tuple[KindBatch, ...]
    cached: bool


@dataclass(frozen=True, kw_only=True)
class LayerCache:
    """One layer's K and V pages: ``[rows, tokens_per_block, kv_heads, head_dim]`` views
    into the cache storage, and the layer's kind (0: kv table, g + 1: window group g)."""

    k: torch.Tensor
    v: torch.Tensor
    kind: int


def _table_tensor(tables: Sequence[Sequence[int]]) -> torch.Tensor:
    width = max(1, max((len(t) for t in tables), default=1))
    out = torch.zeros((len(tables), width), dtype=torch.long)
    for i, t in enumerate(tables):
        if t:
            out[i, : len(t)] = torch.tensor(list(t), dtype=torch.long)
    return out


def build_batch(
    seqs: Sequence[SeqSpan],
    *,
    tokens_per_block: int,
    windows: Sequence[int],
    device: torch.device,
) -> AttentionBatch:
    """Indices and masks for one pass over ``seqs``; ``windows`` are the window sizes of
    kinds 1.. (kind 0 is full attention over the kv table). Pure.

    Raises InvalidArgumentError when a table does not cover the positions a sequence
    writes or reads (an engine bug: reserve before the pass)."""
    tpb = tokens_per_block
    num = len(seqs)
    starts = torch.tensor([s.start for s in seqs], dtype=torch.long)
    lens = torch.tensor([s.num_new for s in seqs], dtype=torch.long)
    max_new = int(lens.max())
    total = int(lens.sum())
    seq_index = torch.repeat_interleave(torch.arange(num), lens)
    offsets = torch.cumsum(lens, 0) - lens
    query_index = torch.arange(total) - torch.repeat_interleave(offsets, lens)
    positions = starts[seq_index] + query_index
    last_index = offsets + lens - 1
    arange_q = torch.arange(max_new)
    qpos = starts[:, None] + arange_q[None, :]  # [B, Q]
    qvalid = arange_q[None, :] < lens[:, None]
    causal_new = (arange_q[None, None, :] <= arange_q[None, :, None]) & qvalid[:, None, :]
    cached = all(s.table is not None for s in seqs)
    if not cached and any(s.table is not None or s.start for s in seqs):
        raise InvalidArgumentError("a pass without cache tables must start every sequence at 0")
    kinds: list[KindBatch] = []
    for kind, window in enumerate((None, *windows)):
        if cached:
            if kind == 0:
                firsts = [0] * num
                tables = [list(s.table or ()) for s in seqs]
            else:
                firsts = [s.window_tables[kind - 1][0] for s in seqs]
                tables = [list(s.window_tables[kind - 1][1]) for s in seqs]
        else:
            firsts, tables = [0] * num, [[] for _ in seqs]
        lo = starts.clone() if window is None else (starts - (window - 1)).clamp(min=0)
        if window is None:
            lo.zero_()
        if cached:
            for s, first, table, low in zip(seqs, firsts, tables, lo.tolist(), strict=True):
                end = s.start + s.num_new
                if (first * tpb > low and low < s.start) or (first + len(table)) * tpb < end:
                    raise InvalidArgumentError(
                        f"kind {kind}: blocks {first}..{first + len(table) - 1} do not cover "
                        f"positions {low}..{end - 1}"
                    )
        first_t = torch.tensor(firsts, dtype=torch.long)
        table_t = _table_tensor(tables)
        width = table_t.shape[1]
        num_ctx = int((starts - lo).max()) if cached else 0
        kpos = lo[:, None] + torch.arange(num_ctx)[None, :]  # [B, C]
        ctx_valid = kpos < starts[:, None]
        blk = (kpos // tpb - first_t[:, None]).clamp(0, width - 1)
        ctx_rows = torch.where(ctx_valid, table_t.gather(1, blk), 0)
        ctx_offsets = torch.where(ctx_valid, kpos % tpb, 0)
        mask_ctx = ctx_valid[:, None, :].expand(num, max_new, num_ctx)
        mask_new = causal_new
        if window is not None:
            mask_ctx = mask_ctx & (kpos[:, None, :] > qpos[:, :, None] - window)
            mask_new = mask_new & (qpos[:, None, :] > qpos[:, :, None] - window)
        mask = torch.cat((mask_ctx, mask_new), dim=-1) | ~qvalid[:, :, None]
        if cached:
            wblk = positions // tpb - first_t[seq_index]
            keep = wblk >= 0
            write_tokens = torch.nonzero(keep).flatten()
            wb = wblk[write_tokens]
            write_rows = table_t[seq_index[write_tokens], wb]
            write_offsets = positions[write_tokens] % tpb
        else:
            write_tokens = write_rows = write_offsets = torch.zeros(0, dtype=torch.long)
        kinds.append(
            KindBatch(
                write_tokens=write_tokens.to(device),
                write_rows=write_rows.to(device),
                write_offsets=write_offsets.to(device),
                ctx_rows=ctx_rows.to(device),
                ctx_offsets=ctx_offsets.to(device),
                mask=mask[:, None].to(device),
            )
        )
    return AttentionBatch(
        num_seqs=num,
        max_new=max_new,
        uniform=max_new * num == total,
        positions=positions.to(device),
        seq_index=seq_index.to(device),
        query_index=query_index.to(device),
        last_index=last_index.to(device),
        kinds=tuple(kinds),
        cached=cached,
    )


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: AttentionBatch,
    kind: int,
    cache: LayerCache | None,
) -> torch.Tensor:
    """Attention of one layer: ``q`` ``[T, heads, d]``, ``k``/``v`` ``[T, kv_heads, d]``
    (RoPE applied); returns ``[T, heads, d]``. Writes the new K/V into ``cache`` (when
    given; mutates the cache storage) before reading the cached context."""
    kb = batch.kinds[kind]
    num, width = batch.num_seqs, batch.max_new
    si, qi = batch.seq_index, batch.query_index
    if cache is not None and kb.write_tokens.numel():
        t = kb.write_tokens
        cache.k.index_put_((kb.write_rows, kb.write_offsets), k[t].to(cache.k.dtype))
        cache.v.index_put_((kb.write_rows, kb.write_offsets), v[t].to(cache.v.dtype))
    if batch.uniform:  # [B * Q] tokens in sequence order: a view, no padding
        qp = q.view(num, width, *q.shape[1:])
        kn = k.view(num, width, *k.shape[1:])
        vn = v.view(num, width, *v.shape[1:])
    else:
        qp = q.new_zeros((num, width, *q.shape[1:]))
        qp[si, qi] = q
        kn = k.new_zeros((num, width, *k.shape[1:]))
        kn[si, qi] = k
        vn = v.new_zeros((num, width, *v.shape[1:]))
        vn[si, qi] = v
    if cache is not None and kb.num_context:
        kc = cache.k[kb.ctx_rows, kb.ctx_offsets].to(k.dtype)
        vc = cache.v[kb.ctx_rows, kb.ctx_offsets].to(v.dtype)
        kn = torch.cat((kc, kn), dim=1)
        vn = torch.cat((vc, vn), dim=1)
    out = F.scaled_dot_product_attention(
        qp.transpose(1, 2),
        kn.transpose(1, 2),
        vn.transpose(1, 2),
        attn_mask=kb.mask,
        enable_gqa=True,
    )
    if batch.uniform:
        return out.transpose(1, 2).reshape(q.shape)
    return out.transpose(1, 2)[si, qi]
