"""How one model's layers map onto its role's cache storage, and the byte check.

A layer with no window, or a window at least ``max_seq_len`` long, keeps its K/V in the
kv tier (kind 0); the others in the window pool of their window size (kind ``g + 1``,
groups in increasing window size, as :func:`kvbudget.cost.cache_cost_detail` orders the
plan's ``window_groups``). Rows are laid out as :mod:`kvbudget.engine.paged_attention`
describes; :meth:`KvLayout.check` compares the bytes per token with the plan's, so a plan
made for another config is refused instead of misread.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvbudget.cache.storage import RoleStorage
from kvbudget.engine.config import DecoderConfig
from kvbudget.engine.model import TORCH_DTYPES
from kvbudget.engine.paged_attention import LayerCache
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import ManagerPlan


@dataclass(frozen=True, kw_only=True)
class KvLayout:
    """Per layer: its kind and its index among the layers of that kind.

    ``windows[g]`` is kind ``g + 1``'s window in tokens; ``layers_per_kind[k]`` how many
    layers kind ``k`` holds; ``values_per_token_layer`` = ``2 x kv_heads x head_dim``.
    """

    layer_kinds: tuple[int, ...]
    layer_slots: tuple[int, ...]
    windows: tuple[int, ...]
    layers_per_kind: tuple[int, ...]
    num_kv_heads: int
    head_dim: int

    @classmethod
    def for_config(cls, config: DecoderConfig, max_seq_len: int | None) -> KvLayout:
        """The layout of ``config`` for sequences of at most ``max_seq_len`` tokens
        (None: every window layer in a window kind). Pure."""
        windows = sorted(
            {
                w
                for w in config.layer_windows
                if w is not None and (max_seq_len is None or w < max_seq_len)
            }
        )
        kinds: list[int] = []
        for w in config.layer_windows:
            kinds.append(windows.index(w) + 1 if w in windows else 0)
        counts = [0] * (len(windows) + 1)
        slots = []
        for k in kinds:
            slots.append(counts[k])
            counts[k] += 1
        return cls(
            layer_kinds=tuple(kinds),
            layer_slots=tuple(slots),
            windows=tuple(windows),
            layers_per_kind=tuple(counts),
            num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim,
        )

    def check(self, plan: ManagerPlan) -> torch.dtype:
        """The K/V storage dtype of ``plan``; raises InvalidArgumentError when the plan's
        bytes per token (kv tier and every window group) are not this layout's."""
        dtype = TORCH_DTYPES.get(plan.kv_dtype)
        if dtype is None:
            raise InvalidArgumentError(
                f"the reference engine stores K/V as fp32, bf16 or fp16, not {plan.kv_dtype}; "
                "plan with kv_dtype='auto' or one of those"
            )
        size = torch.tensor([], dtype=dtype).element_size()
        per_layer = 2 * self.num_kv_heads * self.head_dim * size
        want = self.layers_per_kind[0] * per_layer
        got_windows = tuple(g.window_tokens for g in plan.window_groups)
        if plan.slope_bytes_per_token != want or got_windows != self.windows:
            raise InvalidArgumentError(
                f"the plan's {plan.role} cache holds {plan.slope_bytes_per_token} bytes per "
                f"token and windows {got_windows}; this model needs {want} and "
                f"{self.windows}: plan with the same config as the model"
            )
        for g, group in enumerate(plan.window_groups):
            if group.bytes_per_token != self.layers_per_kind[g + 1] * per_layer:
                raise InvalidArgumentError(
                    f"window group {group.window_tokens} of the {plan.role} plan holds "
                    f"{group.bytes_per_token} bytes per token; this model needs "
                    f"{self.layers_per_kind[g + 1] * per_layer}"
                )
        return dtype

    def views(
        self, storage: RoleStorage, dtype: torch.dtype, tokens_per_block: int
    ) -> tuple[LayerCache, ...]:
        """Per layer, K and V views into ``storage``'s GPU kv tensor and window pools
        (writing them writes the cache)."""
        shape = (tokens_per_block, self.num_kv_heads, self.head_dim)
        tensors = [storage.kv[0], *storage.windows]
        per_kind: list[torch.Tensor | None] = []
        for k, rows in enumerate(tensors):
            n = self.layers_per_kind[k]
            if n == 0:
                per_kind.append(None)
                continue
            per_kind.append(rows.view(dtype).view(rows.shape[0], n, 2, *shape))
        out = []
        for kind, slot in zip(self.layer_kinds, self.layer_slots, strict=True):
            t = per_kind[kind]
            assert t is not None
            out.append(LayerCache(k=t[:, slot, 0], v=t[:, slot, 1], kind=kind))
        return tuple(out)
