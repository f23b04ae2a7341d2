#!/usr/bin/env python3
"""Fidelity harness: kvbudget's vLLM prediction against vLLM's own KV sizing code.

One harness for vLLM 0.33.0 and 0.29.0. Run it with the venv that ``setup_vllm_venv.sh``
builds for the release (CPU torch, vLLM without its GPU dependencies, kvbudget from this
checkout)::

    /work/vllm-venv/bin/python benchmarks/fidelity/vllm_fidelity.py [--cases quick|all]
        [--json out.json] [--tsv out.tsv] [--match TEXT] [--engine NAME@VERSION]
        [--verbose]

kvbudget's engine model defaults to ``vllm@<the installed vLLM's version>``. Where the two
releases' APIs differ, one small adapter per difference picks the code path by feature
detection (a module, function, attribute or parameter one release has and the other
lacks), never by version number; each names the file:line in both releases (the section
"vLLM release adapters" below).

For every case the vLLM side is computed by vLLM's own code, imported, never copied:

1. A real ``VllmConfig`` is built from the kvbudget preset's ``config.json`` (written to a
   temporary directory; no download): ``ModelConfig``, ``CacheConfig``,
   ``ParallelConfig``, ``SchedulerConfig`` and ``SpeculativeConfig`` as ``vllm serve``
   would build them from the flags listed in the case. ``VllmConfig.__post_init__`` runs
   vLLM's per-architecture hooks (hybrid models: ``mamba_cache_mode``,
   ``mamba_block_size``; Nemotron-H: float32 SSM state).
2. One worker per PP stage (all TP ranks of a stage build the same layers): the
   cache-owning layers the stage owns are put into its ``static_forward_context`` as
   vLLM's own layer classes (``Attention``, ``MLAAttention``, ``MambaMixer2``,
   ``QwenGatedDeltaNetAttention``) with the attributes their ``__init__`` sets for this
   model on one TP rank (the modules are not constructed: that needs a GPU and the
   weights). A stage owns the target layers of vLLM's ``get_pp_indices`` split; the
   draft's layers (EAGLE3 head, MTP layers, draft model) live on the last stage.
   ``Platform.update_block_size_for_backend`` (the hybrid block-size override and Mamba
   page padding) and the V2 model runner's ``get_kv_cache_spec`` then run on the
   stage's own config (the engine core's, or a copy of it per worker process with more
   than one rank).
3. The engine core's ``resolve_kv_cache_layout``, ``get_global_kv_cache_groups`` (0.33.0;
   0.29.0's ``get_kv_cache_configs`` groups the layers itself), ``get_kv_cache_configs``
   (one spec dict per worker, rank order PP x TP), ``generate_scheduler_kv_cache_config``
   (worker 0's config) and ``update_kv_cache_capacity`` run as
   ``EngineCore._initialize_kv_caches`` calls them (vllm/v1/engine/core.py:252-352), with
   ``available_memory`` = ``--kv-cache-memory-bytes`` on every worker.

Stand-ins, for what a CPU-only process cannot ask vLLM (each one documented where used):

* the attention backend each layer gets on an H100/H200 (SM90) is chosen by the rule of
  vLLM's CUDA priority list (``_get_backend_priorities``, vllm/platforms/cuda.py:84-181),
  since vLLM's selector needs a CUDA device; the backend classes are vLLM's own
  (``_attention_backend``);
* ``support_hybrid_kv_cache()`` answers True during ``VllmConfig`` construction, as
  ``CudaPlatform`` does (``build_vllm_config``);
* Triton counts as installed where ``VllmConfig`` picks the model runner, as on an
  H100/H200 (``_model_runner_as_on_cuda``; matters in 0.29.0 only);
* ``MambaMixer2.get_state_shape`` is bound to ``NemotronHForCausalLM``'s own
  ``get_mamba_state_shape_from_config`` (the layer's asks torch.distributed for the TP
  size; ``_mamba2_layer``);
* Gemma-3 (a multimodal ``Gemma3ForConditionalGeneration``) is built from its
  ``text_config`` as ``Gemma3ForCausalLM``, because inspecting the multimodal class needs
  torchvision; its vision tower caches nothing, so the KV cache is the same (Gemma-4's
  ``Gemma4ForConditionalGeneration`` likewise, as ``Gemma4ForCausalLM``).
* MiniMax-M3 (``vllm.models.minimax_m3``, text and vision-language classes in one
  module) imports its image processor, which imports ``torchvision.transforms
  .InterpolationMode``; this venv has no torchvision, so while its ``ModelConfig`` is
  built the module sees a stand-in enum there, and vLLM's model-class inspection runs
  in this process instead of a fresh one (which would not see it;
  ``_minimax_m3_inspection``). Neither touches the KV sizing.

Families without a preset (Gemma-4, DeepSeek-V4, DFlash drafts, deeper MTP stacks) run
from configs the harness writes (``FAMILY_CONFIGS`` from tests/family_configs.py, which the tests
read too, and ``FAMILY_DERIVED``; ids ``family/...``), which
kvbudget reads from a local folder and vLLM through ``ModelConfig``.

The kvbudget side is ``kvbudget.plan(..., engine="vllm@<version>", ...)``; its
``to_dict()["engine"]["detail"]`` (schema 3) is compared field by field (``max_concurrency``
rounded to 2 decimals, ``kv_cache_groups`` as a multiset of (kind, layers,
padding_layers, page_bytes, block_size), plus draft_layers / sliding_window when kvbudget
reports them; the groups of the whole model, ``get_global_kv_cache_groups``, whose layer
counts span every PP stage). A kvbudget ``InfeasibleBudgetError`` counts as a predicted
refusal. vLLM's refusals are its start-up check (not one request of max_model_len fits)
and, in 0.29.0, its refusal of a drafter under PP (the draft model lacks ``SupportsPP``);
any other configuration vLLM rejects is a skipped case. When kvbudget cannot answer
otherwise (an older kvbudget without the engine keywords, or any other kvbudget error) the
line says ``kvbudget: n/a (...)`` and the vLLM side is still reported.

Exit status: 1 if any case differs or the harness itself failed on a case, else 0.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import functools
import inspect
import io
import json
import logging
import os
import sys
import tempfile
import textwrap
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

# vLLM reads its environment at import time: keep its INFO chatter out of the report.
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parents[2]

GiB = 1 << 30
BUDGETS = (8 * GiB, 40 * GiB)
KV_DTYPES = ("bf16", "fp8")
TPS = (1, 8)
PPS = (2, 4)  # pipeline-parallel cases (--pipeline-parallel-size); every other case is PP 1
BLOCK_SIZE = 16
MAX_MODEL_LEN_CAP = 32768
MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 8192
NUM_SPECULATIVE_TOKENS = 3
NGRAM_PROMPT_LOOKUP = 5  # vLLM's default for both ngram window fields
DRAFT_TARGET_DRAFT = "meta-llama/Llama-3.2-1B-Instruct"
MAMBA_TYPES = ("nemotron_h", "qwen3_next", "kimi_linear", "kimi_k3")

# kvbudget spec names -> vLLM --speculative-config "method"
VLLM_METHOD = {
    "ngram": "ngram",
    "eagle3": "eagle3",
    "eagle": "eagle",
    "mtp": "mtp",
    "draft-target": "draft_model",
    "dflash": "dflash",
    "dspark": "dspark",
}
# EAGLE-1 head cases: the head preset, next to a Llama-3 target and (to exercise vLLM's
# hybrid manager turned off for chunked local attention + eagle) Llama-4 Scout
EAGLE_HEAD = "yuhuili/EAGLE-LLaMA3-Instruct-8B"
EAGLE_TARGETS = ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-4-Scout-17B-16E-Instruct")


# --------------------------------------------------------------------------- family configs

# Families without a verbatim Hub config in this project (no preset): the configs the
# tests read too (tests/family_configs.py, plain dicts), each named ``family/<what it
# exercises>``, both sides reading the same file.
sys.path.insert(0, str(REPO / "tests"))
from family_configs import FAMILY_CONFIGS  # noqa: E402

DFLASH_TARGETS = {name: "Qwen/Qwen3-8B" for name in FAMILY_CONFIGS if "dflash" in name}
FAMILY_EAGLE3 = {
    "family/gemma4-defaults": "family/gemma4-eagle3-head",
    "family/minimax-m3-defaults": "family/minimax-m3-eagle3-head",
}
FAMILY_MTP_DRAFTS = {"family/gemma4-defaults": "family/gemma4-assistant"}
# Multi-layer MTP: presets with more MTP layers than they ship (vLLM builds every one,
# each its own KV layer: deepseek_mtp.py num_mtp_layers = num_nextn_predict_layers,
# glm4_moe_mtp.py the same); (preset, fields overridden)
FAMILY_DERIVED: dict[str, tuple[str, dict[str, Any]]] = {
    "family/deepseek-v3-mtp3": ("deepseek-ai/DeepSeek-V3", {"num_nextn_predict_layers": 3}),
    "family/glm-4.5-air-mtp2": ("zai-org/GLM-4.5-Air", {"num_nextn_predict_layers": 2}),
}


def _is_family(name: str | None) -> bool:
    return name in FAMILY_CONFIGS or name in FAMILY_DERIVED


# KV dtypes a family's cases run: kvbudget's vLLM model refuses fp8 for Gemma-4 (its
# 512-wide layers run FlashAttention 4's 64-token fp8 pages on SM90, engines/vllm.py check)
FAMILY_KV_DTYPES = {"gemma4": ("bf16",)}


def _config_of(name: str) -> dict[str, Any]:
    """The config.json of a preset or a family config."""
    if name in FAMILY_CONFIGS:
        return copy.deepcopy(FAMILY_CONFIGS[name])
    if name in FAMILY_DERIVED:
        base, fields = FAMILY_DERIVED[name]
        return {**_config_of(base), **fields}
    from importlib import resources

    file_name = name.replace("/", "--", 1) + ".json"
    return json.loads(
        (resources.files("kvbudget") / "data" / "models" / file_name).read_text("utf-8")
    )


def _kv_dtypes(model: Any) -> tuple[str, ...]:
    family = model.model_type.removesuffix("_text")
    return FAMILY_KV_DTYPES.get(family, KV_DTYPES)


# --block-size a family's cases run: DeepSeek-V4's compressed-latent and indexer backends
# take 256-token blocks only (models/deepseek_v4/sparse_mla.py, backends/mla/indexer.py
# get_supported_kernel_block_sizes); with --block-size 16 a compressed page holds
# 16 // 128 = 0 states and vLLM's planning divides by zero. kvbudget's plan says
# --block-size 256 for it.
# MiniMax-M3's sparse and indexer backends take 128-token blocks only (one sparse block a
# page: models/minimax_m3/common/sparse_attention.py, common/indexer.py
# get_supported_kernel_block_sizes); kvbudget's plan says --block-size 128 for it.
FAMILY_BLOCK_SIZES = {
    "deepseek_v4": 256,
    "deepseek_v41": 64,
    "minimax_m3_vl": 128,
    "minimax_m3_text": 128,
}


def _block_size(model: Any) -> int:
    return FAMILY_BLOCK_SIZES.get(model.model_type, BLOCK_SIZE)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One deployment: what ``vllm serve`` would be started with."""

    target: str
    spec: str  # none | ngram | eagle3 | mtp | draft-target (kvbudget names)
    draft: str | None  # preset id of the draft (EAGLE3 head / small model), or None
    kv_budget: int  # --kv-cache-memory-bytes
    tp: int
    kv_dtype: str  # bf16 (vLLM "auto") | fp8
    max_model_len: int
    block_size: int = BLOCK_SIZE
    max_num_seqs: int = MAX_NUM_SEQS
    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS
    # True: vllm serve's default (no flag: on unless the release cannot schedule this
    # deployment asynchronously); False: --no-async-scheduling
    async_scheduling: bool = True
    enable_prefix_caching: bool = True
    num_speculative_tokens: int = NUM_SPECULATIVE_TOKENS
    pp: int = 1  # --pipeline-parallel-size
    # kvbudget --state-dtype; vLLM --mamba-cache-dtype and --mamba-ssm-cache-dtype
    # (STATE_DTYPES), as kvbudget's plan emits them (Kimi K3, Mamba2, Gated DeltaNet)
    state_dtype: str = "auto"

    @property
    def id(self) -> str:
        gib = self.kv_budget / GiB
        budget = f"{gib:g}GiB" if gib == int(gib) else f"{self.kv_budget}B"
        pc = "" if self.enable_prefix_caching else " no-prefix-cache"
        pp = f" pp{self.pp}" if self.pp > 1 else ""
        spec = f"dflash({self.draft})" if self.spec == "dflash" else self.spec
        if self.num_speculative_tokens != NUM_SPECULATIVE_TOKENS:
            spec += f" k{self.num_speculative_tokens}"
        return (
            f"{self.target} {spec} {budget} tp{self.tp}{pp} {self.kv_dtype} "
            f"len{self.max_model_len}{pc}"
            + (f" state-{self.state_dtype}" if self.state_dtype != "auto" else "")
        )

    @property
    def vllm_flags(self) -> str:
        flags = [
            f"--tensor-parallel-size {self.tp}",
            *([f"--pipeline-parallel-size {self.pp}"] if self.pp > 1 else []),
            f"--kv-cache-memory-bytes {self.kv_budget}",
            f"--kv-cache-dtype {'auto' if self.kv_dtype == 'bf16' else self.kv_dtype}",
            f"--block-size {self.block_size}",
            f"--max-model-len {self.max_model_len}",
            f"--max-num-seqs {self.max_num_seqs}",
            f"--max-num-batched-tokens {self.max_num_batched_tokens}",
            *([] if self.async_scheduling else ["--no-async-scheduling"]),
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching",
        ]
        if self.state_dtype != "auto":
            name = STATE_DTYPES[self.state_dtype]
            flags += [f"--mamba-cache-dtype {name}", f"--mamba-ssm-cache-dtype {name}"]
        if self.spec != "none":
            cfg: dict[str, Any] = {
                "method": VLLM_METHOD[self.spec],
                "num_speculative_tokens": self.num_speculative_tokens,
            }
            if self.draft:
                cfg["model"] = self.draft
            flags.append(f"--speculative-config '{json.dumps(cfg)}'")
        return " ".join(flags)


def _kvbudget():
    try:
        import kvbudget
    except ImportError:  # not installed in this venv: use the checkout
        sys.path.insert(0, str(REPO / "src"))
        import kvbudget
    return kvbudget


def _presets() -> dict[str, Any]:
    kb = _kvbudget()
    from kvbudget.model import list_presets

    models = {name: kb.load_model(name) for name in list_presets()}
    families = [*FAMILY_CONFIGS, *FAMILY_DERIVED]
    models.update({name: kb.load_model(str(_model_file(name))) for name in families})
    return models


def _eagle3_drafts() -> dict[str, str]:
    from kvbudget.planner import EAGLE3_DRAFTS

    return {**EAGLE3_DRAFTS, **FAMILY_EAGLE3}


def _max_model_len(model: Any) -> int:
    return min(MAX_MODEL_LEN_CAP, model.max_position_embeddings)


def _draft_for(target: str, spec: str, drafts: dict[str, str]) -> str | None:
    if spec == "eagle3":
        return drafts[target]
    if spec == "eagle":
        return EAGLE_HEAD
    if spec == "draft-target":
        return DRAFT_TARGET_DRAFT
    if spec == "mtp":
        return FAMILY_MTP_DRAFTS.get(target)
    return None


def _specs_for(name: str, model: Any, drafts: dict[str, str]) -> list[str]:
    specs = ["none", "ngram"]
    if name in drafts:
        specs.append("eagle3")
    if name in EAGLE_TARGETS:
        specs.append("eagle")
    if model.mtp_layers or name in FAMILY_MTP_DRAFTS:
        # DeepSeek-V4.1's mtp.* layers are DSpark stages (vLLM refuses method mtp for it)
        specs.append("dspark" if model.model_type == "deepseek_v41" else "mtp")
    if model.model_type == "llama" and name != DRAFT_TARGET_DRAFT:
        specs.append("draft-target")
    return specs


def all_cases() -> list[Case]:
    """Every preset target x applicable spec x budget x tp x kv dtype (+ Mamba no-prefix),
    then the pipeline-parallel cases (``pp_cases``)."""
    presets = _presets()
    drafts = _eagle3_drafts()
    cases: list[Case] = []
    for name, model in presets.items():
        if model.is_head or name in FAMILY_MTP_DRAFTS.values():  # drafts, not targets
            continue
        length = _max_model_len(model)
        block = _block_size(model)
        for spec in _specs_for(name, model, drafts):
            draft = _draft_for(name, spec, drafts)
            for budget in BUDGETS:
                for tp in TPS:
                    for dtype in _kv_dtypes(model):
                        cases.append(Case(name, spec, draft, budget, tp, dtype, length, block))
            if model.model_type in MAMBA_TYPES:
                # prefix caching off: mamba_cache_mode "none" (one state + K per request)
                for tp in TPS:
                    cases.append(
                        Case(name, spec, draft, 40 * GiB, tp, "bf16", length,
                             enable_prefix_caching=False)
                    )  # fmt: skip
    return (
        cases
        + pp_cases(presets, drafts)
        + dflash_cases(presets)
        + mtp_depth_cases(presets)
        + dsv41_cases(presets)
        + family_extra_cases(presets)
        + state_dtype_cases(presets)
    )


# target, spec, budget GiB, tp, kv dtype: family cases beyond the sweep
_FAMILY_EXTRA = (
    # MiniMax-M3: 4 GiB holds 244 blocks of 17,596,416 B, fewer than one request's 256
    # and the null block (refused); TP 2 and 4 (its 4 KV heads split, the index key not)
    ("family/minimax-m3-defaults", "none", 4, 1, "bf16"),
    ("family/minimax-m3-defaults", "none", 40, 2, "bf16"),
    ("family/minimax-m3-defaults", "ngram", 40, 4, "fp8"),
)


def family_extra_cases(presets: dict[str, Any]) -> list[Case]:
    """``_FAMILY_EXTRA``, at each family's block size and max_model_len."""
    return [
        Case(name, spec, None, gib * GiB, tp, dtype, _max_model_len(presets[name]),
             _block_size(presets[name]))
        for name, spec, gib, tp, dtype in _FAMILY_EXTRA
    ]  # fmt: skip


STATE_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp32": "float32"}
# Kimi K3 with its KDA state in bf16 (KimiK3DeltaAttention.get_state_dtype reads
# --mamba-ssm-cache-dtype; kvbudget's plan emits it for --state-dtype): target, spec, tp
_STATE_DTYPE_EXTRA = (
    ("family/kimi-k3", "none", 1),
    ("family/kimi-k3", "mtp", 8),
    ("family/kimi-k3-unbounded-gate", "ngram", 1),
)
# Mamba2 and Gated DeltaNet states in another dtype than the model's (kvbudget emits both
# flags for --state-dtype): target, spec, tp, state dtype
_STATE_DTYPE_HYBRIDS = (
    ("nvidia/Nemotron-H-8B-Base-8K", "none", 1, "fp32"),
    ("nvidia/Nemotron-H-8B-Base-8K", "ngram", 1, "bf16"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "none", 1, "fp32"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "mtp", 8, "fp32"),
)


def state_dtype_cases(presets: dict[str, Any]) -> list[Case]:
    """``_STATE_DTYPE_EXTRA`` at 40 GiB, bf16 KV, ``--state-dtype bf16``; the
    ``_STATE_DTYPE_HYBRIDS`` at theirs."""
    return [
        Case(name, spec, None, 40 * GiB, tp, "bf16", _max_model_len(presets[name]),
             state_dtype="bf16")
        for name, spec, tp in _STATE_DTYPE_EXTRA
    ] + [
        Case(name, spec, None, 40 * GiB, tp, "bf16", _max_model_len(presets[name]),
             state_dtype=state)
        for name, spec, tp, state in _STATE_DTYPE_HYBRIDS
    ]  # fmt: skip


# Step-3.5's three MTP layers driven with fewer and more draft tokens than layers: K=1
# uses one module (no trailing re-prefill: extra_retained_tokens 0), K=6 reuses each twice;
# MiniMax-M3's one MTP module run once and five times (MiniMaxM3MultiTokenPredictor: step
# k on module k % num_mtp_modules), its two-module variant at K=2 and K=4 (the sweep's
# K=3 vLLM refuses: not a multiple of n_predict=2)
_MTP_K = (
    ("family/step3p5-hybrid", 1),
    ("family/step3p5-hybrid", 6),
    ("family/minimax-m3-defaults", 1),
    ("family/minimax-m3-defaults", 5),
    ("family/minimax-m3-mtp2", 2),
    ("family/minimax-m3-mtp2", 4),
)
# DeepSeek-V4.1's compressor rings hold max(8, a power of two >= K + 2) rows
# (compressor.py CompressorStateCache): ngram at K = 6 (8 rows, as K = 3) and K = 7 (16)
_DSV41_NGRAM_K = (6, 7)
# its DSpark stages beside the sweep's K = 3: K = 1, 7, 16 (rings of 8, 16 and 32 rows)
_DSV41_DSPARK_K = (1, 7, 16)


def dsv41_cases(presets: dict[str, Any]) -> list[Case]:
    """DeepSeek-V4.1 ngram at the K of ``_DSV41_NGRAM_K`` (40 GiB, TP 1 and 8), and without
    prefix caching or async scheduling (the bounded-replay windows stay out of prefix
    caching either way: ``swa_bounded_replay`` needs Model Runner V2 only); its DSpark
    stages (``family/deepseek-v41-dspark``; the sweep and the PP cases run them at the
    default K = 3) at the K of ``_DSV41_DSPARK_K`` (budgets x TP) and without prefix
    caching."""
    name = "family/deepseek-v41-defaults"
    length, block = _max_model_len(presets[name]), _block_size(presets[name])
    at_40 = functools.partial(Case, name, kv_budget=40 * GiB, kv_dtype="bf16",
                              max_model_len=length, block_size=block)  # fmt: skip
    dspark = functools.partial(Case, "family/deepseek-v41-dspark", "dspark", None,
                               kv_dtype="bf16", max_model_len=length,
                               block_size=block)  # fmt: skip
    return [
        *(at_40(spec="ngram", draft=None, tp=tp, num_speculative_tokens=k)
          for k in _DSV41_NGRAM_K for tp in TPS),
        at_40(spec="none", draft=None, tp=1, enable_prefix_caching=False),
        at_40(spec="none", draft=None, tp=1, async_scheduling=False),
        *(dspark(kv_budget=budget, tp=tp, num_speculative_tokens=k)
          for k in _DSV41_DSPARK_K for budget in BUDGETS for tp in TPS),
        dspark(kv_budget=40 * GiB, tp=1, enable_prefix_caching=False),
    ]  # fmt: skip


def mtp_depth_cases(presets: dict[str, Any]) -> list[Case]:
    """Multi-layer MTP with num_speculative_tokens a multiple of the layers (vLLM refuses
    the others, and so does kvbudget): 1x and 2x the depth, TP 1 and 8; Step-3.5 at
    K = 1 and 6, MiniMax-M3 at K = 1 and 5, its two-module variant at 2 and 4
    (``_MTP_K``)."""
    cases = [
        Case(name, "mtp", None, 40 * GiB, tp, "bf16", _max_model_len(presets[name]),
             _block_size(presets[name]), num_speculative_tokens=k)
        for name, k in _MTP_K
        for tp in TPS
    ]  # fmt: skip
    for name in FAMILY_DERIVED:
        model = presets[name]
        depth = len(model.mtp_layers)
        for k in (depth, 2 * depth):
            for tp in TPS:
                cases.append(
                    Case(name, "mtp", None, 40 * GiB, tp, "bf16", _max_model_len(model),
                         num_speculative_tokens=k)
                )  # fmt: skip
    return cases


def dflash_cases(presets: dict[str, Any]) -> list[Case]:
    """Each DFlash draft with its target: budgets x TP x KV dtype, and PP 2."""
    cases = []
    for draft, target in DFLASH_TARGETS.items():
        length = _max_model_len(presets[target])
        for budget in BUDGETS:
            for tp in TPS:
                for dtype in KV_DTYPES:
                    cases.append(Case(target, "dflash", draft, budget, tp, dtype, length))
        cases.append(Case(target, "dflash", draft, 40 * GiB, 1, "bf16", length, pp=2))
    return cases


# target, spec, budget GiB, tp, pp, kv dtype, prefix caching: PP cases beyond the sweep
_PP_EXTRA = (
    # TP 8 x PP 2: a model of each layer kind
    ("openai/gpt-oss-120b", "eagle3", 40, 8, 2, "bf16", True),
    ("google/gemma-3-27b-it", "none", 40, 8, 2, "bf16", True),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "mtp", 40, 8, 2, "bf16", True),
    ("nvidia/Nemotron-H-8B-Base-8K", "none", 40, 8, 2, "bf16", True),
    ("deepseek-ai/DeepSeek-V3", "mtp", 40, 8, 2, "bf16", True),
    # Mamba models without prefix caching (mamba_cache_mode "none")
    ("nvidia/Nemotron-H-8B-Base-8K", "ngram", 40, 1, 2, "bf16", False),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "mtp", 40, 1, 2, "bf16", False),
    # the per-stage start-up check: 405B fits at PP 2 where PP 1 is refused, but not
    # with the 1B draft's 16 layers on the last stage
    ("meta-llama/Llama-3.1-405B-Instruct", "none", 8, 1, 2, "bf16", True),
    ("meta-llama/Llama-3.1-405B-Instruct", "draft-target", 8, 1, 2, "bf16", True),
    ("meta-llama/Llama-3.1-405B-Instruct", "draft-target", 8, 1, 4, "bf16", True),
    # fp8 KV (DeepSeek: TRITON_MLA)
    ("openai/gpt-oss-120b", "eagle3", 8, 1, 2, "fp8", True),
    ("deepseek-ai/DeepSeek-V3", "mtp", 40, 8, 2, "fp8", True),
)


def pp_cases(presets: dict[str, Any], drafts: dict[str, str]) -> list[Case]:
    """Pipeline parallelism: every target x applicable spec at PP 2 and 4 (40 GiB, TP 1,
    bf16), PP 4 only where every stage gets at least one target layer; plus ``_PP_EXTRA``
    (TP 8 x PP 2 for a model of each layer kind, the Mamba models without prefix caching,
    per-stage refusals, fp8)."""
    cases: list[Case] = []
    for name, model in presets.items():
        if model.is_head or name in FAMILY_MTP_DRAFTS.values():  # drafts, not targets
            continue
        length = _max_model_len(model)
        for spec in _specs_for(name, model, drafts):
            draft = _draft_for(name, spec, drafts)
            for pp in PPS:
                if model.num_layers < pp:  # get_pp_indices would leave a stage empty
                    continue
                cases.append(
                    Case(name, spec, draft, 40 * GiB, 1, "bf16", length, _block_size(model), pp=pp)
                )
    for name, spec, gib, tp, pp, dtype, prefix in _PP_EXTRA:
        cases.append(
            Case(name, spec, _draft_for(name, spec, drafts), gib * GiB, tp, dtype,
                 _max_model_len(presets[name]), enable_prefix_caching=prefix, pp=pp)
        )  # fmt: skip
    return cases


# target, spec, budget GiB, tp, kv dtype, max_model_len, prefix caching, pp
_QUICK = (
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle3", 40, 1, "bf16", 32768, True, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle3", 8, 1, "fp8", 32768, True, 1),
    ("meta-llama/Llama-3.1-8B-Instruct", "draft-target", 8, 1, "bf16", 32768, True, 1),
    ("meta-llama/Llama-3.3-70B-Instruct", "eagle3", 40, 8, "bf16", 32768, True, 1),
    ("meta-llama/Llama-3.1-405B-Instruct", "none", 8, 1, "bf16", 32768, True, 1),
    ("openai/gpt-oss-120b", "eagle3", 40, 1, "bf16", 32768, True, 1),
    ("google/gemma-3-27b-it", "none", 40, 1, "bf16", 32768, True, 1),
    ("google/gemma-2-9b-it", "ngram", 8, 1, "fp8", 8192, True, 1),
    ("mistralai/Mistral-7B-v0.1", "ngram", 40, 1, "bf16", 32768, True, 1),
    ("Qwen/Qwen3-8B", "none", 8, 8, "fp8", 32768, True, 1),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "mtp", 40, 1, "bf16", 32768, True, 1),
    ("nvidia/Nemotron-H-8B-Base-8K", "none", 40, 1, "bf16", 8192, True, 1),
    ("nvidia/Nemotron-H-8B-Base-8K", "ngram", 40, 1, "bf16", 8192, False, 1),
    ("deepseek-ai/DeepSeek-V3", "mtp", 40, 8, "bf16", 32768, True, 1),
    # pipeline parallelism: one worker per stage, draft layers on the last stage
    ("openai/gpt-oss-120b", "eagle3", 40, 1, "bf16", 32768, True, 2),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "mtp", 40, 1, "bf16", 32768, True, 4),
    ("deepseek-ai/DeepSeek-V3", "mtp", 40, 8, "bf16", 32768, True, 2),
)


def quick_cases() -> list[Case]:
    """A representative sample: every layer and draft kind, a refusal, a no-prefix run,
    pipeline parallelism (PP 2 and 4)."""
    drafts = _eagle3_drafts()
    return [
        Case(target, spec, _draft_for(target, spec, drafts), gib * GiB, tp, dtype, length,
             enable_prefix_caching=prefix, pp=pp)
        for target, spec, gib, tp, dtype, length, prefix, pp in _QUICK
    ]  # fmt: skip


# --------------------------------------------------------------------------- vLLM side


class Skip(Exception):
    """vLLM itself cannot build this deployment (the reason is vLLM's)."""


@dataclass
class VllmResult:
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    gpu_kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    kv_cache_groups: list[dict[str, Any]] = field(default_factory=list)
    refused: str | None = None
    # the longest --max-model-len vLLM takes without VLLM_ALLOW_LONG_MAX_MODEL_LEN, and
    # whether the case's needed the variable
    derived_max_model_len: int | None = None
    allow_long_max_model_len: bool = False
    # a drafter's embed_tokens under PP > 1 as maybe_share_target_embed leaves it:
    # "shared", "kept" or "missing" (it raised); None where not run
    draft_embedding: str | None = None
    # context, not compared
    bytes_per_block: int | None = None  # the largest stage's (it sets num_blocks)
    stage_bytes_per_block: list[int] = field(default_factory=list)  # per PP stage
    stage_layers: list[int] = field(default_factory=list)  # cache layers per PP stage
    kv_cache_layout: str | None = None
    attention_backends: list[str] = field(default_factory=list)
    max_in_flight_tokens: int | None = None
    async_scheduling: bool | None = None  # as VllmConfig resolved vllm serve's default
    model_runner: str | None = None  # "v2" or "v1": VllmConfig.use_v2_model_runner
    mamba_cache_mode: str | None = None
    log_line: str | None = None


_MODEL_DIRS: dict[str, Path] = {}
_TMP = tempfile.TemporaryDirectory(prefix="kvbudget-vllm-fidelity-")


def _model_dir(preset: str) -> Path:
    """A directory holding the preset's config.json, as vLLM reads a local checkpoint."""
    if preset in _MODEL_DIRS:
        return _MODEL_DIRS[preset]
    cfg = _config_of(preset)
    if cfg.get("model_type") == "gemma4":
        # Stand-in, as for Gemma-3: the text model (Gemma4ForCausalLM, gemma4.py) of the
        # multimodal checkpoint; its vision and audio towers keep no KV cache
        text = dict(cfg["text_config"])
        text["architectures"] = ["Gemma4ForCausalLM"]
        text.setdefault("torch_dtype", cfg.get("torch_dtype"))
        cfg = text
    if cfg.get("model_type") == "llama4":
        # Stand-in, as for Gemma-3: the text model (Llama4ForCausalLM, llama4.py) of the
        # multimodal checkpoint, whose class vLLM cannot inspect without its vision deps
        text = dict(cfg["text_config"])
        text["architectures"] = ["Llama4ForCausalLM"]
        text.setdefault("torch_dtype", cfg.get("torch_dtype"))
        cfg = text
    if cfg.get("model_type") == "gemma3":
        # Stand-in: the text model of the multimodal checkpoint (its vision tower has no
        # KV cache; vLLM's multimodal class needs torchvision just to be inspected).
        text = dict(cfg["text_config"])
        text["architectures"] = ["Gemma3ForCausalLM"]
        text["model_type"] = "gemma3_text"
        text.setdefault("torch_dtype", cfg.get("torch_dtype"))
        cfg = text
    path = Path(_TMP.name) / preset.replace("/", "--")
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg), "utf-8")
    _MODEL_DIRS[preset] = path
    return path


def _model_file(name: str) -> Path:
    """A family config as the user would pass it to kvbudget: the config as written
    (the multimodal wrapper too), in its own folder."""
    path = Path(_TMP.name) / "kvbudget" / name.replace("/", "--")
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(_config_of(name)), "utf-8")
    return path


def _original_architecture(preset: str) -> str:
    return (_config_of(preset).get("architectures") or [""])[0]


# ---- vLLM release adapters (0.33.0 / 0.29.0) ----------------------------------------------
#
# One function per API difference between the two releases the harness runs against. Each
# picks its path by what the installed vLLM has (a module, function, attribute or
# parameter), not by its version number, and names the file:line in both releases.


def _planning():
    """The module holding vLLM's KV cache planning (``get_kv_cache_configs`` and helpers).

    0.33.0: ``vllm/v1/core/kv_cache_planning.py`` (get_kv_cache_configs :1461,
    _project_kv_cache_groups_to_worker :1413); 0.29.0 has no such module, the same
    functions are in ``vllm/v1/core/kv_cache_utils.py`` (:2214, :2172).
    """
    try:
        from vllm.v1.core import kv_cache_planning

        return kv_cache_planning
    except ImportError:
        from vllm.v1.core import kv_cache_utils

        return kv_cache_utils


def _plan_kv_cache(vc, kv_cache_specs, available_memory):
    """``(groups, configs)``: the whole model's KV cache groups and ``get_kv_cache_configs``'
    answer, its per-worker configs, or the ValueError it refused with.

    0.33.0: the engine core groups the layers first, ``get_global_kv_cache_groups``
    (kv_cache_planning.py:1607), and passes the groups to ``get_kv_cache_configs(vc, specs,
    memory, groups)`` (kv_cache_planning.py:1461; core.py imports both). 0.29.0 has no
    ``get_global_kv_cache_groups``: ``get_kv_cache_configs(vc, specs, memory)`` merges the
    specs, tags ``extra_retained_tokens`` and calls ``get_kv_cache_groups`` itself, once
    (kv_cache_utils.py:2214-2284), so the groups are what that call returns, recorded as it
    passes (vLLM's own code, not a copy of it).
    """
    planning = _planning()
    if hasattr(planning, "get_global_kv_cache_groups"):
        groups = planning.get_global_kv_cache_groups(vc, kv_cache_specs)
        try:
            return groups, planning.get_kv_cache_configs(
                vc, kv_cache_specs, available_memory, groups
            )
        except ValueError as exc:
            return groups, exc
    seen: list[Any] = []
    get_kv_cache_groups = planning.get_kv_cache_groups

    def recorded(*args, **kwargs):
        seen.append(get_kv_cache_groups(*args, **kwargs))
        return seen[-1]

    with mock.patch.object(planning, "get_kv_cache_groups", recorded):
        try:
            configs = planning.get_kv_cache_configs(vc, kv_cache_specs, available_memory)
        except ValueError as exc:
            if not seen:  # refused before grouping: not the start-up check
                raise
            configs = exc
    return seen[0], configs


def _v2_model_runner(vc) -> bool:
    """Whether the engine runs on Model Runner V2 (``VllmConfig.use_v2_model_runner``).

    0.33.0 (config/vllm.py ``use_v2_model_runner``) and 0.29.0 choose between the V1 and
    V2 runners; 0.34.0 has no such property and no V1 runner (``Platform.validate_environ``,
    platforms/interface.py:1481-1490: "Model Runner V1 has been removed"), so V2.
    """
    return bool(getattr(vc, "use_v2_model_runner", True))


def _minimax_m3_sparse_ids(hf) -> set[int]:
    """The MiniMax-M3 layers that run sparse attention, as the release's model reads them.

    0.34.0 reads the text config with transformers' ``MiniMaxM3VLTextConfig``, which folds
    ``sparse_attention_config.sparse_attention_freq`` into ``layer_types``
    (``"minimax_m3_sparse"``; all ``"full_attention"`` without either), and the model takes
    those (models/minimax_m3/nvidia/model.py:191-193 ``_sparse_attention_layer_ids``);
    0.33.0's own ``MiniMaxM3TextConfig`` keeps the dict (transformers_utils/configs/
    minimax_m3.py), whose ``sparse_attention_freq`` its model reads.
    """
    sparse = getattr(hf, "sparse_attention_config", None)
    if sparse is None:
        return {i for i, t in enumerate(hf.layer_types) if t == "minimax_m3_sparse"}
    return {i for i, f in enumerate(sparse["sparse_attention_freq"]) if f}


def _minimax_m3_index(hf, flat: str, legacy: str):
    """One MiniMax-M3 indexer setting: 0.34.0's flat ``index_*`` attribute of
    ``MiniMaxM3VLTextConfig`` (transformers 5.20.2 configuration_minimax_m3_vl.py: the
    legacy ``sparse_attention_config`` keys copied over its defaults) or 0.33.0's
    ``sparse_attention_config[legacy]``."""
    sparse = getattr(hf, "sparse_attention_config", None)
    return getattr(hf, flat) if sparse is None else sparse[legacy]


def _pool_bytes_per_block(vc, groups) -> int:
    """Bytes one block takes in a worker's pool, as ``get_kv_cache_configs`` divides by.

    0.33.0: ``_pool_bytes_per_block(vllm_config, groups)`` (kv_cache_planning.py:251: the
    resolved KV cache layout, host-resident groups left out); 0.29.0:
    ``_pool_bytes_per_block(groups)`` (kv_cache_utils.py:1082).
    """
    fn = _planning()._pool_bytes_per_block
    if "vllm_config" in inspect.signature(fn).parameters:
        return fn(vc, groups)
    return fn(groups)


@functools.cache
def _block_size_from_prefix_cacheable_groups() -> bool:
    """Whether the engine core sets ``cache_config.block_size`` from the groups that take
    part in prefix caching only (0.33.0 core.py:337-350: min over those, all when none) or
    from every group (0.29.0 core.py:335-338). No module or function marks the change, so
    the test is what ``EngineCore._initialize_kv_caches`` reads. No layer the harness
    builds opts out of prefix caching (CircularBufferSpec, HiSparse*), so both rules give
    the same block size here.
    """
    from vllm.v1.engine.core import EngineCore

    return "prefix_cacheable" in inspect.getsource(EngineCore._initialize_kv_caches)


def _scheduler_block_size(sched_groups) -> int:
    """``cache_config.block_size`` as the engine core sets it after sizing (core.py)."""
    sizes = [g.kv_cache_spec.block_size for g in sched_groups]
    if _block_size_from_prefix_cacheable_groups():
        participating = [
            g.kv_cache_spec.block_size for g in sched_groups if g.kv_cache_spec.prefix_cacheable
        ]
        return min(participating or sizes)
    return min(sizes)


def _is_draft(name: str, spec) -> bool:
    """Whether a layer's spec belongs to the draft.

    0.33.0: ``KVCacheSpec.is_draft`` (kv_cache_interface.py:215; set from the layer's
    ``is_draft_layer`` by get_kv_cache_spec, v1/worker/gpu/attn_utils.py:150-151). 0.29.0's
    KVCacheSpec (kv_cache_interface.py:145) has none: the harness names every draft layer
    ``drafter.*`` (``build_layers``).
    """
    is_draft = getattr(spec, "is_draft", None)
    return name.startswith("drafter.") if is_draft is None else is_draft


def _gdn_checkpoint_alignment() -> int | None:
    """FlashInfer's GDN prefill-checkpoint stride, or None where the release has none.

    0.33.0: ``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`` = 64 (v1/attention/backends/
    gdn_attn.py:34), read by the layer (qwen_gdn_linear_attn.py:691-697); 0.29.0's
    gdn_attn.py has no such constant and its GDN layer exports no prefill checkpoints.
    """
    from vllm.v1.attention.backends import gdn_attn

    return getattr(gdn_attn, "FLASHINFER_GDN_CHECKPOINT_ALIGNMENT", None)


def _mm_prefix_backend():
    """(class, name) of the backend SM90 gives a multimodal prefix-LM's layers (Gemma-3).

    0.33.0: TRITON_FLASH_ATTN, first in the SM90 list when ``use_mm_prefix``
    (platforms/cuda.py:170-175; v1/attention/backends/triton_flash_attn.py). 0.29.0 has no
    triton_flash_attn module and no mm-prefix entry (cuda.py:155-162: FLASH_ATTN,
    FLASHINFER, TRITON_ATTN): FLASH_ATTN takes mm_prefix only with FA4, which SM90 does not
    resolve to (flash_attn.py:188-189, 229-243), FlashInfer not at all (backend.py:173
    default), so TRITON_ATTN (triton_attn.py:274, 351-352).
    """
    try:
        from vllm.v1.attention.backends.triton_flash_attn import TritonFlashAttentionBackend

        return TritonFlashAttentionBackend, "TRITON_FLASH_ATTN"
    except ImportError:
        from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

        return TritonAttentionBackend, "TRITON_ATTN"


def _model_runner_as_on_cuda() -> None:
    """Let ``VllmConfig.use_v2_model_runner`` answer as on an H100/H200, which has Triton.

    0.29.0 falls back to the V1 model runner whenever Triton is missing
    (config/vllm.py:662-666), as it is in this CPU-only venv, and the runner decides async
    scheduling and the in-flight tokens a sliding window charges. 0.33.0 exempts the
    CPU-only UnspecifiedPlatform from that check (config/vllm.py:752) and reads HAS_TRITON
    nowhere else in the module, so this changes nothing there.
    """
    import vllm.config.vllm as config_vllm

    config_vllm.HAS_TRITON = True


def _hybrid_kv_cache_as_on_cuda():
    """While the platform aligns block sizes: ``support_hybrid_kv_cache`` answers as CUDA
    does (True), as while the VllmConfig is built (``build_vllm_config``).

    0.29.0's Kimi K3 reads its Mamba state shape through ``vllm_config.with_hf_config``
    (models/kimi_k3/nvidia/model.py:2155, config/vllm.py:880), which builds a new
    VllmConfig whose ``__post_init__`` asks the platform again (config/vllm.py:1786) and,
    on this CPU-only process, refuses the hybrid manager the first config enabled
    (:1836-1845). 0.33.0's copy (``with_hf_config``, config/vllm.py:964) passes here
    without this; with it the platform answers as CUDA either way.
    """
    from vllm.platforms import current_platform

    return mock.patch.object(
        type(current_platform), "support_hybrid_kv_cache", classmethod(lambda cls: True)
    )


def _pp_refusal(exc: BaseException) -> bool:
    """vLLM 0.29.0's refusal of a drafter under PP: the draft's ModelConfig gets the
    target's pipeline_parallel_size (config/speculative.py:1686-1690) and the draft class
    lacks SupportsPP (config/model.py:1424-1430). 0.33.0 gives the draft PP 1
    (config/speculative.py:1905) and never raises it for the cases here."""
    return isinstance(exc, NotImplementedError) and "SupportsPP" in str(exc)


@contextlib.contextmanager
def _minimax_m3_inspection(target: str):
    """While a MiniMax-M3 ``ModelConfig`` is built: ``torchvision.transforms`` holds a
    stand-in ``InterpolationMode`` (only its image processor imports it, at module
    load: vllm/transformers_utils/processors/minimax_m3.py:19), and the model registry
    inspects the class in this process (``_run_in_subprocess``,
    model_executor/models/registry.py:1594: a fresh interpreter would not see the
    stand-in). Other models: nothing changes."""
    if _config_of(target).get("model_type") not in ("minimax_m3_vl", "minimax_m3_text"):
        yield
        return
    import enum
    import types

    from vllm.model_executor.models import registry

    class InterpolationMode(enum.Enum):  # torchvision's names for the resampling modes
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"

    transforms = types.ModuleType("torchvision.transforms")
    transforms.InterpolationMode = InterpolationMode  # type: ignore[attr-defined]
    package = types.ModuleType("torchvision")
    package.transforms = transforms  # type: ignore[attr-defined]
    # only these two entries are added and taken out again (the modules imported
    # meanwhile stay: re-importing vLLM's layers would register their custom ops twice)
    added = [k for k in ("torchvision", "torchvision.transforms") if k not in sys.modules]
    sys.modules.setdefault("torchvision", package)
    sys.modules.setdefault("torchvision.transforms", transforms)
    try:
        with mock.patch.object(registry, "_run_in_subprocess", lambda fn: fn()):
            yield
    finally:
        for key in added:
            del sys.modules[key]


def build_vllm_config(case: Case):
    """A real VllmConfig, as EngineArgs.create_engine_config builds it for the case's flags.

    ``create_engine_config`` itself cannot run here (it asks the platform for a device
    type, and a CPU-only process has no CUDA platform), so the pieces it builds are built
    the same way (vllm/engine/arg_utils.py:2280-2330, 2658-2683, 2100-2139).
    """
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.utils.torch_utils import resolve_kv_cache_dtype_string

    _model_runner_as_on_cuda()
    with _minimax_m3_inspection(case.target):
        model_config = ModelConfig(
            model=str(_model_dir(case.target)),
            skip_tokenizer_init=True,
            max_model_len=case.max_model_len,
        )
    # arg_utils.py:2288-2294: CacheConfig.sliding_window only for all-sliding models
    layer_types = getattr(model_config.hf_text_config, "layer_types", None)
    sliding_window = None
    if layer_types is None or all(lt == "sliding_attention" for lt in layer_types):
        sliding_window = model_config.get_sliding_window()
    cache_dtype = resolve_kv_cache_dtype_string(
        "auto" if case.kv_dtype == "bf16" else case.kv_dtype, model_config
    )
    cache_config = CacheConfig(
        block_size=case.block_size,
        kv_cache_memory_bytes=case.kv_budget,
        cache_dtype=cache_dtype,
        is_attention_free=model_config.is_attention_free,
        sliding_window=sliding_window,
        enable_prefix_caching=case.enable_prefix_caching,
        mamba_cache_dtype=STATE_DTYPES[case.state_dtype],
        mamba_ssm_cache_dtype=STATE_DTYPES[case.state_dtype],
    )
    # arg_utils.py:2569-2571; with more than one rank ParallelConfig picks the "mp"
    # executor, as on a node with enough GPUs (config/parallel.py:1054-1095)
    parallel_config = ParallelConfig(pipeline_parallel_size=case.pp, tensor_parallel_size=case.tp)
    speculative_config = None
    if case.spec != "none":
        spec_args: dict[str, Any] = {
            "method": VLLM_METHOD[case.spec],
            "num_speculative_tokens": case.num_speculative_tokens,
        }
        if case.spec == "ngram":
            spec_args["prompt_lookup_max"] = NGRAM_PROMPT_LOOKUP
            spec_args["prompt_lookup_min"] = NGRAM_PROMPT_LOOKUP
        if case.draft is not None:
            spec_args["model"] = str(_model_dir(case.draft))
        # MiniMax-M3's MTP draft (MiniMaxM3MTP) is inspected like its target
        with _minimax_m3_inspection(case.target):
            speculative_config = SpeculativeConfig(
                **spec_args,
                target_model_config=model_config,
                target_parallel_config=parallel_config,
            )
    scheduler_config = SchedulerConfig(
        runner_type=model_config.runner_type,
        max_num_batched_tokens=case.max_num_batched_tokens,
        max_num_seqs=case.max_num_seqs,
        max_model_len=model_config.max_model_len,
        enable_chunked_prefill=True,
        is_multimodal_model=model_config.is_multimodal_model,
        is_encoder_decoder=model_config.is_encoder_decoder,
        # None, vllm serve's default: VllmConfig.__post_init__ turns it on unless the
        # deployment cannot run it (0.33.0 config/vllm.py:1685-1719: on for every case
        # here, as an explicit --async-scheduling; 0.29.0 config/vllm.py:1262-1285: off
        # for ngram, which an explicit --async-scheduling is refused with, :1231-1251)
        async_scheduling=None if case.async_scheduling else False,
    )
    # The one platform answer VllmConfig.__post_init__ asks that differs between this
    # CPU-only process (UnspecifiedPlatform: False, platforms/interface.py:1354) and an
    # H100/H200 (CudaPlatform: True, platforms/cuda.py:683): whether the hybrid KV cache
    # manager is supported (config/vllm.py:2232). Answer as CUDA does.
    from vllm.platforms import current_platform

    with mock.patch.object(
        type(current_platform), "support_hybrid_kv_cache", classmethod(lambda cls: True)
    ):
        return VllmConfig(
            model_config=model_config,
            cache_config=cache_config,
            parallel_config=parallel_config,
            scheduler_config=scheduler_config,
            speculative_config=speculative_config,
            device_config=DeviceConfig(device="cpu"),  # only names the log line's pool
        )


# ---- attention backends on SM90 ------------------------------------------------------


def _attention_backend(case: Case, use_mla: bool, cache_dtype: str):
    """The attention backend class an H100/H200 (SM90) gives these layers.

    vLLM's selector (vllm/platforms/cuda.py ``get_valid_backends``) needs a CUDA device,
    so the choice is made here by the same rule, and vLLM's own class is returned
    (its kernel block sizes, ``customize_spec`` and supported layouts are what matter):

    * non-MLA, SM90 (cuda.py:169-181): FLASH_ATTN first, or, when the model is a
      multimodal prefix-LM (Gemma-3), TRITON_FLASH_ATTN (0.33.0) / TRITON_ATTN (0.29.0)
      (``_mm_prefix_backend``); FA3 supports bf16 and fp8 KV, head sizes <= 256 and sinks
      (gpt-oss) on SM90.
    * MLA, SM90 (cuda.py:139-155): FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA.
      FLASH_ATTN_MLA takes bf16 KV only (mla/flashattn_mla.py:42-46); with fp8 KV
      FLASHMLA wants block size 64 (mla/flashmla.py:57) and rejects the user's
      ``--block-size 16`` (backend.py:122-138), FLASHINFER_MLA is SM100 only
      (mla/flashinfer_mla.py:220), so TRITON_MLA (MultipleOf(16)) is chosen. Both
      FLASH_ATTN_MLA and TRITON_MLA declare ``MultipleOf(16)`` kernel blocks and
      MLACommonBackend's spec handling; FLASH_ATTN_MLA's module cannot be imported without
      CUDA, so TRITON_MLA's class stands in for it (identical KV sizing).
    """
    if use_mla:
        from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend

        return TritonMLABackend, ("FLASH_ATTN_MLA" if cache_dtype == "auto" else "TRITON_MLA")
    if _original_architecture(case.target) == "Gemma3ForConditionalGeneration":
        return _mm_prefix_backend()
    from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend

    return FlashAttentionBackend, "FLASH_ATTN"


# ---- layer stand-ins --------------------------------------------------------------------


def _bare(cls):
    """An instance of a vLLM layer class whose __init__ (weights, kernels) is not run."""
    import torch

    obj = cls.__new__(cls)
    torch.nn.Module.__init__(obj)
    return obj


def _check_tp_heads(what: str, heads: int, kv_heads: int, tp: int) -> None:
    """The asserts vLLM's attention modules make (e.g. llama.py:144-155)."""
    if heads % tp:
        raise Skip(f"{what}: {heads} attention heads not divisible by TP {tp}")
    if kv_heads >= tp and kv_heads % tp:
        raise Skip(f"{what}: {kv_heads} KV heads not divisible by TP {tp}")
    if kv_heads < tp and tp % kv_heads:
        raise Skip(f"{what}: TP {tp} not a multiple of {kv_heads} KV heads")


def _attention_layer(
    vc,
    model_config,
    name,
    hf,
    layer_idx,
    window,
    backend,
    draft,
    geometry=None,
    shares=None,
    heads=None,
):
    """vLLM's Attention as the model's __init__ sets it (attention.py:240-345).

    ``geometry``: the layer's own ``(num_kv_heads, head_dim)`` where the model reads
    them per layer (Gemma-4's ``per_layer_config``); ``shares``: the layer whose KV cache
    it reads (``kv_sharing_target_layer_name``); ``heads``: the layer's own query heads
    (Step-3.5's sliding layers), else ``num_attention_heads``.
    """
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1.attention.backend import AttentionType

    tp = vc.parallel_config.tensor_parallel_size
    heads = hf.num_attention_heads if heads is None else heads
    if geometry is not None:
        kv_heads, head_dim = geometry
    else:
        kv_heads = getattr(hf, "num_key_value_heads", None) or heads
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // heads
    _check_tp_heads(name, heads, kv_heads, tp)
    cache_config = vc.cache_config
    layer = _bare(Attention)
    # per-layer window from the model code, else the model-level one (attention.py:265-273)
    layer.sliding_window = window if window is not None else cache_config.sliding_window
    layer.kv_cache_dtype = cache_config.cache_dtype
    layer.kv_cache_torch_dtype = kv_cache_dtype_str_to_dtype(cache_config.cache_dtype, model_config)
    layer.num_heads = heads // tp
    layer.num_kv_heads = max(1, kv_heads // tp)  # replicated when TP > KV heads
    layer.head_size = head_dim
    layer.head_size_v = head_dim
    layer.attn_type = AttentionType.DECODER
    layer.attn_backend = backend
    layer.kv_sharing_target_layer_name = shares
    layer.layer_name = name
    layer.is_draft_layer = draft
    return layer


def _chunked(layer, chunk: int):
    """The same layer as vLLM's ChunkedLocalAttention (chunked_local_attention.py:119-129:
    its kv cache spec is a ChunkedLocalAttentionSpec of ``attention_chunk_size``)."""
    from vllm.model_executor.layers.attention.chunked_local_attention import (
        ChunkedLocalAttention,
    )

    out = _bare(ChunkedLocalAttention)
    out.__dict__.update({k: v for k, v in layer.__dict__.items() if not k.startswith("_")})
    out.attention_chunk_size = chunk
    return out


def _mla_layer(vc, model_config, name, hf, backend, draft):
    """vLLM's MLAAttention as DeepSeek's __init__ sets it (mla_attention.py:470-545)."""
    from vllm.model_executor.layers.attention.mla_attention import MLAAttention

    tp = vc.parallel_config.tensor_parallel_size
    if hf.num_attention_heads % tp:
        raise Skip(f"{name}: {hf.num_attention_heads} heads not divisible by TP {tp}")
    layer = _bare(MLAAttention)
    layer.num_heads = hf.num_attention_heads // tp
    layer.kv_lora_rank = hf.kv_lora_rank
    layer.qk_rope_head_dim = hf.qk_rope_head_dim
    layer.head_size = hf.kv_lora_rank + hf.qk_rope_head_dim
    layer.num_kv_heads = 1
    layer.sliding_window = None
    layer.indexer = None
    layer.non_causal_multi_token_decode = False
    layer.topk_buffer_width = None
    layer.kv_cache_dtype = vc.cache_config.cache_dtype
    layer.attn_backend = backend
    layer.kv_sharing_target_layer_name = None
    layer.layer_name = name
    layer.is_draft_layer = draft
    return layer


def _mamba2_layer(vc, model_cls, name):
    """vLLM's MambaMixer2 (Nemotron-H 'M' layers; mamba_mixer2.py).

    ``get_state_shape`` asks torch.distributed for the TP size, so it is bound to the
    model class's own ``get_mamba_state_shape_from_config`` (nemotron_h.py:780-810: the
    same MambaStateShapeCalculator.mamba2_state_shape call, with the TP size from the
    config), which is also what the platform's block-size alignment uses.
    """
    from vllm.model_executor.layers.mamba.mamba_mixer2 import MambaMixer2

    tp = vc.parallel_config.tensor_parallel_size
    hf = vc.model_config.hf_config
    if hf.mamba_num_heads % tp:  # mamba_utils.py divide() asserts
        raise Skip(f"{name}: {hf.mamba_num_heads} Mamba heads not divisible by TP {tp}")
    layer = _bare(MambaMixer2)
    layer.model_config = vc.model_config
    layer.cache_config = vc.cache_config
    layer.use_replayssm = vc.cache_config.use_replayssm
    layer.num_spec = vc.num_speculative_tokens
    layer.prefix = name
    layer.get_state_shape = lambda: model_cls.get_mamba_state_shape_from_config(vc)
    return layer


def _gdn_layer(vc, name, hf):
    """vLLM's QwenGatedDeltaNetAttention (Qwen3-Next 'linear_attention' layers).

    Attributes as gdn/base.py:25-46 and qwen_gdn_linear_attn.py:556-700 set them. On SM90
    the GDN prefill backend is FlashInfer (``_resolve_gdn_prefill_backend``, "Hopper (SM90)
    - no further constraints"), so in "align" mode the layer exports prefill checkpoints
    every FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (64) tokens (qwen_gdn_linear_attn.py:691-697;
    0.33.0 only, ``_gdn_checkpoint_alignment``).
    """
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
        QwenGatedDeltaNetAttention,
    )

    tp = vc.parallel_config.tensor_parallel_size
    for what, n in (
        ("linear key heads", hf.linear_num_key_heads),
        ("linear value heads", hf.linear_num_value_heads),
    ):
        if n % tp:
            raise Skip(f"{name}: {n} {what} not divisible by TP {tp}")
    layer = _bare(QwenGatedDeltaNetAttention)
    layer.tp_size = tp
    layer.num_k_heads = hf.linear_num_key_heads
    layer.num_v_heads = hf.linear_num_value_heads
    layer.head_k_dim = hf.linear_key_head_dim
    layer.head_v_dim = hf.linear_value_head_dim
    layer.conv_kernel_size = hf.linear_conv_kernel_dim
    layer.model_config = vc.model_config
    layer.cache_config = vc.cache_config
    layer.speculative_config = vc.speculative_config
    layer.num_spec = vc.num_speculative_tokens
    layer.vllm_config = vc
    layer.prefix = name
    layer.gdn_prefill_backend = "flashinfer"
    layer._checkpoint_alignment = (
        _gdn_checkpoint_alignment() if vc.cache_config.mamba_cache_mode == "align" else None
    )
    layer._max_num_batched_tokens = vc.scheduler_config.max_num_batched_tokens
    return layer


def _kda_layer(vc, name, hf):
    """vLLM's KimiGatedDeltaNetAttention (Kimi-Linear's KDA layers, no full-rank gate).

    Attributes as gdn/base.py:25-46 and kimi_gdn_linear_attn.py ``__init__`` set them
    (``num_heads``, ``head_dim``, ``conv_size`` from ``linear_attn_config``); its own
    ``get_state_shape`` / ``get_state_dtype`` (``kda_state_shape``, ``kda_state_dtype``)
    and the base ``get_kv_cache_spec`` run unchanged. It declares no prefill
    checkpoint alignment (abstract.py ``MambaBase.get_prefill_checkpoint_alignment``).
    """
    from vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn import (
        KimiGatedDeltaNetAttention,
    )

    tp = vc.parallel_config.tensor_parallel_size
    kda = hf.linear_attn_config
    if kda["num_heads"] % tp:  # ``assert self.num_heads % self.tp_size == 0``
        raise Skip(f"{name}: {kda['num_heads']} KDA heads not divisible by TP {tp}")
    layer = _bare(KimiGatedDeltaNetAttention)
    layer.tp_size = tp
    layer.num_heads = kda["num_heads"]
    layer.head_dim = kda["head_dim"]
    layer.conv_size = kda["short_conv_kernel_size"]
    layer.model_config = vc.model_config
    layer.cache_config = vc.cache_config
    layer.speculative_config = vc.speculative_config
    layer.num_spec = vc.num_speculative_tokens
    layer.prefix = name
    return layer


def _k3_kda_layer(vc, name, hf):
    """vLLM's KimiK3DeltaAttention (Kimi K3's KDA layers: the full-rank gate;
    models/kimi_k3/nvidia/kda.py), its own ``get_state_shape``, ``get_state_dtype``
    (``kda_state_dtype`` with ``mamba_ssm_cache_dtype``) and ``get_kv_cache_spec`` run
    unchanged. Attributes as gdn/base.py and its ``__init__`` set them; the prefill
    backend is vLLM's own ``resolve_kda_prefill_backend("auto", ...)`` answered as on an
    H100/H200 (``current_platform.is_cuda()`` True, capability 9.0): FlashKDA where
    ``is_flashkda_supported`` (128-wide heads, bf16 activations, a gate_lower_bound),
    whose spec then holds one prefill checkpoint state, else Triton."""
    from vllm.models.kimi_k3.nvidia import kda as kda_module
    from vllm.platforms.interface import DeviceCapability

    tp = vc.parallel_config.tensor_parallel_size
    kda = hf.linear_attn_config
    if kda["num_heads"] % tp:  # ``assert self.num_heads % self.tp_size == 0``
        raise Skip(f"{name}: {kda['num_heads']} KDA heads not divisible by TP {tp}")
    layer = _bare(kda_module.KimiK3DeltaAttention)
    layer.tp_size = tp
    layer.num_heads = kda["num_heads"]
    layer.head_dim = kda["head_dim"]
    layer.conv_size = kda["short_conv_kernel_size"]
    layer.gate_lower_bound = kda.get("gate_lower_bound", None)
    layer.model_config = vc.model_config
    layer.cache_config = vc.cache_config
    layer.speculative_config = vc.speculative_config
    layer.num_spec = vc.num_speculative_tokens
    layer.prefix = name
    platform = kda_module.current_platform
    with (
        mock.patch.object(platform, "is_cuda", lambda: True),
        mock.patch.object(platform, "get_device_capability", lambda: DeviceCapability(9, 0)),
    ):
        layer.kda_prefill_backend = kda_module.resolve_kda_prefill_backend(
            *_kda_prefill_backend_args(kda_module, layer, vc)
        )
    return layer


def _kda_prefill_backend_args(kda_module, layer, vc) -> tuple[Any, ...]:
    """``resolve_kda_prefill_backend``'s arguments, as ``KimiK3DeltaAttention.__init__``
    passes them.

    0.33.0 (models/kimi_k3/nvidia/kda.py:486): ``(backend, head_dim, input_dtype,
    recurrent_state_dtype, lower_bound)``; 0.29.0 (kda.py:300): ``(backend, head_dim,
    dtype, lower_bound)``, no recurrent dtype (its state is float32).
    """
    params = inspect.signature(kda_module.resolve_kda_prefill_backend).parameters
    dtype = vc.model_config.dtype
    if "recurrent_state_dtype" in params:
        return ("auto", layer.head_dim, dtype, layer.get_state_dtype()[1], layer.gate_lower_bound)
    return ("auto", layer.head_dim, dtype, layer.gate_lower_bound)


def _kimi_mla_layer(vc, name, hf, backend, draft=False):
    """Kimi-Linear's MultiHeadLatentAttention (models/kimi_k3/nvidia/mla.py), whose own
    ``get_kv_cache_spec`` runs: an MLA spec of ``kv_lora_rank + qk_rope_head_dim``, one
    KV head, ``max_tp_shards=1``. Its backend is chosen as DeepSeek's MLA is
    (``get_attn_backend(..., use_mla=True)``), so the harness's SM90 MLA backend.
    ``draft``: Kimi K3's MTP block (``is_draft_layer``)."""
    from vllm.models.kimi_k3.nvidia.mla import MultiHeadLatentAttention

    tp = vc.parallel_config.tensor_parallel_size
    if hf.num_attention_heads % tp:
        raise Skip(f"{name}: {hf.num_attention_heads} heads not divisible by TP {tp}")
    layer = _bare(MultiHeadLatentAttention)
    layer.head_size = hf.kv_lora_rank + hf.qk_rope_head_dim
    layer.kv_cache_dtype = vc.cache_config.cache_dtype
    layer.non_causal_multi_token_decode = False
    layer.attn_backend = backend
    layer.kv_sharing_target_layer_name = None
    layer.layer_name = name
    layer.is_draft_layer = draft
    return layer


def _dsv4_cache_layers(vc, hf, i: int, prefix: str, draft: bool) -> list[tuple[str, Any]]:
    """DeepSeek-V4 decoder layer ``i``'s cache-owning modules as vLLM 0.33.0 builds them
    on SM90 (``DeepseekV4FlashMLAAttention``, the CUDA default off SM12:
    models/deepseek_v4/nvidia/model.py ``_select_dsv4_attn_cls``), with the attributes
    their ``__init__`` sets (models/deepseek_v4/attention.py ``DeepseekV4Attention``,
    ``DeepseekV4Indexer``; compressor.py ``DeepseekCompressor``, ``CompressorStateCache``;
    v1/attention/backends/mla/sparse_swa.py ``DeepseekV4SWACache``):

    * ratio 4 (``compress_rates[layer_types[i]]``; ratio 1 for MTP layers, past
      ``num_hidden_layers``): the indexer's key cache ``.attn.indexer.k_cache`` (fp8: 128
      + 4 bytes) and its compressor's state ``.attn.indexer.compressor.state_cache``
      (the indexer is built first);
    * every layer: the window cache ``{prefix}.attn.swa_cache`` (block 64, fp8_ds_mla:
      584 bytes a token, pages aligned to 576);
    * ratio > 1: the compressed latent ``{prefix}.attn`` (one state per ``ratio``
      tokens) and its compressor's fp32 state ``.attn.compressor.state_cache``
      (``2 x coff x head_dim`` wide over a window of ``coff x ratio``, coff 2 at ratio 4).

    Listed in the order the layer's ``__init__`` registers them in
    ``static_forward_context``, which vLLM's packed grouping reads.

    ``_resolve_dsv4_kv_cache_dtype`` (attention.py) rewrites ``cache_dtype`` to
    ``fp8_ds_mla`` (``auto`` and ``fp8`` alike), as the layer's ``__init__`` does.
    """
    import torch
    from vllm.models.deepseek_v4 import attention as dsv4
    from vllm.models.deepseek_v4.compressor import CompressorStateCache
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekSparseSWAFlashMLABackend
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache

    cache_config = vc.cache_config
    kv_dtype, kv_torch_dtype = dsv4._resolve_dsv4_kv_cache_dtype(
        True, cache_config.cache_dtype, cache_config
    )
    head_dim = hf.head_dim
    ratio = 1
    if i < hf.num_hidden_layers:
        ratio = max(1, hf.compress_rates.get(hf.layer_types[i], 0))
    out: list[tuple[str, Any]] = []

    def state_cache(name: str, dim: int) -> None:
        cache = _bare(CompressorStateCache)
        coff = 1 + (ratio == 4)
        cache.__dict__.update(
            state_dim=2 * coff * dim, dtype=torch.float32, prefix=name,
            sliding_window=coff * ratio, block_size=4 if ratio == 4 else 8,
            is_draft_layer=draft,
        )  # fmt: skip
        out.append((name, cache))

    if ratio == 4:
        k_cache = _bare(dsv4.DeepseekV4IndexerCache)
        k_cache.__dict__.update(
            head_dim=hf.index_head_dim + hf.index_head_dim // 128 * 4, dtype=torch.uint8,
            prefix=f"{prefix}.attn.indexer.k_cache", cache_config=cache_config,
            compress_ratio=ratio, is_draft_layer=draft,
        )  # fmt: skip
        out.append((f"{prefix}.attn.indexer.k_cache", k_cache))
        state_cache(f"{prefix}.attn.indexer.compressor.state_cache", hf.index_head_dim)
    swa = _bare(DeepseekV4SWACache)
    swa.__dict__.update(
        backend_cls=DeepseekSparseSWAFlashMLABackend, bounded_replay=False, head_dim=head_dim,
        window_size=hf.sliding_window, prefix=f"{prefix}.attn.swa_cache",
        cache_config=cache_config, dtype=kv_torch_dtype, packed_bytes_per_token=584,
        packed_page_alignment=576, packed_block_stride_alignment=None, block_size=64,
        is_draft_layer=draft,
    )  # fmt: skip
    out.append((f"{prefix}.attn.swa_cache", swa))

    if ratio > 1:
        attn = _bare(_dsv4_attention_cls())
        attn.__dict__.update(
            compress_ratio=ratio, kv_cache_dtype=kv_dtype, kv_cache_torch_dtype=kv_torch_dtype,
            head_dim=head_dim, is_draft_layer=draft,
        )  # fmt: skip
        out.append((f"{prefix}.attn", attn))
        state_cache(f"{prefix}.attn.compressor.state_cache", head_dim)
    return out


def _dsv41_cache_layers(vc, hf, i: int, prefix: str, draft: bool) -> list[tuple[str, Any]]:
    """DeepSeek-V4.1 decoder layer ``i``'s cache-owning modules as vLLM 0.33.0 builds them
    on SM90 (``DeepseekV4FlashMLAAttention``: mega attention declines off SM100 and SM12
    takes FlashInfer, models/deepseek_v41/nvidia/model.py ``_select_dsv4_attn_cls``), with
    the attributes their ``__init__`` sets (models/deepseek_v41/attention.py
    ``DeepseekV4Attention``, ``DeepseekV4IndexerCache``; compressor.py
    ``DeepseekCompressor``, ``CompressorStateCache``; v1/attention/backends/mla/sparse_swa.py
    ``DeepseekV4SWACache``), in the order they register in ``static_forward_context``:

    * ``{prefix}.attn``: the compressed latent, a spec only on a KV source
      (``kv_source_layer_ids``; ``compress_ratios[i]`` tokens a state, 584 bytes);
    * ``.attn.indexer.k_cache``: on a layer that is both an index and a KV source
      (the other index sources read their KV source's);
    * ``.attn.swa_cache``: every layer (block 32, 584 bytes a token, pages aligned to 576;
      ``bounded_replay`` from ``swa_bounded_replay`` under Model Runner V2);
    * ``.attn.compressor.state_cache``: a KV source of ratio 2 (a ring of ``2 x head_dim``
      fp32 rows, ``max(8, next power of two >= K + 2)`` of them).

    ``_use_v41_mxfp8_kv_record`` (SM100 only) is False here as on SM90: the V4 record.
    """
    import math

    import torch
    from vllm.models.deepseek_v41 import attention as dsv41
    from vllm.models.deepseek_v41.compressor import CompressorStateCache
    from vllm.models.deepseek_v41.nvidia.flashmla import (
        DeepseekSparseSWAFlashMLABackend,
        DeepseekV4FlashMLAAttention,
    )
    from vllm.v1.attention.backends.mla.indexer import dsa_indexer_uses_fp4
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache

    cache_config = vc.cache_config
    attn = _bare(DeepseekV4FlashMLAAttention)
    kv_dtype, kv_torch_dtype = dsv41._resolve_dsv4_kv_cache_dtype(
        True, cache_config.cache_dtype, cache_config, attn.packed_kv_cache_dtype
    )
    ratios = getattr(hf, "compress_ratios", None) or []
    ratio = int(ratios[i]) if i < len(ratios) else 0
    backbone = i < hf.num_hidden_layers
    kv_source = backbone and i in (hf.kv_source_layer_ids or ())
    index_source = backbone and i in (hf.index_source_layer_ids or ())
    mxfp8 = dsv41._use_v41_mxfp8_kv_record()
    swa_bytes = 528 if mxfp8 else 584
    compressed_bytes = 288 if kv_dtype == "nvfp4_ds_mla" else swa_bytes
    out: list[tuple[str, Any]] = []
    attn.__dict__.update(
        compress_ratio=ratio, is_kv_source=kv_source, kv_cache_dtype=kv_dtype,
        kv_cache_torch_dtype=kv_torch_dtype, head_dim=hf.head_dim,
        kv_page_alignment=512 if mxfp8 else 576, compressed_bytes_per_token=compressed_bytes,
        is_draft_layer=draft,
    )  # fmt: skip
    out.append((f"{prefix}.attn", attn))
    if index_source and kv_source:
        k_cache = _bare(dsv41.DeepseekV4IndexerCache)
        k_cache.__dict__.update(
            head_dim=dsv41._indexer_k_cache_head_dim(hf.index_head_dim, dsa_indexer_uses_fp4(vc)),
            dtype=torch.uint8, prefix=f"{prefix}.attn.indexer.k_cache",
            cache_config=cache_config, compress_ratio=ratio,
            sparse_logits=vc.attention_config.indexer_sparse_logits, rocm_mxfp4=False,
            is_draft_layer=draft,
        )  # fmt: skip
        out.append((f"{prefix}.attn.indexer.k_cache", k_cache))
    swa = _bare(DeepseekV4SWACache)
    swa.__dict__.update(
        backend_cls=DeepseekSparseSWAFlashMLABackend,
        bounded_replay=cache_config.swa_bounded_replay and _v2_model_runner(vc),
        head_dim=hf.head_dim, window_size=hf.sliding_window, prefix=f"{prefix}.attn.swa_cache",
        cache_config=cache_config, dtype=kv_torch_dtype, packed_bytes_per_token=swa_bytes,
        packed_page_alignment=512 if mxfp8 else 576,
        packed_block_stride_alignment=math.lcm(swa_bytes, compressed_bytes) if mxfp8 else None,
        block_size=32, is_draft_layer=draft,
    )  # fmt: skip
    out.append((f"{prefix}.attn.swa_cache", swa))
    if kv_source and ratio > 1:
        state = _bare(CompressorStateCache)
        rows = vc.num_speculative_tokens + 2
        state.__dict__.update(
            state_dim=2 * hf.head_dim, dtype=torch.float32,
            prefix=f"{prefix}.attn.compressor.state_cache",
            block_size=max(8, 1 << (rows - 1).bit_length()), is_draft_layer=draft,
        )  # fmt: skip
        out.append((f"{prefix}.attn.compressor.state_cache", state))
    return out


def _minimax_m3_sparse_backend(vc, hf):
    """The main sparse backend vLLM's own selector gives (common/sparse_attention.py
    ``select_main_backend_and_impl_cls``): the Triton ``MiniMaxM3SparseBackend`` off
    SM100 and ROCm, as on SM90 (and in this CPU process)."""
    from vllm.models.minimax_m3.common.sparse_attention import select_main_backend_and_impl_cls

    tp = vc.parallel_config.tensor_parallel_size
    backend, _impl = select_main_backend_and_impl_cls(
        topk_blocks=_minimax_m3_index(hf, "index_topk_blocks", "sparse_topk_blocks"),
        kv_cache_dtype=vc.cache_config.cache_dtype,
        num_kv_heads=max(1, hf.num_key_value_heads // tp),
    )
    return backend


def _minimax_m3_sparse_layer(
    vc, mc, hf, prefix: str, backend, draft: bool = False
) -> list[tuple[str, Any]]:
    """A sparse layer's cache-owning modules, in the order its ``__init__`` registers them
    (nvidia/model.py ``MiniMaxM3SparseAttention``): the indexer's side cache
    ``{prefix}.attn.index_cache`` (common/indexer.py ``MiniMaxM3IndexerCache``: one key of
    ``sparse_index_dim`` a token, dtype from ``attention_config.indexer_kv_dtype``, bf16
    by default; 0.34.0's ``get_kv_cache_spec`` reads its width from ``head_size``, the
    same for bf16 and fp8, common/indexer.py:118-127, 160), then the layer itself as
    ``{prefix}.attn`` (its own ``get_kv_cache_spec``: the K/V of
    ``max(1, num_kv_heads // tp)`` heads). ``draft``: an MTP module's layer (the
    proposer marks the layers the draft added, v1/spec_decode/llm_base_proposer.py
    ``load_model``: ``is_draft_layer``)."""
    import torch
    from vllm.models.minimax_m3.common.indexer import MiniMaxM3IndexerBackend, MiniMaxM3IndexerCache
    from vllm.models.minimax_m3.nvidia.model import MiniMaxM3SparseAttention
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    tp = vc.parallel_config.tensor_parallel_size
    _check_tp_heads(prefix, hf.num_attention_heads, hf.num_key_value_heads, tp)
    index_dim = _minimax_m3_index(hf, "index_head_dim", "sparse_index_dim")
    index_dtype = vc.attention_config.resolve_indexer_kv_dtype("bf16")
    cache = _bare(MiniMaxM3IndexerCache)
    cache.__dict__.update(
        head_dim=index_dim, head_size=index_dim, indexer_kv_dtype=index_dtype,
        dtype=torch.float8_e4m3fn if index_dtype in ("fp8", "fp8_e4m3") else torch.bfloat16,
        prefix=f"{prefix}.attn.index_cache", cache_config=vc.cache_config,
        backend_cls=MiniMaxM3IndexerBackend, is_draft_layer=draft,
    )  # fmt: skip
    attn = _bare(MiniMaxM3SparseAttention)
    cache_dtype = vc.cache_config.cache_dtype
    attn.__dict__.update(
        num_heads=hf.num_attention_heads // tp, num_kv_heads=max(1, hf.num_key_value_heads // tp),
        head_dim=hf.head_dim, layer_name=f"{prefix}.attn", kv_cache_dtype=cache_dtype,
        kv_cache_torch_dtype=kv_cache_dtype_str_to_dtype(cache_dtype, mc),
        attn_backend=backend, is_draft_layer=draft,
    )  # fmt: skip
    return [(f"{prefix}.attn.index_cache", cache), (f"{prefix}.attn", attn)]


def _dsv4_attention_cls():
    """The attention class SM90 gets (nvidia/model.py ``_select_dsv4_attn_cls``: FlashMLA
    off SM12), vLLM's own: ``backend_cls = DeepseekV4FlashMLABackend``, the fp8_ds_mla
    layout (nvidia/flashmla.py)."""
    from vllm.models.deepseek_v4.nvidia.flashmla import DeepseekV4FlashMLAAttention

    return DeepseekV4FlashMLAAttention


def _target_window(arch: str, hf, idx: int) -> int | None:
    """The per-layer sliding window each model's code passes to Attention."""
    if arch == "GptOssForCausalLM":  # gpt_oss.py:175: every other layer, even ones
        return hf.sliding_window if idx % 2 == 0 else None
    if arch == "NemotronHForCausalLM":  # nemotron_h.py:478
        return getattr(hf, "sliding_window", None)
    layer_types = getattr(hf, "layer_types", None)
    if arch in ("Gemma2ForCausalLM", "Gemma3ForCausalLM"):  # gemma2.py:155, gemma3.py:153
        return hf.sliding_window if layer_types[idx] == "sliding_attention" else None
    if arch in ("LlamaForCausalLM", "MistralForCausalLM", "LlamaForCausalLMEagle3"):
        # llama.py:185-205 (EAGLE3 heads build llama.py's attention too)
        if layer_types and layer_types[idx] == "sliding_attention":
            return hf.sliding_window
        return None
    # qwen3.py / qwen3_moe.py / qwen3_next.py pass no per-layer window
    return None


def _gemma4_attention(vc, mc, hf, i: int, backend):
    """Gemma-4's layer ``i`` as ``Gemma4Attention.__init__`` sets it (gemma4.py:365-520):
    ``per_layer_config[i]``'s KV heads and head size, the window on sliding layers, and
    for the last ``num_kv_shared_layers`` layers the last earlier layer of the same type
    as the cache they read."""
    layer_type = hf.layer_types[i]
    window = hf.sliding_window if layer_type == "sliding_attention" else None
    first_shared = hf.num_hidden_layers - getattr(hf, "num_kv_shared_layers", 0)
    shares = None
    if i >= first_shared:
        before = list(hf.layer_types[:first_shared])
        target = len(before) - 1 - before[::-1].index(layer_type)
        shares = f"model.layers.{target}.self_attn.attn"
        if vc.parallel_config.pipeline_parallel_size > 1:
            raise Skip(
                "KV-shared layers read earlier layers' caches by name, which PP puts on "
                "other stages (kvbudget refuses it too)"
            )
    own = hf.per_layer_config[i]
    geometry = (own.num_key_value_heads, own.head_dim)
    return _attention_layer(
        vc, mc, f"model.layers.{i}", hf, i, window, backend, False, geometry, shares
    )


def _step3p5_attention(vc, mc, hf, i: int, prefix: str, backend, draft: bool):
    """Step-3.5's layer ``i`` (decoder or MTP) as ``Step3p5DecoderLayer.__init__`` sets
    its ``Step3p5Attention`` (model_executor/models/step3p5.py): the layer type and query
    heads from vLLM's own ``_get_layer_type`` / ``_get_num_attention_heads``, the global
    ``num_attention_groups`` KV heads and ``head_dim``, ``per_layer_sliding_window`` on
    sliding layers."""
    try:
        from vllm.model_executor.models.step3p5 import _get_layer_type, _get_num_attention_heads
    except ImportError:  # vLLM 0.29.0
        return _step3p5_attention_0_29(vc, mc, hf, i, prefix, backend, draft)
    layer_type = _get_layer_type(hf, i)
    heads = _get_num_attention_heads(hf, i, layer_type)
    window = hf.sliding_window if layer_type == "sliding_attention" else None
    geometry = (hf.num_attention_groups, getattr(hf, "head_dim", None) or hf.hidden_size // heads)
    return _attention_layer(vc, mc, prefix, hf, i, window, backend, draft, geometry, None, heads)


def _step3p5_attention_0_29(vc, mc, hf, i: int, prefix: str, backend, draft: bool):
    """vLLM 0.29.0's Step-3.5 layer ``i``, which has no ``_get_layer_type``: as its
    ``Step3p5DecoderLayer.__init__`` and ``Step3p5Attention.__init__`` set it
    (model_executor/models/step3p5.py:404-460, 155-175): the query heads, KV groups and
    head size of ``attention_other_setting`` on layers of its ``attention_type``, else
    the config's; a window on ``sliding_attention`` layers of ``layer_types`` (every
    even layer without them) when the config has ``sliding_window``; no
    ``swa_num_attention_heads``."""
    layer_types = getattr(hf, "layer_types", None) or []
    if layer_types and i >= len(layer_types):  # both __init__s index layer_types[i]
        raise Skip(
            f"vLLM 0.29.0 cannot build layer {i}: IndexError in Step3p5DecoderLayer.__init__ "
            f"(layer_types has {len(layer_types)} entries; kvbudget's vllm@0.29.0 refuses it)"
        )
    other = getattr(hf, "attention_other_setting", None)
    heads, groups, head_dim = hf.num_attention_heads, hf.num_attention_groups, None
    if other and layer_types and layer_types[i] == other["attention_type"]:
        heads = other["num_attention_heads"]
        groups = other["num_attention_groups"]
        head_dim = other["head_dim"]
    head_dim = head_dim or getattr(hf, "head_dim", None) or hf.hidden_size // heads
    sliding = layer_types[i] == "sliding_attention" if layer_types else i % 2 == 0
    window = getattr(hf, "sliding_window", None) if sliding else None
    geometry = (groups, head_dim)
    return _attention_layer(vc, mc, prefix, hf, i, window, backend, draft, geometry, None, heads)


def stage_layers(num_layers: int, pp: int) -> list[range]:
    """The target layers each PP stage owns: vLLM's own ``get_pp_indices`` split
    (vllm/distributed/utils.py:198-240), as ``make_layers`` applies it to the decoder."""
    from vllm.distributed.utils import get_pp_indices

    return [range(*get_pp_indices(num_layers, rank, pp)) for rank in range(pp)]


def build_layers(vc, case: Case, stage: int = 0) -> list[str]:
    """Fill static_forward_context with the cache layers PP stage ``stage`` owns.

    A stage holds the target layers of its ``get_pp_indices`` range (layer names keep
    their global index; the other layers are ``PPMissingLayer`` and cache nothing), and
    the last stage also the draft's: the V2 model runner builds the speculator only on
    the last PP rank (v1/worker/gpu/model_runner.py:297-304; 0.29.0's V1 runner, which
    runs its ngram and draft_model cases, builds its drafter there too,
    v1/worker/gpu_model_runner.py:632), and the draft is not split (its parallel config
    has PP 1, config/speculative.py:1905). Returns the attention backend names used.
    """
    from vllm.model_executor.models import ModelRegistry

    ctx = vc.compilation_config.static_forward_context
    ctx.clear()
    mc = vc.model_config
    hf = mc.hf_text_config
    arch = mc.architecture
    backend_names: list[str] = []
    pp = vc.parallel_config.pipeline_parallel_size
    own = stage_layers(hf.num_hidden_layers, pp)[stage]
    last_stage = stage == pp - 1

    def add(name: str, layer) -> None:
        parts = name.split(".")
        if parts[0] == "drafter":
            if last_stage:
                ctx[name] = layer
        elif int(parts[2]) in own:  # model.layers.{i}...
            ctx[name] = layer

    mla_backend, mla_name = _attention_backend(case, True, vc.cache_config.cache_dtype)
    attn_backend, attn_name = _attention_backend(case, False, vc.cache_config.cache_dtype)

    n = hf.num_hidden_layers
    if arch in ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"):
        backend_names.append(mla_name)
        for i in range(n):
            add(
                f"model.layers.{i}.self_attn.attn",
                _mla_layer(vc, mc, f"model.layers.{i}", hf, mla_backend, False),
            )
    elif arch == "DeepseekV4ForCausalLM":
        backend_names.append("FLASHMLA_SPARSE_DSV4")
        for i in range(n):
            for name, layer in _dsv4_cache_layers(vc, hf, i, f"model.layers.{i}", False):
                add(name, layer)
    elif arch == "DeepseekV41ForCausalLM":
        backend_names.append("FLASHMLA_SPARSE_DSV41")
        for i in range(n):
            for name, layer in _dsv41_cache_layers(vc, hf, i, f"model.layers.{i}", False):
                add(name, layer)
    elif arch == "NemotronHForCausalLM":
        model_cls, _ = ModelRegistry.resolve_model_cls(mc.architecture, model_config=mc)
        backend_names.append(attn_name)
        for i, ch in enumerate(hf.hybrid_override_pattern):  # nemotron_h.py:548-602
            if ch == "M":
                add(f"model.layers.{i}.mixer", _mamba2_layer(vc, model_cls, f"model.layers.{i}"))
            elif ch == "*":
                add(
                    f"model.layers.{i}.mixer.attn",
                    _attention_layer(
                        vc,
                        mc,
                        f"model.layers.{i}",
                        hf,
                        i,
                        _target_window(arch, hf, i),
                        attn_backend,
                        False,
                    ),
                )
    elif arch == "Llama4ForCausalLM":
        backend_names.append(attn_name)
        for i in range(n):
            # llama4.py: ChunkedLocalAttention unless the layer is NoPE
            # (no_rope_layers[i] == 0; transformers fills the default pattern)
            chunked = hf.no_rope_layers[i] != 0 and hf.attention_chunk_size
            layer = _attention_layer(vc, mc, f"model.layers.{i}", hf, i, None, attn_backend, False)
            if chunked:
                layer = _chunked(layer, hf.attention_chunk_size)
            add(f"model.layers.{i}.self_attn.attn", layer)
    elif arch == "Gemma4ForCausalLM":
        backend_names.append(attn_name)
        for i in range(n):
            add(f"model.layers.{i}.self_attn.attn", _gemma4_attention(vc, mc, hf, i, attn_backend))
    elif arch == "Step3p5ForCausalLM":
        backend_names.append(attn_name)
        for i in range(n):
            name = f"model.layers.{i}"
            add(
                f"{name}.self_attn.attn",
                _step3p5_attention(vc, mc, hf, i, name, attn_backend, False),
            )
    elif arch in ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration"):
        # models/kimi_k3/nvidia/model.py KimiDecoderLayer: KDA where is_kda_layer (Kimi K3's
        # KimiK3DeltaAttention with the full-rank gate), else MLA; Kimi K3's text model
        # is the same class under language_model (layer names keep the index at [2])
        backend_names.append(mla_name)
        full_rank = (hf.linear_attn_config or {}).get("use_full_rank_gate", False)
        for i in range(n):
            prefix = f"model.layers.{i}.self_attn"
            if hf.is_kda_layer(i):
                add(prefix, (_k3_kda_layer if full_rank else _kda_layer)(vc, prefix, hf))
            else:
                add(prefix, _kimi_mla_layer(vc, prefix, hf, mla_backend))
    elif arch in ("MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3SparseForCausalLM"):
        # nvidia/model.py MiniMaxM3DecoderLayer: MiniMaxM3SparseAttention on the
        # sparse_attention_freq layers (its index cache, then its K/V), else a plain
        # Attention (MiniMaxM3Attention)
        sparse_backend = _minimax_m3_sparse_backend(vc, hf)
        backend_names += [attn_name, sparse_backend.get_name(), "MINIMAX_M3_SPARSE_INDEXER"]
        sparse_ids = _minimax_m3_sparse_ids(hf)
        for i in range(n):
            prefix = f"model.layers.{i}.self_attn"
            if i in sparse_ids:
                for name, layer in _minimax_m3_sparse_layer(vc, mc, hf, prefix, sparse_backend):
                    add(name, layer)
            else:
                add(
                    f"{prefix}.attn",
                    _attention_layer(vc, mc, f"model.layers.{i}", hf, i, None, attn_backend, False),
                )
    elif arch == "Qwen3NextForCausalLM":
        backend_names.append(attn_name)
        for i, lt in enumerate(hf.layer_types):
            if lt == "linear_attention":
                add(f"model.layers.{i}.linear_attn", _gdn_layer(vc, f"model.layers.{i}", hf))
            else:
                add(
                    f"model.layers.{i}.self_attn.attn",
                    _attention_layer(vc, mc, f"model.layers.{i}", hf, i, None, attn_backend, False),
                )
    else:
        backend_names.append(attn_name)
        for i in range(n):
            add(
                f"model.layers.{i}.self_attn.attn",
                _attention_layer(
                    vc,
                    mc,
                    f"model.layers.{i}",
                    hf,
                    i,
                    _target_window(arch, hf, i),
                    attn_backend,
                    False,
                ),
            )

    spec = vc.speculative_config
    if case.spec in ("eagle3", "eagle"):
        # llama_eagle3.py:196-206 (llama_eagle.py the same for EAGLE-1): the head's
        # layers follow the target's, own geometry
        dmc = spec.draft_model_config
        dhf = dmc.hf_text_config
        for j in range(dhf.num_hidden_layers):
            i = n + j
            add(
                f"drafter.model.layers.{i}.self_attn.attn",
                _attention_layer(
                    vc,
                    dmc,
                    f"drafter.model.layers.{i}",
                    dhf,
                    j,
                    _target_window("LlamaForCausalLMEagle3", dhf, j),
                    attn_backend,
                    True,
                ),
            )
    elif case.spec == "dflash":
        # qwen3_dflash.py DFlashQwen3Model: the draft's layers after the target's, each
        # window as vLLM's own _resolve_layer_attention resolves it
        from vllm.model_executor.models.qwen3_dflash import _resolve_layer_attention

        dmc = spec.draft_model_config
        dhf = dmc.hf_config
        for j in range(dhf.num_hidden_layers):
            i = n + j
            window, _causal = _resolve_layer_attention(dhf, j)
            add(
                f"drafter.model.layers.{i}.self_attn.attn",
                _attention_layer(
                    vc, dmc, f"drafter.model.layers.{i}", dhf, j, window, attn_backend, True
                ),
            )
    elif case.spec == "dspark":
        # models/deepseek_v41/nvidia/dspark.py DSparkDeepseekV4Model.__init__: the stages
        # are DeepseekV4DecoderLayer blocks named layers.{n + j}, n_mtp_layers or
        # num_nextn_predict_layers or 3 of them, built from the draft config (the target's,
        # DSparkV41DraftModel); past num_hidden_layers none is a KV or index source, so each
        # keeps its window cache (is_draft: the speculator marks the layers it added)
        dhf = spec.draft_model_config.hf_config
        stages = (
            getattr(dhf, "n_mtp_layers", None) or getattr(dhf, "num_nextn_predict_layers", None)
            or 3
        )  # fmt: skip
        for j in range(stages):
            prefix = f"drafter.model.layers.{n + j}"
            for name, layer in _dsv41_cache_layers(vc, dhf, n + j, prefix, True):
                add(name, layer)
    elif case.spec == "mtp":
        if arch == "DeepseekV4ForCausalLM":
            # deepseek_v4/nvidia/mtp.py: num_nextn_predict_layers DeepseekV4DecoderLayer
            # blocks named after the model's layers; past num_hidden_layers the compress
            # ratio is 1 (attention.py), so each keeps its window cache only
            for j in range(hf.num_nextn_predict_layers):
                prefix = f"drafter.model.layers.{n + j}.mtp_block"
                for name, layer in _dsv4_cache_layers(vc, hf, n + j, prefix, True):
                    add(name, layer)
        elif arch in ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"):
            # deepseek_mtp.py:151-162: num_nextn_predict_layers MLA layers after the model's
            for j in range(hf.num_nextn_predict_layers):
                i = n + j
                add(
                    f"drafter.model.layers.{i}.mtp_block.self_attn.attn",
                    _mla_layer(vc, mc, f"drafter.model.layers.{i}", hf, mla_backend, True),
                )
        elif arch == "KimiK3ForConditionalGeneration":
            # kimi_k3/nvidia/mtp.py KimiK3MultiTokenPredictor: num_nextn_predict_layers
            # KimiDecoderLayer blocks from index num_hidden_layers (MLA: not is_kda_layer)
            dhf = spec.draft_model_config.hf_text_config
            for j in range(dhf.num_nextn_predict_layers):
                name = f"drafter.model.layers.{n + j}.mtp_block.self_attn"
                if dhf.is_kda_layer(n + j):
                    raise Skip(f"{name}: a KDA MTP block")
                add(name, _kimi_mla_layer(vc, name, dhf, mla_backend, draft=True))
        elif arch == "Glm4MoeForCausalLM":
            # glm4_moe_mtp.py: num_nextn_predict_layers Glm4MoeDecoderLayer blocks from
            # index num_hidden_layers, each the target's full attention
            for j in range(hf.num_nextn_predict_layers):
                i = n + j
                add(
                    f"drafter.model.layers.{i}.mtp_block.self_attn.attn",
                    _attention_layer(
                        vc, mc, f"drafter.model.layers.{i}", hf, i, None, attn_backend, True
                    ),
                )
        elif arch == "Step3p5ForCausalLM":
            # step3p5_mtp.py Step3p5AMultiTokenPredictor: num_nextn_predict_layers
            # Step3p5DecoderLayer blocks from index num_hidden_layers, built from the
            # draft's config (the target's text config as step3p5_mtp), each its own KV
            dmc = spec.draft_model_config
            dhf = dmc.hf_config
            for j in range(dhf.num_nextn_predict_layers):
                name = f"drafter.model.layers.{n + j}.mtp_block"
                add(
                    f"{name}.self_attn.attn",
                    _step3p5_attention(vc, dmc, dhf, n + j, name, attn_backend, True),
                )
        elif spec.use_gemma4_mtp():
            # gemma4_mtp.py: every assistant layer reads a target layer's cache (the
            # proposer sets kv_sharing_target_layer_name), so get_kv_cache_spec skips it
            dmc = spec.draft_model_config
            dhf = dmc.hf_text_config
            for j in range(dhf.num_hidden_layers):
                own = dhf.per_layer_config[j]
                add(
                    f"drafter.model.layers.{j}.self_attn.attn",
                    _attention_layer(
                        vc, dmc, f"drafter.model.layers.{j}", dhf, j, None, attn_backend, True,
                        (own.num_key_value_heads, own.head_dim), "model.layers.0.self_attn.attn",
                    ),
                )  # fmt: skip
        elif arch == "MiniMaxM3SparseForConditionalGeneration":
            # config/speculative.py rewrites minimax_m3_vl to minimax_m3_mtp (the text
            # config promoted, n_predict = num_mtp_modules); minimax_m3/nvidia/mtp.py
            # MiniMaxM3MultiTokenPredictor: num_mtp_modules layers, each a
            # MiniMaxM3DecoderLayer(force_sparse_attn=True) of the draft's config, so
            # each keeps an index cache and its K/V
            dmc = spec.draft_model_config
            dhf = dmc.hf_config
            backend = _minimax_m3_sparse_backend(vc, dhf)
            for j in range(dhf.num_mtp_modules):
                prefix = f"drafter.model.layers.{j}.self_attn"
                for name, layer in _minimax_m3_sparse_layer(vc, dmc, dhf, prefix, backend, True):
                    add(name, layer)
        elif arch == "Qwen3NextForCausalLM":
            # qwen3_next_mtp.py:63-95: full-attention layers, default one
            for j in range(getattr(hf, "num_nextn_predict_layers", 1)):
                i = n + j
                add(
                    f"drafter.model.layers.{i}.self_attn.attn",
                    _attention_layer(
                        vc, mc, f"drafter.model.layers.{i}", hf, i, None, attn_backend, True
                    ),
                )
        else:
            raise Skip(f"{arch} has no MTP layers in vLLM")
    elif case.spec == "draft-target":
        dmc = spec.draft_model_config
        dhf = dmc.hf_text_config
        darch = dmc.architecture
        for j in range(dhf.num_hidden_layers):
            add(
                f"drafter.model.layers.{j}.self_attn.attn",
                _attention_layer(
                    vc,
                    dmc,
                    f"drafter.model.layers.{j}",
                    dhf,
                    j,
                    _target_window(darch, dhf, j),
                    attn_backend,
                    True,
                ),
            )
    return backend_names


# ---- the engine core's sequence ----------------------------------------------------------


def _kind(spec) -> str:
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        CircularBufferSpec,
        FullAttentionSpec,
        MambaSpec,
        MLAAttentionSpec,
        SlidingWindowSpec,
        UniformTypeKVCacheSpecs,
    )

    if isinstance(spec, ChunkedLocalAttentionSpec):
        return "chunked_local"
    if isinstance(spec, UniformTypeKVCacheSpecs):
        kinds = sorted({_kind(s) for s in spec.kv_cache_specs.values()})
        return kinds[0] if len(kinds) == 1 else "+".join(kinds)
    if isinstance(spec, MLAAttentionSpec):
        return "mla"
    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window"
    if isinstance(spec, FullAttentionSpec):
        return "full_attention"
    if isinstance(spec, MambaSpec):
        return "mamba"
    if isinstance(spec, CircularBufferSpec):  # DeepSeek-V4.1's compressor rings
        return "circular_buffer"
    return type(spec).__name__


def _group_rows(groups, specs, vc, sched_groups=None) -> list[dict[str, Any]]:
    """One row per KV cache group: kind, real and padding layers, page bytes, block size.

    ``blocks_per_request`` (context, not compared) is what one request of max_model_len
    takes from the group, as get_max_concurrency_for_kv_cache_config counts it
    (kv_cache_utils.py:1061-1093).
    """
    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    widest = max((len(g.layer_names) for g in groups), default=0)
    rows = []
    for index, g in enumerate(groups):
        s = g.kv_cache_spec
        members = list(s.kv_cache_specs.values()) if isinstance(s, UniformTypeKVCacheSpecs) else [s]
        pages = sorted({m.page_size_bytes for m in members})
        row: dict[str, Any] = {
            "kind": _kind(s),
            "layers": len(g.layer_names),
            "draft_layers": sum(1 for name in g.layer_names if _is_draft(name, specs[name])),
            "padding_layers": widest - len(g.layer_names),
            "page_bytes": max(pages),
            "block_size": s.block_size,
        }
        if len(pages) > 1:
            row["page_bytes_per_layer"] = pages
        # kvbudget reports a chunk size where vLLM's spec says attention_chunk_size
        row["sliding_window"] = getattr(
            members[0], "sliding_window", getattr(members[0], "attention_chunk_size", None)
        )
        # the scheduler's group carries one representative spec (kv_cache_utils.py:1099-1117)
        one = sched_groups[index].kv_cache_spec if sched_groups else members[0]
        row["blocks_per_request"] = cdiv(one.max_memory_usage_bytes(vc), one.page_size_bytes)
        rows.append(row)
    return rows


def _worker_config(vc, stage: int):
    """The VllmConfig the workers of PP stage ``stage`` hold.

    With one rank (``uni`` executor) the worker shares the engine core's config object
    (uniproc_executor.py:75 updates ``self.vllm_config``); with more (``mp``) each worker
    process gets its own copy of it, pickled, with its own ``parallel_config.rank``
    (DP x PP x TP order: ``rank // tp`` is the PP rank, config/model.py:1715-1718), and
    what ``update_block_size_for_backend`` sets there stays in that process.
    """
    if vc.parallel_config.distributed_executor_backend == "uni":
        return vc
    worker = copy.deepcopy(vc)
    worker.parallel_config.rank = stage * vc.parallel_config.tensor_parallel_size
    return worker


# ModelConfig's refusal of a --max-model-len above the config's maximum
# (config/model.py _get_and_verify_max_len), lifted by ALLOW_LONG_ENV
_LONG_LEN_REFUSAL = "greater than the derived max_model_len"
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def _configured(case: Case) -> tuple[Any, bool]:
    """The case's VllmConfig, and whether it needed ALLOW_LONG_ENV: a config vLLM
    refuses for its length alone is built again with the variable set, as the command
    kvbudget emits sets it."""
    try:
        return build_vllm_config(case), False
    except Exception as exc:
        if _LONG_LEN_REFUSAL not in str(exc) or os.environ.get(ALLOW_LONG_ENV):
            raise
    os.environ[ALLOW_LONG_ENV] = "1"
    try:
        return build_vllm_config(case), True
    except Exception as exc:
        exc.allow_long_max_model_len = True  # type: ignore[attr-defined]
        raise
    finally:
        del os.environ[ALLOW_LONG_ENV]


def _draft_embedding(vc: Any, case: Case) -> str | None:
    """What vLLM's ``maybe_share_target_embed`` (v1/worker/gpu/spec_decode/eagle/utils.py,
    which load_eagle_model and the DFlash and DSpark loaders call) makes of the drafter's embedding
    on the last of PP > 1 stages: "shared", "kept" or "missing" (it raised RuntimeError);
    None for PP 1, no such drafter, or a vLLM without the function.

    vLLM's own function decides, on stand-in modules:

    * the drafter's ``has_own_embed_tokens`` as its model class (``ModelRegistry``, the
      draft's architecture as SpeculativeConfig resolved it) sets it: an MTP drafter's
      from the class's own ``__init__`` (:func:`_mtp_own_embed_flag`; MiniMax-M3's sets
      it there, 0.33.0 models/minimax_m3/nvidia/mtp.py:150-152), a head's False where
      its class declares the attribute (it turns True only when a checkpoint stores an
      embed_tokens tensor, ``process_eagle_weight``; the cases' heads store none);
    * the drafter's ``embed_tokens`` (each case's drafter class builds one); an MTP
      drafter's holds the values of the target's (an MTP drafter loads the target's
      checkpoint, whose ``model.embed_tokens.weight`` MiniMax-M3's loader maps onto its
      own, mtp.py:213-214), so ``_should_share``'s ``torch.equal`` finds them equal;
    * the target's last stage holding an embedding only when the target ties it
      (``LlamaModel.__init__``: ``is_first_rank or (tie_word_embeddings and
      is_last_rank)``, as every target class here), or builds it there for the drafter
      (:func:`_target_builds_embed_for_drafter`), else a ``PPMissingLayer``."""
    spec = vc.speculative_config
    drafters = ("eagle", "eagle3", "mtp", "dflash", "dspark")
    if case.pp == 1 or spec is None or spec.method not in drafters:
        return None
    try:
        from vllm.v1.worker.gpu.spec_decode.eagle import utils as eagle_utils
    except ImportError:
        return None
    import torch
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.utils import PPMissingLayer

    dmc = spec.draft_model_config
    draft_cls, _ = ModelRegistry.resolve_model_cls(dmc.architectures, model_config=dmc)
    draft, draft_inner, target_inner = torch.nn.Module(), torch.nn.Module(), torch.nn.Module()
    flag = (
        _mtp_own_embed_flag(vc, draft_cls, case.pp)
        if spec.method == "mtp"
        else (False if hasattr(draft_cls, "has_own_embed_tokens") else None)
    )
    if flag is not None:
        draft.has_own_embed_tokens = flag
    draft_inner.embed_tokens = torch.nn.Embedding(2, 2)
    tied = bool(getattr(vc.model_config.hf_text_config, "tie_word_embeddings", False))
    built = tied or _target_builds_embed_for_drafter(vc, case.pp)
    if built:
        target_inner.embed_tokens = torch.nn.Embedding(2, 2)
        target_inner.embed_tokens.load_state_dict(draft_inner.embed_tokens.state_dict())
    else:
        target_inner.embed_tokens = PPMissingLayer()
    group = mock.Mock(world_size=case.pp)
    with mock.patch.object(eagle_utils, "get_pp_group", return_value=group):
        try:
            eagle_utils.maybe_share_target_embed(draft, draft_inner, target_inner)
        except RuntimeError as exc:
            if "unavailable on this PP stage" not in str(exc):
                raise
            return "missing"
    return "shared" if draft_inner.embed_tokens is target_inner.embed_tokens else "kept"


def _mtp_own_embed_flag(vc: Any, draft_cls: type, pp: int) -> bool | None:
    """The ``has_own_embed_tokens`` an MTP drafter class holds once built on the last of
    ``pp`` stages (None: it has none), from the class's own ``__init__`` run with the
    release's config, ``get_pp_group`` answering ``pp`` ranks, and every other module
    class of its file stubbed (they allocate weights and need the TP group). 0.33.0's
    MiniMaxM3MTP sets it there under Model Runner V2 and PP > 1 to ``load_format !=
    "dummy"`` (nvidia/mtp.py:150-152), and its ``load_weights`` keeps True when the
    checkpoint holds ``model.embed_tokens.weight`` (:323-328), as the bundled target
    checkpoint an MTP drafter loads does; 0.34.0's declares False at class level and sets
    it the same way (mtp.py:143-154). A class whose ``__init__`` fails on the stubs and
    does not assign the attribute has what its class declares; one that assigns it and
    fails is a harness error."""
    import torch
    from vllm.config.vllm import set_current_vllm_config

    module = sys.modules[draft_cls.__module__]

    class Stub(torch.nn.Module):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(2, 2, device="meta")

    stubs = {
        name: Stub
        for name, obj in vars(module).items()
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module) and obj is not draft_cls
    }
    group = mock.Mock(world_size=pp, is_last_rank=True, is_first_rank=pp == 1)
    try:
        with (
            set_current_vllm_config(vc),
            mock.patch.multiple(module, **stubs),
            mock.patch.object(module, "get_pp_group", return_value=group, create=True),
        ):
            built = draft_cls(vllm_config=vc, prefix="")
    except AttributeError:
        if "self.has_own_embed_tokens =" in inspect.getsource(draft_cls):
            raise
        built = draft_cls
    flag = getattr(built, "has_own_embed_tokens", None)
    return None if flag is None else bool(flag)


def _needs_target_embed_call(cls: type, name: str) -> ast.Call | None:
    """The call of ``name`` in the body of ``cls`` or a vLLM class it inherits from (the
    class source: ``@support_torch_compile`` replaces a model's ``__init__``)."""
    for klass in cls.__mro__:
        if not klass.__module__.startswith("vllm."):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        if f"{name}(" not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == name:
                return node
    return None


def _target_builds_embed_for_drafter(vc: Any, pp: int) -> bool:
    """Whether the target builds its ``embed_tokens`` on the last of ``pp`` stages for the
    drafter: its model class calls ``spec_decode_needs_target_embed`` (0.33.0
    model_executor/models/utils.py:863-883, 0.34.0 :934-947; ``LlamaModel.__init__``,
    llama.py:377-381, ``Qwen2Model``, ``DeepseekV4Model``, ``MiniMaxM3Model``, ...), and
    the function, asked as on the last PP rank with the keywords that call passes
    (0.33.0's ``MiniMaxM3Model`` passes ``include_mtp=vllm_config.use_v2_model_runner``,
    models/minimax_m3/nvidia/model.py:814-816: each keyword's expression is evaluated
    with ``vllm_config`` the case's config), says so. 0.29.0 has no such function: False.

    The model class is found from the resolved architecture: the classes its module and,
    one module further, the modules of those classes define or import (a wrapper such as
    ``Llama4ForConditionalGeneration`` builds its language model from another module),
    the first whose body (or an inherited one) calls the function.
    """
    from vllm.model_executor.models import utils as model_utils

    needs = getattr(model_utils, "spec_decode_needs_target_embed", None)
    if needs is None:
        return False
    import torch
    from vllm.model_executor.models import ModelRegistry

    mc = vc.model_config
    cls, _ = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)
    seen: set[str] = set()
    modules = [sys.modules[cls.__module__]]
    call = None
    for _depth in range(2):
        found = []
        for module in modules:
            if module.__name__ in seen or call is not None:
                continue
            seen.add(module.__name__)
            for obj in vars(module).values():
                if not (isinstance(obj, type) and issubclass(obj, torch.nn.Module)):
                    continue
                if obj.__module__.startswith("vllm."):
                    call = call or _needs_target_embed_call(obj, needs.__name__)
                found.append(sys.modules[obj.__module__])
        modules = found
    if call is None:
        return False
    kwargs = {
        k.arg: eval(compile(ast.Expression(k.value), "<call>", "eval"), {"vllm_config": vc})
        for k in call.keywords
        if k.arg is not None
    }
    group = mock.Mock(world_size=pp, is_last_rank=True)
    with mock.patch("vllm.distributed.parallel_state.get_pp_group", return_value=group):
        return bool(needs(vc, **kwargs))


def _derived_max_model_len(model_config: Any) -> int | None:
    """vLLM's derived maximum for the case's model: ``_get_and_verify_max_len`` asked
    with no --max-model-len (None when this vLLM has no such function)."""
    try:
        from vllm.config.model import _get_and_verify_max_len
    except ImportError:
        return None
    return int(
        _get_and_verify_max_len(
            hf_config=model_config.hf_text_config,
            model_arch_config=model_config.model_arch_config,
            tokenizer_config=None,
            max_model_len=None,
            disable_sliding_window=model_config.disable_sliding_window,
            sliding_window=model_config.get_sliding_window(),
            encoder_config=model_config.encoder_config,
        )
    )


def vllm_side(case: Case) -> VllmResult:
    """What the installed vLLM allocates for the case (or refuses), by vLLM's own code."""
    from vllm.config.vllm import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_kv_cache_capacity,
        update_kv_cache_capacity,
    )
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    try:
        vc, allow_long = _configured(case)
    except (TypeError, AttributeError, NameError, ImportError):
        raise  # a harness problem, not vLLM's answer
    except Exception as exc:  # vLLM's own validation refused the flags
        if _pp_refusal(exc):  # a refusal kvbudget predicts (vllm_0_29.py)
            return VllmResult(
                refused=f"{type(exc).__name__}: {_one_line(exc)}",
                allow_long_max_model_len=getattr(exc, "allow_long_max_model_len", False),
            )
        raise Skip(f"vLLM rejects the config: {type(exc).__name__}: {_one_line(exc)}") from exc

    result = VllmResult(
        allow_long_max_model_len=allow_long,
        derived_max_model_len=_derived_max_model_len(vc.model_config),
        draft_embedding=_draft_embedding(vc, case),
    )
    pp = vc.parallel_config.pipeline_parallel_size
    tp = vc.parallel_config.tensor_parallel_size
    # Each PP stage's workers (all its TP ranks build the same layers and specs)
    stage_specs: list[dict[str, Any]] = []
    stage_layouts: list[list[str]] = []
    worker_block_size = None
    for stage in range(pp):
        wvc = _worker_config(vc, stage)
        with set_current_vllm_config(wvc):
            for name in build_layers(wvc, case, stage):
                if name not in result.attention_backends:
                    result.attention_backends.append(name)
            # uniproc_executor.py:75 / multiproc_executor.py:802, after load_model: the
            # CUDA platform inherits Platform.update_block_size_for_backend
            # (interface.py:750), run on the stage's own layers
            with _hybrid_kv_cache_as_on_cuda():
                current_platform.update_block_size_for_backend(wvc)
            # the V2 model runner's spec collection (v1/worker/gpu/attn_utils.py:138-155;
            # 0.29.0 runs ngram and draft_model on the V1 runner, config/vllm.py:2562-2574,
            # whose get_kv_cache_spec, gpu_model_runner.py:7625-7657, collects the same specs)
            stage_specs.append(get_kv_cache_spec(wvc))
            stage_layouts.append(
                [x.name for x in get_supported_kv_cache_layouts(get_current_attn_backends(wvc))]
            )
        if worker_block_size is None:
            worker_block_size = wvc.cache_config.block_size
    # collective_rpc answers in rank order, rank = pp_rank * tp + tp_rank
    kv_cache_specs = [dict(stage_specs[s]) for s in range(pp) for _ in range(tp)]
    layouts = [stage_layouts[s] for s in range(pp) for _ in range(tp)]
    all_specs = {name: spec for specs in stage_specs for name, spec in specs.items()}
    result.stage_layers = [len(specs) for specs in stage_specs]
    # the engine core's side (core.py:252-352), on the engine core's config
    with set_current_vllm_config(vc):
        try:
            layout = resolve_kv_cache_layout(
                vc, layouts, [s for specs in kv_cache_specs for s in specs.values()]
            )
        except AssertionError as exc:
            # vLLM's start-up refusal when the stages' backends share no layout
            # (DeepSeek-V4 with a stage of window-only layers): a configuration vLLM
            # rejects, which kvbudget refuses too (engines/vllm.py)
            if "Workers disagree on supported KV cache layouts" not in str(exc):
                raise
            raise Skip(f"vLLM rejects the config: {_one_line(exc)}") from exc
        result.kv_cache_layout = layout.name
        result.mamba_cache_mode = (
            vc.cache_config.mamba_cache_mode if vc.model_config.is_hybrid else None
        )
        result.max_in_flight_tokens = vc.max_in_flight_tokens
        result.async_scheduling = vc.scheduler_config.async_scheduling
        result.model_runner = "v2" if _v2_model_runner(vc) else "v1"
        # available_memory: --kv-cache-memory-bytes on every worker (gpu_worker.py:656-681)
        world = len(kv_cache_specs)
        groups, configs = _plan_kv_cache(vc, kv_cache_specs, [case.kv_budget] * world)
        if isinstance(configs, ValueError):
            message = _one_line(configs)
            if "To serve at least one request" in message or "No available memory" in message:
                result.refused = message
                result.block_size = worker_block_size
                project = _planning()._project_kv_cache_groups_to_worker
                result.kv_cache_groups = _group_rows(groups, all_specs, vc)
                result.stage_bytes_per_block = [
                    _pool_bytes_per_block(vc, project(groups, specs)) for specs in stage_specs
                ]
                result.bytes_per_block = max(result.stage_bytes_per_block)
                return result
            raise configs
        # the scheduler's config is worker 0's (kv_cache_utils.py:1096-1117)
        sched = generate_scheduler_kv_cache_config(configs)
        # core.py:335-352
        vc.cache_config.num_gpu_blocks = sched.num_blocks
        vc.cache_config.block_size = _scheduler_block_size(sched.kv_cache_groups)
        update_kv_cache_capacity(vc, sched)
        tokens, concurrency = get_kv_cache_capacity(vc, sched)
        assert tokens == vc.cache_config.kv_cache_size_tokens
        result.block_size = vc.cache_config.block_size
        result.num_gpu_blocks = sched.num_blocks
        result.gpu_kv_cache_tokens = tokens
        result.max_concurrency = concurrency
        # groups of the whole model (layer counts over all stages), as kvbudget reports
        # them; with PP 1 they are worker 0's groups
        result.kv_cache_groups = _group_rows(groups, all_specs, vc, sched.kv_cache_groups)
        result.stage_bytes_per_block = [
            _pool_bytes_per_block(vc, configs[s * tp].kv_cache_groups) for s in range(pp)
        ]
        result.bytes_per_block = max(result.stage_bytes_per_block)
        result.log_line = (
            f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
            f"{vc.model_config.max_model_len:,} tokens per request: {concurrency:.2f}x"
        )
    return result


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# --------------------------------------------------------------------------- kvbudget side


def kvbudget_side(case: Case, engine: str = "vllm") -> tuple[dict[str, Any] | None, str | None]:
    """kvbudget's prediction for the case under its engine model ``engine`` (``vllm``,
    ``vllm@0.33.0``, ...), or (None, why not)."""
    try:
        kb = _kvbudget()
        target = str(_model_file(case.target)) if _is_family(case.target) else case.target
        draft = case.draft
        if _is_family(draft):
            draft = str(_model_file(draft))
        p = kb.plan(
            target,
            draft,
            spec=case.spec,
            kv_budget=case.kv_budget,
            host_budget=0,
            tp=case.tp,
            pp=case.pp,
            # the same word vLLM gets: "auto" (the checkpoint's KV dtype: bf16, or fp8
            # for a ModelOpt checkpoint that quantizes its KV cache)
            kv_dtype="auto" if case.kv_dtype == "bf16" else case.kv_dtype,
            tokens_per_block=case.block_size,
            max_seq_len=case.max_model_len,
            max_batch_size=case.max_num_seqs,
            max_draft_len=case.num_speculative_tokens,
            engine=engine,
            max_num_batched_tokens=case.max_num_batched_tokens,
            async_scheduling=case.async_scheduling,
            enable_prefix_caching=case.enable_prefix_caching,
            state_dtype=case.state_dtype,
        )
        obj = p.to_dict()["engine"]
        # schema 3: the engine's own figures are in "detail" (schema 2: "predicted")
        predicted = obj.get("detail", obj.get("predicted"))
        if not isinstance(predicted, dict):
            return None, f"engine.detail is {type(predicted).__name__}"
        return predicted, None
    except Exception as exc:
        try:
            from kvbudget.errors import InfeasibleBudgetError
        except ImportError:
            InfeasibleBudgetError = ()  # type: ignore[assignment,misc]
        if isinstance(exc, InfeasibleBudgetError):
            # kvbudget's answer "this engine will not start" (raised with vLLM's refusal
            # text). An EngineRefusedError carries the whole plan: its detail holds the
            # pool's figures and each refusal by the step that raises it ("pp_refused" at
            # configuration, "refused" at KV sizing, "cuda_graph_refused" at CUDA-graph
            # set-up, which this harness does not run: such a case is compared on the
            # pool's figures)
            planned = getattr(exc, "plan", None)
            if planned is not None:
                detail = dict(planned.to_dict()["engine"]["detail"])
                # the refusals this harness runs vLLM's code for: configuration, KV sizing
                detail["refused"] = detail.get("pp_refused") or detail.get("refused")
                return detail, None
            return {"refused": f"{type(exc).__name__}: {_one_line(exc)}"}, None
        return None, f"{type(exc).__name__}: {_one_line(exc)[:160]}"


_GROUP_KEYS = ("kind", "layers", "padding_layers", "page_bytes", "block_size")
# compared too when kvbudget's rows carry them
_OPTIONAL_GROUP_KEYS = ("draft_layers", "sliding_window")


def _group_key(row: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(row.get(k) for k in keys)


def compare(v: VllmResult, k: dict[str, Any]) -> list[str]:
    """Fields that differ (empty: agree)."""
    length = _length_diffs(v, k)
    if length:
        return length
    if v.refused is not None or k.get("refused") is not None:
        if (v.refused is None) != (k.get("refused") is None):
            return [
                f"refused: vllm={'yes' if v.refused else 'no'} "
                f"kvbudget={'yes' if k.get('refused') else 'no'}"
            ]
        return []
    diffs = []
    for key in ("block_size", "num_gpu_blocks", "gpu_kv_cache_tokens"):
        if k.get(key) != getattr(v, key):
            diffs.append(f"{key}: vllm={getattr(v, key)} kvbudget={k.get(key)}")
    kc = k.get("max_concurrency")
    if not isinstance(kc, (int, float)) or round(kc, 2) != round(v.max_concurrency, 2):
        diffs.append(f"max_concurrency: vllm={v.max_concurrency:.2f} kvbudget={kc}")
    k_rows = k.get("kv_cache_groups") or []
    keys = _GROUP_KEYS + tuple(
        key for key in _OPTIONAL_GROUP_KEYS if k_rows and all(key in r for r in k_rows)
    )
    vg = sorted((_group_key(r, keys) for r in v.kv_cache_groups), key=repr)
    kg = sorted((_group_key(r, keys) for r in k_rows), key=repr)
    if vg != kg:
        diffs.append(f"kv_cache_groups: vllm={vg} kvbudget={kg}")
    return diffs


def _length_diffs(v: VllmResult, k: dict[str, Any]) -> list[str]:
    """The derived maximum and the need for VLLM_ALLOW_LONG_MAX_MODEL_LEN, where both
    sides report them (a kvbudget without the fields is not compared on them), and a
    drafter's embedding under PP > 1 where vLLM's function ran."""
    diffs = []
    embedding = k.get("draft_embedding")
    if v.draft_embedding is not None and embedding != v.draft_embedding:
        diffs.append(f"draft_embedding: vllm={v.draft_embedding} kvbudget={embedding}")
    derived = k.get("derived_max_model_len")
    known = derived is not None and v.derived_max_model_len is not None
    if known and int(derived) != v.derived_max_model_len:
        diffs.append(f"derived_max_model_len: vllm={v.derived_max_model_len} kvbudget={derived}")
    allow = k.get("allow_long_max_model_len")
    if allow is not None and bool(allow) != v.allow_long_max_model_len:
        diffs.append(
            f"allow_long_max_model_len: vllm={v.allow_long_max_model_len} kvbudget={allow}"
        )
    return diffs


# --------------------------------------------------------------------------- report


def _groups_text(rows: list[dict[str, Any]]) -> str:
    parts = []
    for r in rows:
        pad = f"+{r['padding_layers']}pad" if r.get("padding_layers") else ""
        draft = f" ({r['draft_layers']} draft)" if r.get("draft_layers") else ""
        window = f" w{r['sliding_window']}" if r.get("sliding_window") else ""
        parts.append(
            f"{r['kind']}{window} {r['layers']}L{pad}{draft} {r['page_bytes']}B/bs{r['block_size']}"
        )
    return "; ".join(parts)


def _stages_text(stage_layers: list[int], stage_bytes: list[int]) -> str:
    """Per PP stage: cache layers and bytes per block (empty with PP 1)."""
    if len(stage_layers) < 2:
        return ""
    parts = [f"{n}L {b}B/block" for n, b in zip(stage_layers, stage_bytes, strict=True)]
    return f" stages=[{'; '.join(parts)}]"


def _vllm_text(v: VllmResult) -> str:
    stages = _stages_text(v.stage_layers, v.stage_bytes_per_block)
    if v.refused is not None:
        return f"refused: {v.refused[:150]}{stages}"
    return (
        f"block_size={v.block_size} num_gpu_blocks={v.num_gpu_blocks} "
        f"tokens={v.gpu_kv_cache_tokens} concurrency={v.max_concurrency:.2f}x "
        f"groups=[{_groups_text(v.kv_cache_groups)}]{stages}"
        + (f" draft_embedding={v.draft_embedding}" if v.draft_embedding else "")
    )


def _kb_text(k: dict[str, Any]) -> str:
    if k.get("refused") is not None:
        return f"refused: {str(k['refused'])[:120]}"
    kc = k.get("max_concurrency")
    kc_text = f"{kc:.2f}x" if isinstance(kc, (int, float)) else str(kc)
    return (
        f"block_size={k.get('block_size')} num_gpu_blocks={k.get('num_gpu_blocks')} "
        f"tokens={k.get('gpu_kv_cache_tokens')} concurrency={kc_text}"
        + (f" draft_embedding={k['draft_embedding']}" if k.get("draft_embedding") else "")
    )


_TSV_COLUMNS = (
    "case",
    "status",
    "block_size",
    "num_gpu_blocks",
    "gpu_kv_cache_tokens",
    "max_concurrency",
    "bytes_per_block",
    "kv_cache_groups",
    "refused_or_skipped",
)


def _tsv_row(record: dict[str, Any]) -> str:
    v = record.get("vllm") or {}
    conc = v.get("max_concurrency")
    stage_bytes = v.get("stage_bytes_per_block") or []
    # with PP: every stage's bytes per block, first to last
    bytes_per_block = (
        "/".join(map(str, stage_bytes)) if len(stage_bytes) > 1 else v.get("bytes_per_block")
    )
    cells = [
        record["case"],
        record.get("status", "skipped" if "skipped" in record else "error"),
        v.get("block_size"),
        v.get("num_gpu_blocks"),
        v.get("gpu_kv_cache_tokens"),
        f"{conc:.2f}" if isinstance(conc, float) else conc,
        bytes_per_block,
        _groups_text(v.get("kv_cache_groups") or []),
        v.get("refused") or record.get("skipped") or record.get("error"),
    ]
    return "\t".join("" if c is None else str(c) for c in cells)


def run(
    cases: list[Case],
    json_path: str | None,
    verbose: bool,
    tsv_path: str | None = None,
    engine: str = "vllm",
) -> int:
    records = []
    agree = differ = unavailable = skipped = errors = 0
    t0 = time.time()
    for case in cases:
        record: dict[str, Any] = {
            "case": case.id,
            "inputs": asdict(case),
            "vllm_flags": case.vllm_flags,
        }
        try:
            v = vllm_side(case)
        except Skip as why:
            skipped += 1
            record["skipped"] = str(why)
            print(f"{case.id}\n  SKIP  {why}", flush=True)
            records.append(record)
            continue
        except Exception as exc:  # a harness problem, not a vLLM answer: report loudly
            errors += 1
            record["error"] = f"{type(exc).__name__}: {_one_line(exc)}"
            print(f"{case.id}\n  ERROR {record['error']}", flush=True)
            if verbose:
                traceback.print_exc()
            records.append(record)
            continue
        record["vllm"] = asdict(v)
        k, why = kvbudget_side(case, engine)
        if k is None:
            unavailable += 1
            status = "n/a"
            kb_line = f"kvbudget: n/a ({why})"
        else:
            diffs = compare(v, k)
            record["kvbudget"] = k
            record["diffs"] = diffs
            status = "DIFF" if diffs else "OK"
            if diffs:
                differ += 1
            else:
                agree += 1
            kb_line = f"kvbudget: {_kb_text(k)}"
            if diffs:
                kb_line += "\n    " + "\n    ".join(diffs)
        record["status"] = status
        print(f"{case.id}\n  vllm: {_vllm_text(v)}\n  {kb_line}\n  -> {status}", flush=True)
        records.append(record)
    compared = agree + differ
    summary = (
        f"{len(cases)} cases, {agree} agree, {differ} differ "
        f"({unavailable} without a kvbudget prediction, {skipped} skipped, "
        f"{errors} harness errors; {compared} compared) in {time.time() - t0:.0f}s"
    )
    print(summary)
    if tsv_path:
        Path(tsv_path).write_text(
            f"# vLLM {_vllm_version()} side; {summary}\n"
            + "\t".join(_TSV_COLUMNS)
            + "\n"
            + "".join(_tsv_row(r) + "\n" for r in records),
            "utf-8",
        )
    if json_path:
        Path(json_path).write_text(
            json.dumps(
                {"summary": summary, "vllm_version": _vllm_version(), "cases": records},
                indent=1,
                default=str,
            )
            + "\n",
            "utf-8",
        )
    return 1 if differ or errors else 0


def _vllm_version() -> str:
    import vllm

    return getattr(vllm, "__version__", "?")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", choices=("quick", "all"), default="quick")
    parser.add_argument("--json", metavar="OUT", help="write every case's figures here")
    parser.add_argument("--tsv", metavar="OUT", help="one line per case, vLLM side (compact)")
    parser.add_argument(
        "--match",
        metavar="TEXT",
        action="append",
        default=[],
        help="only cases whose id contains TEXT (repeatable, all must match)",
    )
    parser.add_argument("--verbose", action="store_true", help="tracebacks for harness errors")
    parser.add_argument(
        "--engine",
        metavar="NAME@VERSION",
        help="kvbudget's engine model to compare (default: vllm@<the installed vLLM's "
        "version> when kvbudget models it, else its default vllm)",
    )
    args = parser.parse_args(argv)
    logging.getLogger("vllm").setLevel(logging.ERROR)
    cases = quick_cases() if args.cases == "quick" else all_cases()
    cases = [c for c in cases if all(m in c.id for m in args.match)]
    # vLLM prints a few import-time notices on stderr; keep them out of the report
    with contextlib.redirect_stderr(io.StringIO()):
        _planning()
    engine = args.engine or _engine_for(_vllm_version())
    print(f"vLLM {_vllm_version()}: {len(cases)} cases, kvbudget --engine {engine}", flush=True)
    return run(cases, args.json, args.verbose, args.tsv, engine)


def _engine_for(version: str) -> str:
    """kvbudget's engine model of this vLLM release, or its default vLLM model."""
    try:
        from kvbudget.engines import get_engine_model

        return get_engine_model(f"vllm@{version}").id
    except Exception:  # an older kvbudget without the registry, or an unmodelled release
        return "vllm"


if __name__ == "__main__":
    sys.exit(main())
