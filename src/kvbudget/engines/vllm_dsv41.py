"""DeepSeek-V4.1 under vLLM 0.33.0: the caches each layer registers, and what it refuses.

vLLM 0.33.0 runs DeepSeek-V4.1 from its own package (``vllm/models/deepseek_v41``, the
PyPI wheel), not DeepSeek-V4's. On SM90 (H100, H200) the attention class is
``DeepseekV4FlashMLAAttention`` (``nvidia/model.py`` ``_select_dsv4_attn_cls``: mega
attention declines off SM100, FlashInfer is SM12's), which stores DeepSeek-V4's packed
``fp8_ds_mla`` record whatever ``--kv-cache-dtype`` says (``attention.py``
``_resolve_dsv4_kv_cache_dtype``; the 528-byte MXFP8 record is SM100's,
``_use_v41_mxfp8_kv_record``). Per layer, in the order ``DeepseekV4Attention.__init__``
registers them (the packed grouping reads that order):

==========================  ===========================================  ==============
cache                       spec (v1/kv_cache_interface.py)              block (tokens)
==========================  ===========================================  ==============
compressed latent           MLA, ``tokens_per_state`` = ratio, 584 B a   ``--block-size``
(KV sources of ratio > 0)   state (``get_kv_cache_spec``)
indexer key                 MLA, ratio tokens a state, 132 B a state     ``--block-size``
(index and KV source)       (``DeepseekV4IndexerCache``, fp8 + scales)
window (every layer)        sliding-window MLA, 584 B a token            32
                            (``DeepseekV4SWACache(block_size=32)``)
compressor ring             ``CircularBufferSpec``: one block a request  ``max(8, 2^⌈log2
(KV sources of ratio 2)     for its life, ``2 x head_dim`` fp32 a row    (K + 2)⌉)``
                            (compressor.py ``CompressorStateCache``)
==========================  ===========================================  ==============

The MLA pages (and the window's) are padded to multiples of 576 bytes. The sparse-MLA and
indexer backends take 64-token blocks on SM90 (``get_supported_kernel_block_sizes``:
models/deepseek_v41/sparse_mla.py ``DeepseekV4SparseMLABackend``,
v1/attention/backends/mla/indexer.py ``DeepseekV41IndexerBackend``), so the plan says
``--block-size 64``. With Model Runner V2 (0.33.0's default) the window caches run
``swa_bounded_replay`` (config/cache.py, on by default): they and the rings take no part
in prefix caching (``SlidingWindowMLASpec.prefix_cacheable``,
``CircularBufferSpec.prefix_cacheable``), so the scheduler's block size is the MLA
groups'. The grouping is :func:`kvbudget.engines.vllm.packed_groups`.

V4.1 ships no classic MTP layers (its ``mtp.*`` weights are DSpark stages; vLLM refuses
``method="mtp"`` for it, config/speculative.py). ``--spec dspark`` runs those stages
(:mod:`kvbudget.architectures.dspark`): ``DSparkDeepseekV4ForCausalLM``
(``models/deepseek_v41/nvidia/dspark.py``) builds each as a ``DeepseekV4DecoderLayer``
past ``num_hidden_layers``, never a KV or index source, so each registers its window
cache alone, after the target's layers, in the same pool and packed groups (marked
``is_draft``, ``v1/worker/gpu/attn_utils.py`` ``get_kv_cache_spec``). The rings follow K
as for every drafter (``CompressorStateCache`` reads ``num_speculative_tokens``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.cost import pp_stage_layers
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import SharedCompressedMLALayer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.engines.vllm import LayerSpec

DSV41_BLOCK = 64  # the SM90 sparse-MLA and indexer kernel blocks: [64]
DSV41_SWA_BLOCK = 32  # DeepseekV4SWACache(block_size=32) (attention.py)
RING_MIN_ROWS = 8  # CompressorStateCache: max(8, a power of two >= K + 2)
FP32_BYTES = 4
MODELLED_SPECS = frozenset({"none", "ngram", "dspark"})  # the harness's DeepSeek-V4.1 cases


def ring_rows(lookahead_tokens: int) -> int:
    """Rows of a compressor ring (``CompressorStateCache.__init__``): the drafts, the
    bonus token and the previous row, as a power of two, at least 8."""
    rows = lookahead_tokens + 2
    return max(RING_MIN_ROWS, 1 << (rows - 1).bit_length())


def shared_compressed_specs(
    d: Deployment, layer: SharedCompressedMLALayer, stage: int, draft: bool
) -> list[LayerSpec]:
    """The specs one V4.1 layer registers, in registration order (module docstring)."""
    from kvbudget.engines.vllm import DSV4_ENTRY_BYTES, LayerSpec, aligned_page

    ratio = layer.compress_ratio
    out = []
    if layer.kv_source and ratio > 0:
        # a 64-token block holds 64 / ratio states of the latent, then of the index key
        for state_bytes in (DSV4_ENTRY_BYTES, layer.indexer_key_bytes):
            if state_bytes:
                page = DSV41_BLOCK // ratio * state_bytes
                out.append(
                    LayerSpec(
                        kind="mla",
                        block_size=DSV41_BLOCK,
                        page_bytes=aligned_page(page),
                        geometry=(page,),
                        draft=draft,
                        stage=stage,
                    )
                )
    page = DSV41_SWA_BLOCK * DSV4_ENTRY_BYTES
    out.append(
        LayerSpec(
            kind="sliding_window",
            block_size=DSV41_SWA_BLOCK,
            page_bytes=aligned_page(page),
            geometry=(page,),
            sliding_window=layer.window,
            draft=draft,
            stage=stage,
            prefix_cacheable=False,  # swa_bounded_replay (Model Runner V2)
        )
    )
    if layer.kv_source and ratio > 1:
        rows = ring_rows(d.lookahead_tokens)
        page = rows * 2 * layer.head_dim * FP32_BYTES  # no alignment padding
        out.append(
            LayerSpec(
                kind="circular_buffer",
                block_size=rows,
                page_bytes=page,
                geometry=(page,),
                draft=draft,
                stage=stage,
                prefix_cacheable=False,
            )
        )
    return out


def is_v41(d: Deployment) -> bool:
    """Whether the target is DeepSeek-V4.1 (its layers share compressed caches)."""
    return any(isinstance(x, SharedCompressedMLALayer) for x in d.target.layers)


def check(d: Deployment) -> None:
    """InvalidArgumentError where this model of vLLM 0.33.0 does not follow ``d``:

    * a drafter other than ngram or its own DSpark stages (``MODELLED_SPECS``; ``--spec
      mtp`` is refused earlier, by :mod:`kvbudget.deployment`);
    * no layer owns indexer keys: the indexer backend is the only one that supports the
      block-outermost layouts alone (``DeepseekV41IndexerBackend``; the sparse-MLA, window
      and compressor backends take every layout), so without it vLLM resolves another
      layout and groups by unified pages, which this model does not follow;
    * a PP split inside a KV-sharing group (``DeepseekV4Attention.__init__`` raises
      NotImplementedError, "PP splits inside a v4.1 kv-sharing group are not supported":
      a layer reads its source's compressed cache through its stage's forward context);
    * a PP stage without indexer keys beside one with them: the stages then share no KV
      cache layout (``resolve_kv_cache_layout``, v1/attention/backends/utils.py, asserts
      "Workers disagree on supported KV cache layouts").
    """
    if d.spec.name not in MODELLED_SPECS:
        raise InvalidArgumentError(
            f"--engine vllm is not modelled for {d.target.name} with --spec {d.spec.name}: "
            "a draft's caches beside DeepSeek-V4.1's packed groups have not been checked "
            "against vLLM's; plan --spec dspark (its own drafter), ngram or none"
        )
    layers = [x for x in d.target.layers if isinstance(x, SharedCompressedMLALayer)]
    if not any(x.index_head_dim for x in layers):
        raise InvalidArgumentError(
            f"--engine vllm is not modelled for {d.target.name} without an indexer key cache "
            "(no layer is both an index and a KV source: vLLM then picks a layer-outermost "
            "KV cache layout); plan it with index_source_layer_ids on a KV source"
        )
    if d.parallel.pp == 1:
        return
    stages = pp_stage_layers(len(layers), d.parallel.pp)
    stage_of = {i: s for s, indices in enumerate(stages) for i in indices}
    source = None
    for x in layers:
        source = x.index if x.kv_source else source
        if x.compress_ratio > 0 and source is not None and stage_of[source] != stage_of[x.index]:
            raise InvalidArgumentError(
                f"vLLM would not start {d.target.name} with --pipeline-parallel-size "
                f"{d.parallel.pp}: layer {x.index} (stage {stage_of[x.index]}) reads the "
                f"compressed cache of its KV source, layer {source}, on stage "
                f'{stage_of[source]} ("PP splits inside a v4.1 kv-sharing group are not '
                'supported"); pick a --pp whose stage boundaries fall on KV sources'
            )
    keyed = [any(layers[i].index_head_dim for i in indices) for indices in stages]
    if not all(keyed):
        stage = keyed.index(False)
        raise InvalidArgumentError(
            f"vLLM would not start {d.target.name} with --pipeline-parallel-size "
            f"{d.parallel.pp}: stage {stage} holds no indexer key cache, whose backend's "
            "KV cache layouts the other stages' are limited to (resolve_kv_cache_layout: "
            '"Workers disagree on supported KV cache layouts"); pick a --pp that gives '
            "every stage a layer that is both an index and a KV source"
        )


__all__ = [
    "DSV41_BLOCK",
    "DSV41_SWA_BLOCK",
    "MODELLED_SPECS",
    "check",
    "is_v41",
    "ring_rows",
    "shared_compressed_specs",
]
