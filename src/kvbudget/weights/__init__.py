"""Weights of a model: exact parameter counts and the bytes one rank holds.

Two questions, two functions:

* :func:`count_params` - how many parameters the checkpoint stores, by component
  (embeddings, lm_head, attention, recurrent mixers, dense MLP, routed and shared
  experts, routers, norms, EAGLE3 ``fc``, MTP layers, vision tower);
* :func:`weights_bytes` - how many bytes of weights **one rank** holds when an engine
  shards the model over ``tp`` tensor-parallel ranks and ``pp`` pipeline stages, in the
  checkpoint's storage format.

Both read one inventory of weight tensors built from the config, so they always agree.

Sharding (vLLM's layers; SGLang and TensorRT-LLM shard the same way):

* column-parallel linears (q/k/v, gate/up, MLA ``q_b_proj``/``kv_b_proj``, Mamba and
  Gated DeltaNet input projections and convs) split their output rows by head:
  ``ceil(heads / tp)`` heads per rank, a head replicated when there are fewer heads than
  ranks (KV heads, Mamba groups); their biases split the same way;
* row-parallel linears (o_proj, down_proj, out_proj) split their input columns the same
  way; their biases are replicated;
* routed experts split each expert's intermediate size: ``ceil(moe_intermediate / tp)``
  (tensor parallel); with expert parallelism (``ep > 1``) each rank holds
  ``ceil(num_experts / ep)`` whole experts instead (vLLM's ``FusedMoE`` with
  ``enable_expert_parallel``, SGLang's ``--ep-size``);
* with data-parallel attention (``attention_tp < tp``) the attention weights are split
  over ``attention_tp`` ranks only (each attention-DP group holds a full copy);
* vocab-parallel embeddings and lm_head hold ``ceil(pad64(vocab) / tp)`` rows per rank,
  where ``pad64`` rounds the vocabulary up to a multiple of 64 (vLLM's
  ``DEFAULT_VOCAB_PADDING_SIZE``; every preset's vocabulary already is one);
* replicated on every rank: norms, routers (and DeepSeek's ``e_score_correction_bias``),
  MLA ``q_a_proj`` and ``kv_a_proj_with_mqa`` (vLLM fuses them into ``fused_qkv_a_proj``
  with ``disable_tp=True``, ``vllm/model_executor/models/deepseek_v2.py``), the EAGLE3
  ``fc`` (a ``ReplicatedLinear``), the MTP ``eh_proj`` (a plain ``nn.Linear`` in vLLM's
  ``deepseek_mtp.py``), and the vision tower's embeddings, norms and projector.

Pipeline parallelism: embeddings (and a vision tower) on stage 0; the final norm and
lm_head on the last stage; decoder layers per :func:`kvbudget.cost.pp_stage_layers`; MTP
layers on the last stage. With tied embeddings and ``pp > 1`` the last stage holds its
own copy of the embedding as the lm_head (vLLM builds ``embed_tokens`` on the last rank
to tie it). An EAGLE3 head lives wholly on the last stage.

Storage (``config["quantization_config"]``):

==========================  ===============================================================
``fp8`` + block ``[b0,b1]``   quantized linears: 1 byte per weight + one float32 scale per
                              ``b0 x b1`` block (DeepSeek-V3 ``weight_scale_inv``)
``fp8`` without blocks        1 byte per weight + one float32 scale per tensor
``fp8`` block, DeepSeek-V4    by ``expert_dtype`` (default ``fp4``; V4.1 reads it from
and V4.1                      ``quantization_config``): fp4: routed experts MXFP4 as below,
                              block scales UE8M0 (1 byte); fp8: as ``fp8`` + block
                              (vLLM ``DeepseekV4FP8Config``, models/deepseek_v4*/quant_config.py)
``mxfp4`` (gpt-oss)           routed-expert weights only: 4 bits per value + one 1-byte
                              e8m0 scale per 32 values along the input dimension
``modelopt`` NVFP4            quantized linears: 4 bits per value + one fp8 scale per 16
                              values + two float32 per-tensor scales (weight_scale_2,
                              input_scale)
none                          every weight in ``weights_dtype``
==========================  ===============================================================

What a quantization never converts, in any of these checkpoints: embeddings, lm_head,
norms, biases, routers, convolutions, recurrent parameters (``dt_bias``, ``A_log``,
``D``), attention sinks, the MTP ``eh_proj`` and the vision tower; plus every module
matched by the config's ``modules_to_not_convert`` / ``ignored_layers`` / ``ignore`` /
``exclude_modules`` globs. Those stay in ``weights_dtype``.

Not modelled: copies an engine makes after loading (vLLM's MLA keeps bf16 copies of
``kv_b_proj`` as ``W_UK_T``/``W_UV``), kernel-specific padding of quantized expert
weights, expert parallelism, and vision encoders run data-parallel.
"""

from kvbudget.weights.counts import ParamCounts, count_params
from kvbudget.weights.placement import WeightsBytes, weights_bytes

__all__ = ["ParamCounts", "WeightsBytes", "count_params", "weights_bytes"]
