"""The dense reference: a whole sequence through a decoder with no cache.

Every layer attends to the sequence's own keys under the causal mask (and its window,
for sliding-window layers), the definition the paged path must reproduce. Used by the
tests (against ``transformers`` and against the window pools) and by no hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvbudget.engine.kv_layout import KvLayout
from kvbudget.engine.model import Decoder
from kvbudget.engine.paged_attention import SeqSpan, build_batch


def dense_logits(model: Decoder, token_ids: Sequence[int]) -> torch.Tensor:
    """``[len(token_ids), vocab]`` float32 logits of one sequence, no cache. Pure."""
    device = next(model.parameters()).device
    layout = KvLayout.for_config(model.config, None)
    batch = build_batch(
        [SeqSpan(start=0, num_new=len(token_ids))],
        tokens_per_block=1,
        windows=layout.windows,
        device=device,
    )
    ids = torch.tensor(list(token_ids), dtype=torch.long, device=device)
    with torch.no_grad():
        hidden, _ = model(ids, batch, layout.layer_kinds)
        return model.logits(hidden)
