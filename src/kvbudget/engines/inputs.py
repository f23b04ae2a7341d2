"""What an engine model needs to know: the resolved models and the engine's own settings.

The planner builds one :class:`EngineInputs` from the checked, typed values it planned
with, so every engine model sees the same facts and never re-parses strings.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.dtypes import DType
from kvbudget.model import ModelSpec

DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


@dataclass(frozen=True, kw_only=True)
class EngineInputs:
    """One rank's deployment as an engine sees it.

    * ``draft``: the draft model with its own geometry (an EAGLE3 head or a small model),
      or None; MTP drafts are the target's ``mtp_layers`` (``spec == "mtp"``).
    * ``gpu_kv_bytes``: KV bytes per GPU handed to the engine (the smallest PP stage's
      budget, so no stage is asked for more than it has); ``host_bytes``: host KV bytes
      per rank, all managers together.
    * ``state_dtype``: recurrent (conv) state storage; ``ssm_state_dtype``: the SSM /
      recurrent part where the config names another (Nemotron-H: fp32), else None.
    * ``gpu_memory_bytes``: the GPU's CUDA-visible memory, when known (a GPU preset);
      ``weights_bytes``: weights on the most loaded rank (target + draft), when countable.
    * ``max_num_batched_tokens``: tokens one scheduler step may run (the prefill chunk);
      ``async_scheduling``: the scheduler overlaps two steps (vLLM's default);
      ``enable_prefix_caching``: block reuse across requests.
    """

    target: ModelSpec
    draft: ModelSpec | None
    spec: str
    max_draft_len: int
    tp: int
    pp: int
    kv_dtype: DType
    state_dtype: DType
    ssm_state_dtype: DType | None = None
    tokens_per_block: int
    max_seq_len: int
    max_batch_size: int
    gpu_kv_bytes: int
    host_bytes: int
    gpu_memory_bytes: int | None = None
    weights_bytes: int | None = None
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    async_scheduling: bool = True
    enable_prefix_caching: bool = True
    # the launch layout: ``tp`` above is the ranks one sequence's KV is split over (the
    # attention TP); these are the flags' values
    launch_tp: int | None = None  # --tp as given (None: tp)
    dp: int = 1
    dp_attention: bool = False
    ep: int = 1

    @property
    def lookahead_tokens(self) -> int:
        """Unverified draft tokens per sequence: K, or 0 without speculation."""
        return 0 if self.spec == "none" else self.max_draft_len
