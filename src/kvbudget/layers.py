"""Per-layer cache geometry and the exact bytes each layer kind stores on one rank.

Every layer kind is a frozen dataclass that computes its own bytes, given the storage
format and the tensor-parallel size ``tp``. Two quantities exist:

* ``bytes_per_token(dtype, tp)`` - grows with every cached token (K/V or an MLA latent);
* ``state_bytes(dtype, tp)`` - a fixed per-sequence state (recurrent layers).

Per-rank sharding (DESIGN ledger rule 6): a layer's KV heads are split over TP ranks as
``ceil(num_kv_heads / tp)`` (heads are replicated when there are fewer heads than ranks);
an MLA latent is replicated on every rank; recurrent heads and groups shard the same way
as KV heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from kvbudget.dtypes import DType

FLOAT32_BYTES = 4
INDEX_KEY_BYTES_PER_VALUE = 2  # a MiniMax-M3 index key is bf16 (MiniMaxM3IndexerCache)


def per_rank(count: int, tp: int) -> int:
    """Heads (or groups) held by one of ``tp`` ranks: ``ceil(count / tp)``, at least 1."""
    return max(1, -(-count // tp))


@dataclass(frozen=True, kw_only=True)
class AttentionLayer:
    """Softmax attention (MHA, GQA or MQA), full or over a sliding window.

    Stores K and V for every cached token: ``2 x ceil(kv_heads/tp) x head_dim`` values.
    ``sliding_window`` is the number of most recent tokens attended to, or None for full
    attention. ``chunked``: the window is chunked local attention (Llama-4): a token
    attends to the tokens of its own chunk of ``sliding_window`` positions, never to more
    than the last ``sliding_window`` tokens, so a sliding window of that size holds all
    it reads (engines size it their own way: :mod:`kvbudget.engines`).

    ``index_head_dim`` > 0: block-sparse attention with a lightning indexer (MiniMax-M3's
    sparse layers) that also keeps one index key of ``index_head_dim`` bf16 values per
    token, whatever the KV dtype, replicated on every TP rank (vLLM 0.33.0
    ``models/minimax_m3/common/indexer.py`` ``MiniMaxM3IndexerCache``: an MLA spec of one
    head, dtype bf16 unless ``--attention-config indexer_kv_dtype`` says fp8).
    """

    index: int
    num_kv_heads: int
    head_dim: int
    sliding_window: int | None = None
    chunked: bool = False
    index_head_dim: int = 0

    kind: Literal["attention"] = "attention"

    def kv_bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Bytes one token's K and V take in this layer on one rank."""
        values = per_rank(self.num_kv_heads, tp) * self.head_dim
        return 2 * dtype.bytes_for(values)

    @property
    def index_bytes_per_token(self) -> int:
        """Bytes of one token's index key (bf16, any ``tp``), 0 without an indexer."""
        return INDEX_KEY_BYTES_PER_VALUE * self.index_head_dim

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Bytes one token takes in this layer on one rank: K, V and any index key."""
        return self.kv_bytes_per_token(dtype, tp) + self.index_bytes_per_token

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """Attention keeps no per-sequence state besides its KV: 0."""
        return 0


@dataclass(frozen=True, kw_only=True)
class MLALayer:
    """Multi-head latent attention (DeepSeek-V2/V3/V3.2, Kimi-K2).

    Stores one compressed latent of ``kv_lora_rank + qk_rope_head_dim`` values per token;
    the latent is shared by all heads and replicated on every TP rank. DeepSeek-V3.2's
    sparse attention adds an indexer that keeps its own key per token
    (``index_head_dim`` > 0): fp8 values plus one fp32 scale per 128, stored as bytes
    whatever the KV dtype (vLLM ``DeepseekV32IndexerCache``: ``index_head_dim +
    index_head_dim // 128 x 4``), replicated like the latent.
    """

    index: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    index_head_dim: int = 0

    kind: Literal["mla"] = "mla"
    sliding_window: None = None

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Bytes of one token's latent, and indexer key if any (independent of ``tp``)."""
        indexer = self.index_head_dim + self.index_head_dim // 128 * 4
        return dtype.bytes_for(self.kv_lora_rank + self.qk_rope_head_dim) + indexer

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """MLA keeps no per-sequence state besides its latent: 0."""
        return 0


@dataclass(frozen=True, kw_only=True)
class GatedDeltaNetLayer:
    """Gated DeltaNet linear attention (Qwen3-Next ``linear_attention`` layers).

    Per-sequence state on one rank, with ``hk = ceil(num_k_heads/tp)`` and
    ``hv = ceil(num_v_heads/tp)``::

        recurrent state = hv x k_head_dim x v_head_dim
        conv state      = (conv_kernel - 1 + lookahead) x (2 x hk x k_head_dim + hv x v_head_dim)

    (the causal conv runs over the concatenated q, k and v projections). Nothing grows
    with the number of tokens.
    """

    index: int
    num_k_heads: int
    num_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    kind: Literal["gated_deltanet"] = "gated_deltanet"
    sliding_window: None = None

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Linear attention stores nothing per token: 0."""
        return 0

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """Recurrent plus conv state of one sequence on one rank.

        The conv state keeps ``conv_kernel - 1 + lookahead`` rows (the inputs of the
        unverified draft tokens too); the recurrent state is stored in ``ssm_dtype``
        (default ``dtype``), the conv state in ``dtype``.
        """
        hk = per_rank(self.num_k_heads, tp)
        hv = per_rank(self.num_v_heads, tp)
        recurrent = hv * self.k_head_dim * self.v_head_dim
        rows = self.conv_kernel - 1 + lookahead
        conv = rows * (2 * hk * self.k_head_dim + hv * self.v_head_dim)
        return (ssm_dtype or dtype).bytes_for(recurrent) + dtype.bytes_for(conv)


@dataclass(frozen=True, kw_only=True)
class Mamba2Layer:
    """Mamba2 selective state-space layer (Nemotron-H ``M`` layers).

    Per-sequence state on one rank, with ``h = ceil(num_heads/tp)`` and
    ``g = ceil(n_groups/tp)``::

        ssm state  = h x head_dim x ssm_state_size
        conv state = (conv_kernel - 1 + lookahead) x (h x head_dim + 2 x g x ssm_state_size)

    (the conv runs over x, B and C; B and C have ``n_groups x ssm_state_size`` channels each).
    """

    index: int
    num_heads: int
    head_dim: int
    n_groups: int
    ssm_state_size: int
    conv_kernel: int

    kind: Literal["mamba2"] = "mamba2"
    sliding_window: None = None

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Mamba stores nothing per token: 0."""
        return 0

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """SSM plus conv state of one sequence on one rank.

        The conv state keeps ``conv_kernel - 1 + lookahead`` rows; the SSM state is stored
        in ``ssm_dtype`` (default ``dtype``), the conv state in ``dtype``.
        """
        h = per_rank(self.num_heads, tp)
        g = per_rank(self.n_groups, tp)
        ssm = h * self.head_dim * self.ssm_state_size
        rows = self.conv_kernel - 1 + lookahead
        conv = rows * (h * self.head_dim + 2 * g * self.ssm_state_size)
        return (ssm_dtype or dtype).bytes_for(ssm) + dtype.bytes_for(conv)


@dataclass(frozen=True, kw_only=True)
class NoCacheLayer:
    """A layer that caches nothing (an MLP / MoE block of a hybrid pattern)."""

    index: int

    kind: Literal["none"] = "none"
    sliding_window: None = None

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Nothing cached: 0."""
        return 0

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """Nothing cached: 0."""
        return 0


@dataclass(frozen=True, kw_only=True)
class CompressedMLALayer:
    """DeepSeek-V4 attention: one shared-KV latent (MQA, one ``head_dim`` vector a token)
    kept three ways (vLLM 0.33.0 ``models/deepseek_v4/attention.py``).

    * a window cache of the last ``window`` tokens' latents (every layer);
    * with ``compress_ratio`` > 1, one compressed latent per ``compress_ratio`` tokens,
      for the whole sequence, and the compressor's fp32 state of the tokens not yet
      compressed;
    * with an indexer (``index_head_dim`` > 0; the ratio-4 layers), its key per compressed
      entry: fp8 values plus one fp32 scale per 128 (``index_head_dim + index_head_dim //
      128 x 4`` bytes), and its own compressor's state.

    ``entry_bytes``: one latent in the KV dtype; an 8-bit cache is DeepSeek's fp8_ds_mla
    row (``head_dim - rope_head_dim`` fp8 values, the rope part in bf16, one UE8M0 scale
    byte per 64 values plus one pad byte: 584 bytes for 512 of 64). Everything is
    replicated on every TP rank (``max_tp_shards=1``).

    Engine-neutral figures: ``bytes_per_token`` is the growing part, the compressed
    latent and indexer key *per token*, rounded up to a whole byte (``cdiv(entry,
    compress_ratio)``: exact when the ratio divides the entry, an upper bound otherwise);
    the window cache and compressor states are bounded and not counted there. The engines
    that model this layer size each cache from its parts (:mod:`kvbudget.engines.vllm`).
    """

    index: int
    head_dim: int
    rope_head_dim: int
    window: int
    compress_ratio: int = 1
    index_head_dim: int = 0

    kind: Literal["compressed_mla"] = "compressed_mla"
    sliding_window: None = None

    def entry_bytes(self, dtype: DType) -> int:
        """Bytes of one latent (window or compressed) in ``dtype``."""
        if dtype.bits == 8:
            nope = self.head_dim - self.rope_head_dim
            return nope + 2 * self.rope_head_dim + nope // 64 + 1
        return dtype.bytes_for(self.head_dim)

    @property
    def indexer_key_bytes(self) -> int:
        """Bytes of one indexer key (fp8 values and their fp32 scales), 0 without one."""
        return self.index_head_dim + self.index_head_dim // 128 * 4

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """The compressed latent and indexer key per token, rounded up (0 for a
        window-only layer)."""
        if self.compress_ratio <= 1:
            return 0
        return -(-(self.entry_bytes(dtype) + self.indexer_key_bytes) // self.compress_ratio)

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """No per-sequence recurrent state: 0 (the window and compressor caches are
        bounded windows: :meth:`window_parts`)."""
        return 0

    def window_parts(self, dtype: DType) -> tuple[tuple[int, int], ...]:
        """The bounded caches as ``(window tokens, bytes a token)``: the window cache
        (``window`` tokens of one latent in ``dtype``) and, at ratio > 1, the compressor's
        fp32 inputs of the ``coff x ratio`` tokens it pools next (kv and score, ``coff x
        head_dim`` values each; ``coff`` 2 at ratio 4, whose windows overlap), the
        indexer's compressor's too (``index_head_dim`` wide)."""
        parts = [(self.window, self.entry_bytes(dtype))]
        if self.compress_ratio > 1:
            coff = 2 if self.compress_ratio == 4 else 1
            span = coff * self.compress_ratio
            parts.append((span, 2 * coff * self.head_dim * FLOAT32_BYTES))
            if self.index_head_dim:
                parts.append((span, 2 * coff * self.index_head_dim * FLOAT32_BYTES))
        return tuple(parts)


@dataclass(frozen=True, kw_only=True)
class SharedCompressedMLALayer(CompressedMLALayer):
    """DeepSeek-V4.1 attention: DeepSeek-V4's latent, with compressed caches shared by
    groups of layers (vLLM 0.33.0 ``models/deepseek_v41/attention.py``
    ``DeepseekV4Attention.__init__``).

    * ``compress_ratio`` is the config's ``compress_ratios`` entry: 0 the window cache
      only, 1 a compressed latent per token (no pooling), 2 one per two tokens;
    * ``kv_source``: the layer owns the compressed cache and the compressor
      (``kv_source_layer_ids``); a layer of ratio > 0 that is not a source reads the
      cache of the nearest source at or below it and keeps only its window cache;
    * ``index_head_dim`` > 0: the layer owns the indexer key cache (an index source that
      is also a KV source; the other index sources read their KV source's).

    ``bytes_per_token``: on a KV source of ratio > 0, ``cdiv(entry + index key, ratio)``;
    0 elsewhere (the window cache and the compressor's ring are bounded).
    """

    kv_source: bool = False

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """The owned compressed latent and indexer key per token, rounded up."""
        if not self.kv_source or self.compress_ratio == 0:
            return 0
        return -(-(self.entry_bytes(dtype) + self.indexer_key_bytes) // self.compress_ratio)

    def window_parts(self, dtype: DType) -> tuple[tuple[int, int], ...]:
        """The bounded caches as ``(window tokens, bytes a token)``: the window cache of
        every layer, and on a KV source of ratio 2 its compressor's fp32 inputs of the
        pair it pools next (kv and score, ``head_dim`` values each; ratio 1 pools
        nothing, and V4.1's indexer keys come from the KV source's compressor)."""
        parts = [(self.window, self.entry_bytes(dtype))]
        if self.kv_source and self.compress_ratio > 1:
            parts.append((self.compress_ratio, 2 * self.head_dim * FLOAT32_BYTES))
        return tuple(parts)


@dataclass(frozen=True, kw_only=True)
class KimiDeltaLayer:
    """Kimi Delta Attention (Kimi-Linear's KDA layers), as vLLM 0.33.0 keeps its state
    (``model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py``
    ``KimiGatedDeltaNetAttention``; ``mamba_utils.py`` ``kda_state_shape``,
    ``kda_state_dtype``).

    Per-sequence state on one rank, with ``h = num_heads / tp`` (vLLM asserts
    ``num_heads % tp == 0``)::

        conv state      = (conv_kernel - 1 + lookahead) x 3 x h x head_dim   (dtype)
        recurrent state = h x head_dim x head_dim                            (float32)

    One packed conv state runs over q, k and v (each ``num_heads x head_dim`` wide). The
    recurrent state is float32 whatever ``ssm_dtype`` says: the layer passes no
    ``mamba_ssm_cache_dtype`` to ``kda_state_dtype``, whose default ``auto`` is float32
    (unlike a Gated DeltaNet state, which follows the model dtype). Nothing grows with
    the number of tokens.

    ``full_rank_gate``: Kimi K3's layer (``models/kimi_k3/nvidia/kda.py``
    ``KimiK3DeltaAttention``), whose ``get_state_dtype`` passes ``mamba_ssm_cache_dtype``:
    the recurrent state is then stored in ``ssm_dtype`` (default ``dtype``; ``auto`` is
    float32, which the family sets as its ``ssm_state_dtype``). ``bounded_gate``: the
    config sets ``gate_lower_bound``, one condition of its FlashKDA prefill
    (``is_flashkda_supported``), which the engine models read.
    """

    index: int
    num_heads: int
    head_dim: int
    conv_kernel: int
    full_rank_gate: bool = False
    bounded_gate: bool = False

    kind: Literal["kda"] = "kda"
    sliding_window: None = None

    def bytes_per_token(self, dtype: DType, tp: int) -> int:
        """Linear attention stores nothing per token: 0."""
        return 0

    def state_bytes(
        self, dtype: DType, tp: int, *, lookahead: int = 0, ssm_dtype: DType | None = None
    ) -> int:
        """Conv state (in ``dtype``) plus recurrent state of one sequence on one rank:
        float32 (``ssm_dtype`` ignored), or in ``ssm_dtype`` (default ``dtype``) with a
        full-rank gate (see the class docstring)."""
        h = per_rank(self.num_heads, tp)
        conv = (self.conv_kernel - 1 + lookahead) * 3 * h * self.head_dim
        recurrent = h * self.head_dim * self.head_dim
        if self.full_rank_gate:
            return dtype.bytes_for(conv) + (ssm_dtype or dtype).bytes_for(recurrent)
        return dtype.bytes_for(conv) + FLOAT32_BYTES * recurrent


Layer: TypeAlias = (
    AttentionLayer
    | MLALayer
    | GatedDeltaNetLayer
    | KimiDeltaLayer
    | Mamba2Layer
    | NoCacheLayer
    | CompressedMLALayer
)
