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
  ``models/kimi_k3/nvidia/mtp.py``); ``MiniMaxM3MTP`` sets the attribute True at PP > 1
  (unless ``load_format`` is ``dummy``) and keeps it too. That embedding is weight
  memory on each last-stage rank that kvbudget's weights do not hold:
  :func:`kept_embedding_warnings` says how much.
* At PP > 1 an EAGLE, EAGLE3 or DFlash head (``SupportsEagleBase``:
  ``has_own_embed_tokens`` False unless its checkpoint stores an ``embed_tokens``
  tensor, ``model_executor/models/utils.py`` ``process_eagle_weight``), and
  DeepSeek-V4.1's DSpark drafter (``models/deepseek_v41/nvidia/dspark.py``:
  ``has_own_embed_tokens = False``, its embedding "aliased from the target"; loaded
  through ``dspark/utils.py``), look for the target's embedding on the last stage, which
  a target has there only when it ties it (its ``embed_tokens`` is built on the last
  rank to tie the lm_head, else a ``PPMissingLayer``). Without it and without its own,
  vLLM raises ``RuntimeError``: :func:`missing_embedding_refusal`.

A draft-target model is loaded whole by its own speculator (``standalone_ar``) and
counted whole; a release that refuses drafters under PP (0.29.0) never gets here.
"""

from __future__ import annotations

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


def stores_embedding(model: ModelSpec) -> bool:
    """Whether ``model``'s checkpoint stores an ``embed_tokens`` tensor (False when no
    safetensors headers were read: the published heads kvbudget ships store none)."""
    checkpoint = model.checkpoint
    return checkpoint is not None and any("embed_tokens" in t.name for t in checkpoint.tensors)


def draft_embedding(d: Deployment) -> DraftEmbedding | None:
    """What ``maybe_share_target_embed`` makes of the drafter's embedding (module
    docstring); None without an EAGLE, EAGLE3, DFlash, DSpark or MTP drafter. A head that stores
    its own is ``kept`` (vLLM shares it only when its values equal the target's, which
    a plan cannot see)."""
    spec = d.spec.name
    if spec == "mtp":
        return "shared" if d.parallel.pp == 1 else "kept"
    if spec == "dspark":  # the target's own checkpoint, whose embedding it never loads
        return "shared" if d.parallel.pp == 1 or ties_embeddings(d.target) else "missing"
    if spec not in HEAD_SPECS or d.draft is None:
        return None
    if stores_embedding(d.draft):
        return "kept"
    if d.parallel.pp == 1 or ties_embeddings(d.target):
        return "shared"
    return "missing"


def missing_embedding_refusal(d: Deployment, version: str) -> str | None:
    """vLLM's start-up refusal of a head under PP > 1 with no embedding on the last stage
    (module docstring); None when the head finds one."""
    if draft_embedding(d) != "missing":
        return None
    drafter = f"{d.draft.name}'s model class" if d.draft is not None else "the DSpark drafter"
    return (
        f"vLLM {version} would refuse to start: RuntimeError: {drafter} needs the target "
        "input embedding, but it is unavailable on this PP stage (the last of "
        f"--pipeline-parallel-size {d.parallel.pp}, where {d.target.name} keeps no "
        "embed_tokens: it does not tie them; the drafter stores none of its own): use --pp 1"
        + (", or a draft checkpoint that stores its own embed_tokens" if d.draft else "")
    )


def kept_embedding_bytes(d: Deployment) -> int:
    """Bytes per last-stage rank of the embedding an MTP drafter keeps under PP > 1
    (module docstring): the target's embedding on one rank; 0 where none is kept."""
    if d.spec.name != "mtp" or draft_embedding(d) != "kept":
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


def kept_embedding_warnings(d: Deployment) -> list[str]:
    """A warning with the bytes of the embedding an MTP drafter keeps under PP > 1, which
    the plan's weights do not hold (none with ``--weights-bytes``: the user's figure)."""
    extra = kept_embedding_bytes(d)
    if not extra or d.weights_override is not None:
        return []
    return [
        f"vLLM keeps the MTP drafter's own embed_tokens on the last of --pp "
        f"{d.parallel.pp} stages (it shares the target's only at PP 1: "
        f"maybe_share_target_embed): {format_bytes(extra)} ({extra:,} B) more weights per "
        "last-stage rank than the plan counts; leave that much GPU memory free beyond "
        "--kv-budget, or use --pp 1"
    ]


__all__ = [
    "HEAD_SPECS",
    "DraftEmbedding",
    "draft_embedding",
    "kept_embedding_bytes",
    "kept_embedding_warnings",
    "missing_embedding_refusal",
    "stores_embedding",
]
