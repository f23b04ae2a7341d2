"""A drafter's input embedding under vLLM's pipeline parallelism: shared, kept or missing.

vLLM 0.33.0 builds the speculator on the last PP rank only
(``v1/worker/gpu/model_runner.py``: ``init_speculator`` under ``is_last_pp_rank``), at PP 1
(``SpeculativeConfig.create_draft_parallel_config``, ``config/speculative.py``). Every
EAGLE, EAGLE3, MTP and DFlash drafter is loaded through ``maybe_share_target_embed``
(``v1/worker/gpu/spec_decode/eagle/utils.py``; ``load_eagle_model`` for eagle, eagle3
and mtp, ``dflash/utils.py`` for dflash), which decides what the drafter's
``embed_tokens`` becomes:

* At PP 1 it is the target's (kvbudget counts none for the drafter).
* At PP > 1 a drafter class without a ``has_own_embed_tokens`` attribute returns before
  sharing and keeps the ``VocabParallelEmbedding`` of the target's vocabulary and
  hidden size it built: every MTP class kvbudget plans with ``--spec mtp``
  (``model_executor/models/deepseek_mtp.py``, ``qwen3_next_mtp.py``, ``qwen3_5_mtp.py``,
  ``glm4_moe_mtp.py``, ``step3p5_mtp.py``, ``models/deepseek_v4/nvidia/mtp.py``,
  ``models/kimi_k3/nvidia/mtp.py``) but MiniMax-M3's; their targets build no
  ``embed_tokens`` on the last rank for an MTP drafter (``spec_decode_needs_target_embed``
  without ``include_mtp`` is False for ``mtp``), so the last stage holds that one copy.
  That embedding is weight memory on each last-stage rank that kvbudget's weights do
  not hold: :func:`kept_embedding_warnings` says how much.
* MiniMax-M3 (:data:`MTP_SHARES`): ``MiniMaxM3Model`` builds ``embed_tokens`` on the
  last rank for its MTP drafter (``spec_decode_needs_target_embed(vllm_config,
  include_mtp=vllm_config.use_v2_model_runner)``, models/minimax_m3/nvidia/model.py:
  814-824), and ``MiniMaxM3MTP`` builds its own too (mtp.py:117-121) with
  ``has_own_embed_tokens`` True at PP > 1 under Model Runner V2 (mtp.py:150-152; its
  ``load_weights`` keeps True when the checkpoint holds ``model.embed_tokens.weight``,
  mtp.py:213-214, 323-328, as the bundled target checkpoint does). Both load the same
  checkpoint tensor, so ``_should_share`` (eagle/utils.py:18-34) finds them
  ``torch.equal`` and ``maybe_share_target_embed`` deletes the MTP's copy and points it
  at the target's (:74-77): one embedding on the last stage, the target's, built there
  for the drafter (``shared``), not two. The same warning gives its bytes. (Only with
  ``--load-format dummy``, which kvbudget never emits, does the attribute stay unset and
  both copies remain.) The lm_head is one copy for every MTP class: ``load_eagle_model``
  points the drafter's ``lm_head`` and each MTP layer's ``shared_head.head`` at the
  target's (:107-130; none of these classes declares ``has_own_lm_head``).
* At PP > 1 an EAGLE, EAGLE3 or DFlash head (``SupportsEagleBase``:
  ``has_own_embed_tokens`` False unless its checkpoint stores an ``embed_tokens``
  tensor, ``model_executor/models/utils.py`` ``process_eagle_weight``), and
  DeepSeek-V4.1's DSpark drafter (``models/deepseek_v41/nvidia/dspark.py``:
  ``has_own_embed_tokens = False``, its embedding "aliased from the target"; loaded
  through ``dspark/utils.py``), look for the target's embedding on the last stage. A
  target has one there when it ties it (its ``embed_tokens`` is built on the last rank
  to tie the lm_head), or when its class builds it there for the drafter
  (``spec_decode_needs_target_embed``, model_executor/models/utils.py:863-883 in 0.33.0:
  for an eagle, eagle3, dflash or dspark drafter at PP > 1 on the last rank; called by
  ``LlamaModel``, llama.py:377-381, and so ``MistralModel``, ``Llama4Model``,
  ``Glm4Model``; ``Qwen2Model``, qwen2.py:366-370, and so ``Qwen3Model``;
  ``DeepseekV4Model``, models/deepseek_v4/nvidia/model.py:854; ``KimiLinearModel``, which
  Kimi K3 and Kimi-Linear run, models/kimi_k3/nvidia/model.py:969; ``MiniMaxM3Model``,
  models/minimax_m3/nvidia/model.py:814: :data:`TARGET_BUILDS`), else a
  ``PPMissingLayer``. Without one and without its own, vLLM raises ``RuntimeError``:
  :func:`missing_embedding_refusal`. An embedding built only for the drafter is weight
  memory on each last-stage rank that kvbudget's weights do not hold either: the same
  warning says how much.

A draft-target model is loaded whole by its own speculator (``standalone_ar``) and
counted whole; a release that refuses drafters under PP (0.29.0) never gets here.

vLLM 0.34.0 keeps those target classes (``spec_decode_needs_target_embed`` asks the
speculator instead of the method: a hidden-state drafter whose class declares
``has_own_embed_tokens``, ``ModelInfo.may_use_target_embed``, models/registry.py:1023;
model_executor/models/utils.py:934-947 in 0.34.0) and gives two MTP classes the
attribute at class level (:attr:`PpEmbedding.mtp_shares`): DeepSeek-V4's
(``has_own_embed_tokens = False``, ``models/deepseek_v4/nvidia/mtp.py:300-302``: "The
checkpoint has no MTP embedding, so always reuse the target's"), whose target then
builds its embedding on the last rank (``DeepseekV4Model``, model.py:866) for the MTP
layers to share instead of keeping one, and MiniMax-M3's (``has_own_embed_tokens =
False``, mtp.py:143-154, set True at PP > 1 as in 0.33.0, shared by the same
``torch.equal``). The last stage holds one embedding in every case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kvbudget.architectures import ties_embeddings
from kvbudget.model_spec import ModelSpec
from kvbudget.units import format_bytes
from kvbudget.weights import weights_bytes

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

HEAD_SPECS = frozenset({"eagle", "eagle3", "dflash"})
# what the drafter's embed_tokens is once loaded: the target's, its own, or (vLLM
# raises) none to be had
DraftEmbedding = Literal["shared", "kept", "missing"]


@dataclass(frozen=True, kw_only=True)
class PpEmbedding:
    """Where a release's drafter finds an input embedding under PP > 1 (module docstring).

    * ``target_builds``: target model types whose vLLM class builds ``embed_tokens`` on the
      last PP rank for an EAGLE, EAGLE3, DFlash or DSpark drafter
      (``spec_decode_needs_target_embed``: :data:`TARGET_BUILDS` in 0.33.0 and 0.34.0).
    * ``mtp_shares``: target model types whose target class builds its embedding on the
      last rank for its MTP drafter, which then reuses it (module docstring: 0.33.0
      MiniMax-M3, :data:`MTP_SHARES`; 0.34.0 DeepSeek-V4 and MiniMax-M3).
    """

    target_builds: frozenset[str] = frozenset()
    mtp_shares: frozenset[str] = frozenset()


# the target model types whose class calls spec_decode_needs_target_embed (module
# docstring; the same classes in the 0.33.0 and 0.34.0 wheels): LlamaModel (llama,
# mistral, llama4 and glm4 subclass it), Qwen2Model (qwen2; qwen3 subclasses it),
# DeepseekV4Model, KimiLinearModel (kimi_k3, kimi_linear), MiniMaxM3Model
TARGET_BUILDS = frozenset(
    {
        "llama",
        "mistral",
        "llama4",
        "glm4",
        "qwen2",
        "qwen3",
        "deepseek_v4",
        "kimi_k3",
        "kimi_linear",
        "minimax_m3_vl",
        "minimax_m3_text",
    }
)

# vLLM 0.33.0's MiniMax-M3, whose MiniMaxM3Model builds embed_tokens on the last rank for
# its MTP drafter (include_mtp=use_v2_model_runner, models/minimax_m3/nvidia/model.py:
# 814-816) and whose MTP copy, equal to it, maybe_share_target_embed drops (module
# docstring)
MTP_SHARES = frozenset({"minimax_m3_vl", "minimax_m3_text"})

# vLLM 0.33.0: those targets build an embedding for a head or DSpark drafter, and
# MiniMax-M3's for its MTP drafter; every other MTP class kvbudget plans keeps its own
PP_EMBEDDING = PpEmbedding(target_builds=TARGET_BUILDS, mtp_shares=MTP_SHARES)


def _target_has_embedding(d: Deployment, rule: PpEmbedding) -> bool:
    """Whether the target holds an ``embed_tokens`` on the last of PP > 1 stages: tied, or
    built there for the drafter (``rule.target_builds``)."""
    return ties_embeddings(d.target) or d.target.model_type in rule.target_builds


def stores_embedding(model: ModelSpec) -> bool:
    """Whether ``model``'s checkpoint stores an ``embed_tokens`` tensor (False when no
    safetensors headers were read: the published heads kvbudget ships store none)."""
    checkpoint = model.checkpoint
    return checkpoint is not None and any("embed_tokens" in t.name for t in checkpoint.tensors)


def draft_embedding(d: Deployment, rule: PpEmbedding = PP_EMBEDDING) -> DraftEmbedding | None:
    """What ``maybe_share_target_embed`` makes of the drafter's embedding (module
    docstring) under the release's ``rule``; None without an EAGLE, EAGLE3, DFlash, DSpark
    or MTP drafter. A head that stores its own is ``kept`` (vLLM shares it only when its
    values equal the target's, which a plan cannot see)."""
    spec = d.spec.name
    if d.parallel.pp > 1 and spec == "mtp" and d.target.model_type not in rule.mtp_shares:
        return "kept"
    if spec == "mtp" or spec == "dspark":  # the target's checkpoint: no embedding of its own
        return "shared" if d.parallel.pp == 1 or _target_has_embedding(d, rule) else "missing"
    if spec not in HEAD_SPECS or d.draft is None:
        return None
    if stores_embedding(d.draft):
        return "kept"
    if d.parallel.pp == 1 or _target_has_embedding(d, rule):
        return "shared"
    return "missing"


def missing_embedding_refusal(
    d: Deployment, version: str, rule: PpEmbedding = PP_EMBEDDING
) -> str | None:
    """vLLM's start-up refusal of a head under PP > 1 with no embedding on the last stage
    (module docstring); None when the head finds one."""
    if draft_embedding(d, rule) != "missing":
        return None
    drafter = (
        f"{d.draft.name}'s model class"
        if d.draft is not None
        else f"the {'MTP' if d.spec.name == 'mtp' else 'DSpark'} drafter"
    )
    return (
        f"vLLM {version} would refuse to start: RuntimeError: {drafter} needs the target "
        "input embedding, but it is unavailable on this PP stage (the last of "
        f"--pipeline-parallel-size {d.parallel.pp}, where {d.target.name} keeps no "
        "embed_tokens: it does not tie them; the drafter stores none of its own): use --pp 1"
        + (", or a draft checkpoint that stores its own embed_tokens" if d.draft else "")
    )


def built_for_drafter(d: Deployment, rule: PpEmbedding = PP_EMBEDDING) -> bool:
    """Whether an untied target builds its embedding on the last of PP > 1 stages only for
    its drafter, which then shares it (``rule.target_builds``)."""
    return (
        d.parallel.pp > 1
        and draft_embedding(d, rule) == "shared"
        and not ties_embeddings(d.target)
        and d.target.model_type in rule.target_builds
    )


def kept_embedding_bytes(d: Deployment, rule: PpEmbedding = PP_EMBEDDING) -> int:
    """Bytes per last-stage rank of the embedding an MTP drafter keeps, or an untied target
    builds for its drafter, under PP > 1 (module docstring): the target's embedding on
    one rank; 0 where there is none."""
    kept = d.spec.name == "mtp" and draft_embedding(d, rule) == "kept"
    if not kept and not built_for_drafter(d, rule):
        return 0
    layout = d.parallel
    return weights_bytes(
        d.target,
        tp=layout.tp,
        pp=layout.pp,
        pp_stage=0,
        ep=layout.ep,
        attention_tp=layout.attention_tp,
    ).embeddings_bytes


def kept_embedding_warnings(d: Deployment, rule: PpEmbedding = PP_EMBEDDING) -> list[str]:
    """A warning with the bytes of the embedding an MTP drafter keeps, or the target builds
    for its drafter, under PP > 1, which the plan's weights do not hold (none with
    ``--weights-bytes``: the user's figure)."""
    extra = kept_embedding_bytes(d, rule)
    if not extra or d.weights_override is not None:
        return []
    if built_for_drafter(d, rule):
        return [
            f"vLLM builds {d.target.name}'s embed_tokens on the last of --pp "
            f"{d.parallel.pp} stages too, for the drafter to share "
            f"(spec_decode_needs_target_embed): {format_bytes(extra)} ({extra:,} B) more "
            "weights per last-stage rank than the plan counts; leave that much GPU memory "
            "free beyond --kv-budget, or use --pp 1"
        ]
    return [
        f"vLLM keeps the MTP drafter's own embed_tokens on the last of --pp "
        f"{d.parallel.pp} stages (it shares the target's only at PP 1: "
        f"maybe_share_target_embed): {format_bytes(extra)} ({extra:,} B) more weights per "
        "last-stage rank than the plan counts; leave that much GPU memory free beyond "
        "--kv-budget, or use --pp 1"
    ]


__all__ = [
    "HEAD_SPECS",
    "MTP_SHARES",
    "PP_EMBEDDING",
    "TARGET_BUILDS",
    "DraftEmbedding",
    "PpEmbedding",
    "built_for_drafter",
    "draft_embedding",
    "kept_embedding_bytes",
    "kept_embedding_warnings",
    "missing_embedding_refusal",
    "stores_embedding",
]
