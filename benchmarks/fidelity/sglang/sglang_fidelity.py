"""kvbudget's SGLang model against SGLang's own sizing code, run on CPU.

    /work/sglang-venv/bin/python benchmarks/fidelity/sglang/sglang_fidelity.py
        [--cases quick|all|memdefault] [--match TEXT ...] [--engine sglang@VERSION]
        [--pre-load-gib X] [--tsv out.tsv] [-v]

``--cases memdefault``: SGLang's own default ``--mem-fraction-static`` against kvbudget's
(``mem_sglang_side``: the emitted flags without ``--mem-fraction-static``, the device
memory nvidia-smi reports for the GPU, the prefill CUDA-graph default of CUDA).

Per case: ``kvbudget.plan(..., engine=...)`` and the command ``kvbudget.engines.emit``
renders for it; that command's flags (and environment prefix) go through SGLang's own
``prepare_server_args`` and ``ServerArgs.resolve_once``, then (as the scheduler and
``ModelRunner`` do) ``runtime_context.publish``, ``ModelConfig.from_server_args`` for
the target, ``resolve_spec_aux_hidden_state_config`` (which reads the draft's config and
runs its context-length check), ``configure_kv_cache_dtype`` and
``KVCacheConfigurator.configure``: the memory profile (``_profile_available_bytes``),
the pool-size solvers, the ``--max-total-tokens`` cap, ``resolve_max_num_reqs`` and the
real pool classes, their buffers on torch's ``meta`` device. A sidecar draft (EAGLE,
EAGLE3, draft model) gets its draft worker's configurator (``is_draft_worker=True``, the
target's ``MemoryPoolConfig``, request pool and allocator), as
``ModelRunner.alloc_memory_pool`` builds it; with multi-layer EAGLE (Step-3.5) one per
``--speculative-num-steps`` runner, each with its ``draft_model_idx``. No SGLang code is
copied; the model configs are kvbudget's shipped presets (``src/kvbudget/data/models``)
and the DeepSeek-V4, V4.1, Step-3.5, Kimi, MiniMax-M3 and Gemma-4 family configs of
tests/family_configs.py in the form SGLang reads (``FAMILY_SGLANG``). A Gemma-4 assistant
draft (FROZEN_KV_MTP) gets its worker's 64-token pool config (``_frozen_config``) and no
HiCache sidecar.

Stubs (``_sglang_stubs.py``): triton and torchvision stand-ins, the platform of an H200,
the meta device's streams, the Triton copy-kernel warm-ups, gpt-oss's ``mxfp4``
registration, and per case the free-GPU-memory query (and the ``gc.collect`` before it),
and the WORLD group.
The free memory is an H200's (``gpu_memory_bytes`` of kvbudget's GPU table) less
``--pre-load-gib`` GiB already in use before the weights load (default: what the plan's
``--mem-fraction-static`` allows for, ``detail["pre_load_bytes"]``, kvbudget's
``--pre-load-bytes``), less the weights kvbudget counts (target + draft, this rank).

Compared per case: ``refused`` (SGLang raising while parsing, resolving or sizing;
kvbudget raising InfeasibleBudgetError), ``max_total_num_tokens``,
``max_running_requests`` (per DP worker), ``swa_tokens``, ``target_pool_bytes`` and
``draft_pool_bytes`` (every buffer of the device KV pools), ``indexer_pool_bytes``
(DSA), ``state_slots`` and ``state_pool_bytes`` (a hybrid's ``MambaPool``), and with
``--hicache-size`` the host pools SGLang's HiCache assembler builds for those device
pools (``host_side``): ``host_tokens``, ``host_swa_tokens``, ``host_draft_tokens``,
``host_state_slots``, ``host_indexer_bytes`` and ``host_bytes`` (the pools book their
buffers instead of pinning them). Exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shlex
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE))

import _sglang_stubs  # noqa: E402

PLATFORM = _sglang_stubs.install()
HOST_BOOKINGS = _sglang_stubs.record_host_pools()

GiB = 1 << 30
BUDGETS_GIB = (8, 40)
KV_DTYPES = ("bf16", "fp8")
HOST_GB = (0, 64)
EAGLE_HEAD = "yuhuili/EAGLE-LLaMA3-Instruct-8B"
EAGLE_TARGETS = ("meta-llama/Llama-3.1-8B-Instruct",)
DRAFT_TARGET_DRAFT = "meta-llama/Llama-3.2-1B-Instruct"
COMPARED = (
    "refused",
    "max_total_num_tokens",
    "max_running_requests",
    "swa_tokens",
    "target_pool_bytes",
    "draft_pool_bytes",
    "indexer_pool_bytes",
    "state_slots",
    "state_pool_bytes",
    "host_tokens",
    "host_swa_tokens",
    "host_draft_tokens",
    "host_state_slots",
    "host_indexer_bytes",
    "host_bytes",
    # get_context_length of the target's text config (utils/hf_transformers/common.py)
    "derived_context_length",
)


@dataclass(frozen=True)
class Case:
    target: str
    spec: str
    draft: str | None
    budget_gib: int
    kv_dtype: str
    host_gb: int
    layout: str  # tp1, tp8, dpa8 (TP 8, DP 8, DP attention)
    context: int | None = None  # --max-seq-len (None: kvbudget's default, the target's)
    draft_len: int | None = None  # --max-draft-len (None: kvbudget's default, 3)

    @property
    def id(self) -> str:
        host = f"host{self.host_gb}" if self.host_gb else "nohost"
        context = f" ctx{self.context}" if self.context else ""
        context += f" k{self.draft_len}" if self.draft_len else ""
        return (
            f"{self.target} {self.spec} {self.budget_gib}GiB {self.kv_dtype} {host} "
            f"{self.layout}{context}"
        )

    def parallel(self) -> dict[str, Any]:
        if self.layout == "tp1":
            return {"tp": 1}
        if self.layout == "tp8":
            return {"tp": 8}
        return {"tp": 8, "dp": 8, "dp_attention": True}


def _kvbudget() -> Any:
    import kvbudget

    return kvbudget


def _preset_file(name: str) -> Path:
    return REPO / "src" / "kvbudget" / "data" / "models" / (name.replace("/", "--", 1) + ".json")


def _specs_for(name: str, model: Any) -> list[tuple[str, str | None]]:
    from kvbudget.deployment import EAGLE3_DRAFTS

    specs: list[tuple[str, str | None]] = [("none", None), ("ngram", None)]
    if name in EAGLE3_DRAFTS:
        specs.append(("eagle3", EAGLE3_DRAFTS[name]))
    if name in EAGLE_TARGETS:
        specs.append(("eagle", EAGLE_HEAD))
    if model.mtp_layers:
        specs.append(("mtp", None))
    if model.model_type == "llama" and name != DRAFT_TARGET_DRAFT and name.endswith("-Instruct"):
        specs.append(("draft-target", DRAFT_TARGET_DRAFT))
    return specs


def _is_moe(model: Any) -> bool:
    cfg = json.loads(_preset_file(model.name).read_text("utf-8"))
    text = cfg.get("text_config", cfg)
    return any(k in text for k in ("num_experts", "n_routed_experts", "num_local_experts"))


# DeepSeek-V4 family configs (tests/family_configs.py, which the tests read too) in the
# form SGLang 0.5.23 reads: the per-layer ``compress_ratios`` list of DeepSeek's own
# config (0 sliding, 4, 128; one entry per decoder and MTP layer) in place of
# transformers' ``layer_types`` / ``compress_rates``, which SGLang's ModelConfig does not
# read (``_derive_model_shapes``: AttributeError on ``compress_ratios``)
sys.path.insert(0, str(REPO / "tests"))
from family_configs import FAMILY_CONFIGS, GEMMA4_MULTIMODAL  # noqa: E402

_DSV4_RATIO = {
    "sliding_attention": 0,
    "compressed_sparse_attention": 4,
    "heavily_compressed_attention": 128,
}


def _sglang_form(cfg: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in cfg.items() if k not in ("layer_types", "compress_rates")}
    mtp = [0] * int(cfg.get("num_nextn_predict_layers", 1))
    out["compress_ratios"] = [_DSV4_RATIO[t] for t in cfg["layer_types"]] + mtp
    return out


FAMILY_SGLANG = {
    name: _sglang_form(FAMILY_CONFIGS[name])
    for name in ("family/deepseek-v4-defaults", "family/deepseek-v4-sliding")
}
# DeepSeek-V4.1 family configs as written: a text_config with DeepSeek's own
# compress_ratios list (0, 1, 2), which SGLang 0.5.23's DeepseekV41Config flattens
# (configs/deepseek_v41.py normalize_deepseek_v41_config); -dspark bundles the DSpark
# drafter's fields (dspark_target_layer_ids, ...), which SGLang's DSPARK runs
DSV41_FAMILIES = (
    "family/deepseek-v41-defaults",
    "family/deepseek-v41-rings",
    "family/deepseek-v41-dspark",
)
DSV41_DSPARK = "family/deepseek-v41-dspark"
FAMILY_SGLANG.update({name: FAMILY_CONFIGS[name] for name in DSV41_FAMILIES})
# Step-3.5 family configs as written: SGLang 0.5.23 reads them with its own Step3p5Config
# (configs/step3p5.py: the legacy num_attention_groups / moe_num_experts fields, other
# fields as attributes); -defaults has no layer_types, which kvbudget refuses for SGLang
STEP3P5_FAMILIES = (
    "family/step3p5-defaults",
    "family/step3p5-hybrid",
    "family/step3p5-upstream",
    "family/step3p5-uniform",
)
FAMILY_SGLANG.update({name: FAMILY_CONFIGS[name] for name in STEP3P5_FAMILIES})
# Kimi-Linear and Kimi K3 family configs as written: SGLang 0.5.23 reads them with its own
# KimiLinearConfig / KimiK3Config (configs/kimi_linear.py, configs/kimi_k3.py)
KIMI_FAMILIES = (
    "family/kimi-linear-defaults",
    "family/kimi-k3",
    "family/kimi-k3-unbounded-gate",
)
FAMILY_SGLANG.update({name: FAMILY_CONFIGS[name] for name in KIMI_FAMILIES})
# Kimi K3 naming a bf16 mamba_ssm_dtype: SGLang's KDA state stays float32
# (KimiLinearCacheParams is built without a dtype: mamba2_state_dtype(None))
KIMI_SSM_BF16 = "family/kimi-k3-ssm-bf16"
FAMILY_SGLANG[KIMI_SSM_BF16] = {
    **FAMILY_CONFIGS["family/kimi-k3"],
    "text_config": {
        **FAMILY_CONFIGS["family/kimi-k3"]["text_config"],
        "mamba_ssm_dtype": "bfloat16",
    },
}
KIMI_FAMILIES += (KIMI_SSM_BF16,)
# MiniMax-M3 family configs as written (architectures MiniMaxM3SparseForConditionalGeneration,
# which is_minimax_sparse keys on; SGLang reads the text config's sparse_attention_config
# as written): kvbudget.engines.sglang_minimax
MINIMAX_M3_FAMILIES = (
    "family/minimax-m3-defaults",
    "family/minimax-m3-pattern",
    "family/minimax-m3-mtp2",
)
FAMILY_SGLANG.update({name: FAMILY_CONFIGS[name] for name in MINIMAX_M3_FAMILIES})
# the EAGLE3 head of the MiniMax-M3 family (one Llama layer, 8 KV heads of 128)
M3_EAGLE3_HEAD = "family/minimax-m3-eagle3-head"
FAMILY_SGLANG[M3_EAGLE3_HEAD] = FAMILY_CONFIGS[M3_EAGLE3_HEAD]
# SGLang only: the pattern config with index V on every sparse layer (no
# sparse_disable_index_value): MiniMaxSparseKVPool's index_kv_pool (index K and V), and
# HiCache refused (build_minimax_sparse_hicache_stack); vLLM keeps index K only whatever
# the field says, so its harness has no such case
_M3_INDEX_VALUE = copy.deepcopy(FAMILY_CONFIGS["family/minimax-m3-pattern"])
del _M3_INDEX_VALUE["text_config"]["sparse_attention_config"]["sparse_disable_index_value"]
FAMILY_SGLANG["family/minimax-m3-index-value"] = _M3_INDEX_VALUE
MINIMAX_M3_FAMILIES += ("family/minimax-m3-index-value",)
# Gemma-4 family configs: the multimodal checkpoint (gemma4, its text_config), and the
# text configs (gemma4_text) as written, which SGLang 0.5.23's HF parser fails on
# (AmbiguousGlobalPerLayerAttributeError) and kvbudget refuses, and inside the multimodal
# wrapper (``-mm``, tests/family_configs.py gemma4_multimodal), the form SGLang reads
GEMMA4_TEXT_FAMILIES = ("family/gemma4-kv-shared", "family/gemma4-moe")
GEMMA4_ASSISTANT = "family/gemma4-assistant"
FAMILY_SGLANG.update(
    {name: FAMILY_CONFIGS[name] for name in ("family/gemma4-defaults", *GEMMA4_TEXT_FAMILIES)}
)
GEMMA4_DRAFTS = {"mtp": GEMMA4_ASSISTANT, "eagle3": "family/gemma4-eagle3-head"}
FAMILY_SGLANG.update({name: FAMILY_CONFIGS[name] for name in GEMMA4_DRAFTS.values()})
FAMILY_SGLANG.update(GEMMA4_MULTIMODAL)


def _is_family(name: str | None) -> bool:
    return name is not None and name.startswith("family/")


def family_cases() -> list[Case]:
    """The DeepSeek-V4 and V4.1 family configs x {none, mtp} x {8, 40} GiB x {bf16, fp8}
    x {TP1, TP8, DP attention}, no host pool (kvbudget does not model SGLang's
    DeepSeek-V4 HiCache); mtp runs EAGLE with the checkpoint's MTP layer (NextN) as the
    draft. V4.1 runs none, and dspark (DSPARK with the checkpoint's bundled DSpark
    stages) where the config has them: SGLang takes no other speculative decoding for it
    (validate_deepseek_v41_features). Then the Step-3.5, Kimi and MiniMax-M3 cases."""
    return (
        [
            Case(name, spec, None, budget, dtype, 0, layout)
            for name in FAMILY_SGLANG
            if name not in (*STEP3P5_FAMILIES, *KIMI_FAMILIES, *MINIMAX_M3_FAMILIES, M3_EAGLE3_HEAD)
            and not name.startswith("family/gemma4")
            for spec in _dsv4_specs(name)
            for budget in BUDGETS_GIB
            for dtype in KV_DTYPES
            for layout in ("tp1", "tp8", "dpa8")
        ]
        + step3p5_cases()
        + kimi_cases()
        + minimax_m3_cases()
        + gemma4_cases()
    )


def gemma4_cases() -> list[Case]:
    """The Gemma-4 multimodal configs (``family/gemma4-defaults`` and the ``-mm`` forms
    of ``-kv-shared`` and ``-moe``) x {none, ngram; for ``-defaults`` mtp with the
    assistant and eagle3 with the head} x {8, 40} GiB x {bf16, fp8} x {no host, 64 GB} x
    {TP1, TP8, DP attention for ``-moe``} (no ngram with DP attention); then the text
    configs as written (gemma4_text), which SGLang fails to parse and kvbudget refuses."""
    multimodal = ("family/gemma4-defaults", *GEMMA4_MULTIMODAL)
    cases = [
        Case(name, spec, GEMMA4_DRAFTS.get(spec), budget, dtype, host, layout)
        for name in multimodal
        for spec in ("none", "ngram") + (tuple(GEMMA4_DRAFTS) if name == multimodal[0] else ())
        for budget in BUDGETS_GIB
        for dtype in KV_DTYPES
        for host in HOST_GB
        for layout in ("tp1", "tp8") + (("dpa8",) if "moe" in name else ())
        if not (spec == "ngram" and layout == "dpa8")
    ]
    text = [Case(name, "none", None, 8, "bf16", 0, "tp1") for name in GEMMA4_TEXT_FAMILIES]
    return cases + text


def _dsv4_specs(name: str) -> tuple[str, ...]:
    if name == DSV41_DSPARK:
        return ("none", "dspark")
    return ("none",) if name in DSV41_FAMILIES else ("none", "mtp")


def kimi_cases() -> list[Case]:
    """The Kimi-Linear and Kimi K3 family configs (and Kimi K3 naming a bf16
    ``mamba_ssm_dtype``) x {none, ngram; mtp for ``family/kimi-k3``, which ships an MTP
    layer} x {8, 40} GiB x {bf16, fp8} x {no host, 64 GB} x {TP1, TP8, DP attention} (no
    ngram with DP attention: SGLang refuses it); kvbudget refuses mtp for SGLang
    (kvbudget.engines.sglang_kimi), which the summary counts."""
    return [
        Case(name, spec, None, budget, dtype, host, layout)
        for name in KIMI_FAMILIES
        for spec in ("none", "ngram") + (("mtp",) if name == "family/kimi-k3" else ())
        for budget in BUDGETS_GIB
        for dtype in KV_DTYPES
        for host in HOST_GB
        for layout in ("tp1", "tp8", "dpa8")
        if not (spec == "ngram" and layout == "dpa8")
    ]


def minimax_m3_cases() -> list[Case]:
    """The MiniMax-M3 family configs x {none, ngram, mtp} x {8, 40} GiB x {bf16, fp8} x
    {no host, 64 GB} x {TP 8, DP attention} (the weights do not fit one H200; ngram with
    DP attention is refused by SGLang, so not run); kvbudget refuses mtp for SGLang
    (SGLang 0.5.23 has no MiniMax-M3 MTP model: kvbudget.engines.sglang_minimax), which
    the summary counts."""
    return [
        Case(name, spec, M3_EAGLE3_HEAD if spec == "eagle3" else None, budget, dtype, host, layout)
        for name in MINIMAX_M3_FAMILIES
        for spec in ("none", "ngram", "mtp", "eagle3")
        for budget in BUDGETS_GIB
        for dtype in KV_DTYPES
        for host in HOST_GB
        for layout in ("tp8", "dpa8")
        if not (spec == "ngram" and layout == "dpa8")
    ]


def step3p5_cases() -> list[Case]:
    """The Step-3.5 family configs x {none, ngram, mtp} x {8, 40} GiB x {bf16, fp8} x
    {no host, 64 GB} x {TP 8, DP attention} (its weights do not fit one H200; ngram with
    DP attention is refused by SGLang, so not run); kvbudget refuses -defaults, -hybrid
    and -upstream for SGLang (kvbudget.engines.sglang_step3p5), which the summary counts;
    mtp runs multi-layer EAGLE, one draft runner per step (``sglang_side``). Then -uniform
    mtp with 2 draft steps, fewer than its 3 MTP layers (the target still prices 3)."""
    return [
        Case(name, spec, None, budget, dtype, host, layout)
        for name in STEP3P5_FAMILIES
        for spec in ("none", "ngram", "mtp")
        for budget in BUDGETS_GIB
        for dtype in KV_DTYPES
        for host in HOST_GB
        for layout in ("tp8", "dpa8")
        if not (spec == "ngram" and layout == "dpa8")
    ] + [
        Case("family/step3p5-uniform", "mtp", None, 40, "bf16", host, layout, draft_len=2)
        for host in HOST_GB
        for layout in ("tp8", "dpa8")
    ]


def all_cases() -> list[Case]:
    """Every preset target x applicable spec x {8, 40} GiB x {bf16, fp8} x {no host,
    64 GB} x {TP1, TP8, DP attention (MoE)}, then the family cases."""
    kb = _kvbudget()
    cases = []
    for name in kb.list_presets():
        model = kb.load_model(name)
        if model.is_head:
            continue
        layouts = ["tp1", "tp8"] + (["dpa8"] if _is_moe(model) else [])
        for spec, draft in _specs_for(name, model):
            for budget in BUDGETS_GIB:
                for dtype in KV_DTYPES:
                    for host in HOST_GB:
                        for layout in layouts:
                            cases.append(Case(name, spec, draft, budget, dtype, host, layout))
    return cases + family_cases() + context_cases()


# --context-length past the target's derived length: SGLang starts only with
# SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which kvbudget's command must set
_LONG_CONTEXTS = (
    ("meta-llama/Llama-3.1-8B-Instruct", "none", None, 262144),  # 131,072 (llama3 rope)
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 262144),
    ("Qwen/Qwen3-8B", "none", None, 65536),  # 40,960
    ("Qwen/Qwen3-8B", "none", None, 40960),  # at the derived length: no variable
)


def context_cases() -> list[Case]:
    """Contexts at and past the target's own (40 GiB, bf16, TP 1)."""
    return [
        Case(target, spec, draft, 40, "bf16", 0, "tp1", context)
        for target, spec, draft, context in _LONG_CONTEXTS
    ]


_QUICK = (
    ("meta-llama/Llama-3.1-8B-Instruct", "none", 8, "bf16", 0, "tp1"),
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle3", 40, "bf16", 0, "tp1"),
    ("meta-llama/Llama-3.1-8B-Instruct", "eagle", 8, "fp8", 0, "tp1"),
    ("meta-llama/Llama-3.1-8B-Instruct", "draft-target", 8, "bf16", 0, "tp1"),
    ("meta-llama/Llama-3.3-70B-Instruct", "eagle3", 8, "fp8", 64, "tp8"),
    ("Qwen/Qwen3-32B", "ngram", 40, "fp8", 0, "tp8"),
    ("openai/gpt-oss-120b", "none", 40, "bf16", 0, "tp1"),
    ("openai/gpt-oss-120b", "eagle3", 8, "bf16", 0, "tp8"),
    ("deepseek-ai/DeepSeek-V3", "mtp", 8, "bf16", 0, "tp8"),
    ("deepseek-ai/DeepSeek-V3", "none", 40, "fp8", 0, "dpa8"),
    ("google/gemma-3-27b-it", "none", 40, "fp8", 0, "tp1"),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "none", 8, "bf16", 0, "tp8"),
    ("Qwen/Qwen3-235B-A22B", "none", 8, "bf16", 0, "dpa8"),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", "mtp", 8, "bf16", 64, "tp8"),
    ("nvidia/Nemotron-H-8B-Base-8K", "ngram", 8, "fp8", 0, "tp1"),
    ("deepseek-ai/DeepSeek-V3.2", "mtp", 8, "fp8", 64, "tp8"),
)


def quick_cases() -> list[Case]:
    by_id = {c.id: c for c in all_cases()}
    out = []
    for target, spec, budget, dtype, host, layout in _QUICK:
        hit = [
            c
            for c in by_id.values()
            if (c.target, c.spec, c.budget_gib, c.kv_dtype, c.host_gb, c.layout)
            == (target, spec, budget, dtype, host, layout)
        ]
        out.extend(hit)
    return out


# ---- kvbudget's side ------------------------------------------------------------------


@dataclass
class KbSide:
    values: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    weights_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    pre_load_bytes: int = 0
    error: str | None = None


def _mamba(pool: Any) -> bool:
    """A Mamba/GDN state pool (SGLang's MambaPool, beside the KV pool); DeepSeek-V4's
    compressor states are state pools that SGLang keeps inside its token-to-KV pool."""
    from kvbudget.engines.sglang_dsv4 import COMPRESSOR_STATE_POOLS

    return bool(pool.kind == "state" and pool.name not in COMPRESSOR_STATE_POOLS)


def kvbudget_side(case: Case, engine: str) -> KbSide:
    kb = _kvbudget()
    from kvbudget.engines import emit

    try:
        p = kb.plan(
            _model_dir(case.target) if _is_family(case.target) else case.target,
            _model_dir(case.draft) if _is_family(case.draft) else case.draft,
            spec=case.spec,
            kv_budget=case.budget_gib * GiB,
            host_budget=case.host_gb * 10**9,
            kv_dtype="auto" if case.kv_dtype == "bf16" else case.kv_dtype,
            engine=engine,
            gpu="H200",
            max_seq_len=case.context,
            **({"max_draft_len": case.draft_len} if case.draft_len else {}),
            **case.parallel(),
        )
    except kb.InfeasibleBudgetError as exc:
        return KbSide(values={"refused": f"InfeasibleBudgetError: {_one_line(exc)}"})
    except Exception as exc:
        return KbSide(error=f"{type(exc).__name__}: {_one_line(exc)}")
    detail = p.to_dict()["engine"]["detail"]
    pools = p.engine.pools
    values = {
        "refused": None,
        "max_total_num_tokens": detail["max_total_num_tokens"],
        "max_running_requests": detail.get("max_running_requests"),
        "swa_tokens": detail.get("swa_tokens"),
        "target_pool_bytes": sum(
            x.bytes for x in pools if x.tier == "gpu" and x.role == "target" and not _mamba(x)
        ),
        "draft_pool_bytes": sum(x.bytes for x in pools if x.tier == "gpu" and x.role == "draft")
        or None,
        "indexer_pool_bytes": detail.get("indexer_bytes"),
        "host_indexer_bytes": detail.get("host_indexer_bytes"),
        "state_slots": detail.get("mamba_cache_slots"),
        "state_pool_bytes": sum(x.bytes for x in pools if x.tier == "gpu" and _mamba(x)) or None,
        "host_tokens": detail.get("host_tokens") or None,
        "host_swa_tokens": detail.get("host_swa_tokens") or None,
        "host_draft_tokens": detail.get("host_draft_tokens") or None,
        "host_state_slots": detail.get("host_state_slots") or None,
        "host_bytes": detail.get("host_bytes") or None,
        "derived_context_length": detail.get("derived_context_length"),
    }
    return KbSide(
        values=values,
        command=emit(p),
        weights_bytes=detail.get("weights_bytes"),
        gpu_memory_bytes=p.budget.gpu_memory_bytes,
        pre_load_bytes=detail.get("pre_load_bytes") or 0,
    )


# ---- SGLang's side ---------------------------------------------------------------------

_TMP = tempfile.TemporaryDirectory(prefix="kvbudget-sglang-fidelity-")


def _model_dir(hub_id: str) -> str:
    """A folder holding the config.json of a preset or a family config (a folder kvbudget
    already planned from is itself)."""
    if Path(hub_id).is_dir():
        return hub_id
    path = Path(_TMP.name) / hub_id.replace("/", "--")
    if not path.exists():
        path.mkdir(parents=True)
        text = (
            json.dumps(FAMILY_SGLANG[hub_id])
            if _is_family(hub_id)
            else _preset_file(hub_id).read_text("utf-8")
        )
        (path / "config.json").write_text(text, "utf-8")
    return str(path)


def _command_argv(command: str) -> tuple[dict[str, str], list[str]]:
    """The environment prefix and the launch_server flags of an emitted command, with
    every ``--*model-path`` pointed at a directory holding the preset's config.json."""
    lines = [x for x in command.splitlines() if not x.startswith("#")]
    words = shlex.split(" ".join(lines).replace("\\ ", " "))
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    assert words[:3] == ["python", "-m", "sglang.launch_server"], words[:3]
    argv = words[3:]
    for i, word in enumerate(argv[:-1]):
        if word in ("--model-path", "--speculative-draft-model-path"):
            argv[i + 1] = _model_dir(argv[i + 1])
    return env, argv


def _tensor_bytes(obj: Any, seen: set[int]) -> int:
    """Bytes of every buffer a pool object holds (its own, its sub-pools')."""
    import torch

    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        # rows of tokens (or pages); the 1-D pointer and stride tables the kernels read
        # are not pool memory
        return obj.numel() * obj.element_size() if obj.dim() >= 2 else 0
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(x, seen) for x in obj)
    if isinstance(obj, dict):
        return sum(_tensor_bytes(x, seen) for x in obj.values())
    module = type(obj).__module__ or ""
    if not module.startswith("sglang.srt.mem_cache"):
        return 0
    names = list(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        names += [s for s in getattr(klass, "__slots__", ()) if isinstance(s, str)]
    total = 0
    for name in dict.fromkeys(names):
        try:
            total += _tensor_bytes(getattr(obj, name), seen)
        except AttributeError:
            continue
    return total


def _state_bytes(pool: Any) -> int:
    """Bytes of a ``MambaPool``'s buffers: every tensor it holds that owns its storage
    (the shared conv windows' overlapping ``as_strided`` views own none), 2-D and up."""
    import torch

    total, seen = 0, set()
    stack = [pool]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj._base is None and obj.dim() >= 2:
                total += obj.numel() * obj.element_size()
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif (type(obj).__module__ or "").startswith("sglang.srt.mem_cache"):
            stack.extend(getattr(obj, "__dict__", {}).values())
    return total


def _configurator(
    sa: Any,
    mc: Any,
    *,
    draft: bool,
    target: Any = None,
    pool_config: Any = None,
    draft_model_idx: int | None = None,
) -> Any:
    from sglang.srt import runtime_context as rc
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache import kv_cache_dtype as kvd
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner_components.layer_setup import (
        resolve_layer_indices,
    )
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    spec = SpeculativeAlgorithm.from_string(rc.get_spec().speculative_algorithm)
    layers = mc.num_nextn_predict_layers if draft and mc.num_nextn_predict_layers else None
    if draft and spec.is_dspark():
        layers = _dspark_stages(mc)
    model = types.SimpleNamespace(start_layer=0, end_layer=layers or mc.num_hidden_layers)
    if draft and mc.hf_config.architectures[0] == "Step3p5MTP":
        # Step3p5MTP's start_layer / end_layer properties read its Step3p5AMultiTokenPredictor's,
        # which has none: resolve_layer_indices falls back to _compute_model_num_layers (1)
        model = types.SimpleNamespace()
    info = resolve_layer_indices(
        model=model, model_config=mc, is_draft_worker=draft, draft_model_idx=draft_model_idx
    )
    aux = resolve_spec_aux_hidden_state_config(
        server_args=sa, model_config=mc, spec_algorithm=spec, is_draft_worker=draft
    )
    resolved, kv_dtype = kvd.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=rc.get_model().kv_cache_dtype,
        model=None,
        model_dtype=mc.dtype,
        is_draft_worker=draft,
        is_dflash=False,
        speculative_draft_attention_backend=(
            rc.get_spec().speculative_draft_attention_backend if draft else None
        ),
        speculative_draft_kv_cache_dtype=rc.get_spec().speculative_draft_kv_cache_dtype,
    )
    return KVCacheConfigurator(
        device="meta",
        gpu_id=0,
        attn_dp_size=rc.get_parallel().attn_dp_size,
        pp_size=1,
        pp_group=None,
        model=model,
        model_config=mc,
        server_args=sa,
        kv_cache_dtype=kv_dtype,
        kv_cache_dtype_str=resolved if resolved is not None else rc.get_model().kv_cache_dtype,
        model_dtype=mc.dtype,
        page_size=rc.get_schedule().page_size,
        sliding_window_size=mc.sliding_window_size if mc.is_hybrid_swa else None,
        spec_algorithm=spec,
        is_draft_worker=draft,
        post_capture_kv_active=False,  # off by default (post-capture resizing)
        spec_aux_config=aux,
        draft_parallel_layout=None,
        is_hybrid_swa=mc.is_hybrid_swa,
        is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
        use_mla_backend=mc.attention_arch == AttentionArch.MLA,
        layer_info=info,
        forward_stream=None,
        req_to_token_pool=target.req_to_token_pool if target is not None else None,
        token_to_kv_pool_allocator=(
            target.token_to_kv_pool_allocator if target is not None else None
        ),
        memory_pool_config=(
            pool_config
            if pool_config is not None
            else target.memory_pool_config
            if target is not None
            else None
        ),
        draft_model_idx=draft_model_idx,
    )


def _dspark_stages(mc: Any) -> int:
    """The DSpark draft model's layers (``DeepseekV4ForCausalLMDSpark.__init__``: its
    ``end_layer`` is ``num_stages``), read with SGLang's own draft-config parser."""
    from sglang.srt.speculative.dspark_components.dspark_config import (
        parse_dspark_draft_config,
    )

    assert mc.hf_config.architectures[0] == "DeepseekV4ForCausalLMDSpark", mc.hf_config
    parsed = parse_dspark_draft_config(draft_hf_config=mc.hf_config)
    if parsed.target_layer_ids is not None:
        return len(parsed.target_layer_ids)
    return int(getattr(mc.hf_config, "num_nextn_predict_layers", 1) or 1)


def host_side(
    target: Any, draft: Any, use_mla: bool, packed: bool, more_drafts: tuple[Any, ...] = ()
) -> dict[str, Any]:
    """The host pools HiCache builds for the device pools (``hybrid_pool_assembler.py``):
    ``build_kv_only_group`` (MTP draft layers packed, as ``_can_pack_hicache_mtp`` decides
    for NEXTN; with multi-layer EAGLE every runner's pool, ``more_drafts`` after
    ``draft``), or ``_split_hicache_size`` + ``build_hybrid_swa_group`` for a sliding
    hybrid, then ``build_full_draft_pools`` for a sidecar draft."""
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as asm
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, MiniMaxSparseKVPool
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    from sglang.srt.runtime_context import get_memory, get_schedule

    page = get_schedule().page_size
    HOST_BOOKINGS.clear()
    pool = target.token_to_kv_pool
    mtp = (
        tuple(x.token_to_kv_pool for x in (draft, *more_drafts))
        if packed and draft is not None
        else ()
    )
    mamba = getattr(target.req_to_token_pool, "mamba_pool", None)
    if mamba is not None:
        # build_hybrid_mamba_stack's sizing steps: prepare_host_pool_config over the
        # hybrid pool's host_pool_decls (MTP draft layers packed), the root KV pool and
        # the MambaPool split --hicache-size by device bytes (_split_hicache_size), then
        # build_kv_host_pool and build_mamba_host_pool
        from sglang.srt.mem_cache.hybrid_cache.host_pool_config import (
            prepare_host_pool_config,
        )

        (info,) = mamba.get_device_pool_infos()
        full_map = asm._stage_local_layer_mapping(
            pool.full_attention_layer_id_mapping, pool.start_layer
        )
        mamba_map = {layer - pool.start_layer: i for i, layer in enumerate(info.layer_ids)}
        config = prepare_host_pool_config(
            decls=pool.host_pool_decls(),
            full_layer_mapping=full_map,
            transfer_layer_id_max=max(full_map.keys() | mamba_map.keys()) + 1,
            transfer_page_size=page,
            packed_draft_device_pools=mtp,
        )
        root = config.pools[0]
        kv_pool = root.decl.device_pool
        kv_size, mamba_size = asm._split_hicache_size(get_memory().hicache_size, (kv_pool, mamba))
        asm.build_kv_host_pool(
            kv_pool=kv_pool,
            page_size=page,
            use_mla=use_mla,
            host_size=kv_size,
            mtp_draft_device_pools=root.packed_draft_device_pools,
        )
        host_mamba = asm.build_mamba_host_pool(
            mamba, info, host_size=mamba_size, layout=get_memory().hicache_mem_layout
        )
        booked = {label: tokens for label, tokens, _ in HOST_BOOKINGS}
        if not any(label not in ("kv", "draft") for label in booked):
            # MambaPoolHost allocates its buffers itself, past the booking hook
            HOST_BOOKINGS.append(("mamba", host_mamba.size, host_mamba.size_per_token))
        return {
            "host_tokens": booked.get("kv"),
            "host_state_slots": host_mamba.size,
            "host_bytes": sum(tokens * per_token for _, tokens, per_token in HOST_BOOKINGS),
        }
    if isinstance(pool, DSATokenToKVPool):
        from sglang.srt.mem_cache.hybrid_cache.host_pool_config import (
            prepare_host_pool_config,
        )

        # _DsaStrategy.build: the MLA host pool and the indexer host pool its
        # host_pool_decls declare (build_host_pool_group)
        config = prepare_host_pool_config(
            decls=pool.host_pool_decls(),
            full_layer_mapping={i: i for i in range(pool.layer_num)},
            transfer_layer_id_max=pool.layer_num,
            transfer_page_size=page,
            packed_draft_device_pools=mtp,
        )
        group = asm.build_host_pool_group(config=config)
        booked = {label: tokens for label, tokens, _ in HOST_BOOKINGS}
        # DSAIndexerPoolHost allocates its buffer itself: page_num x layers x page bytes
        indexer = sum(
            e.host_pool.decl.storage_info.host_bytes(
                page_num=e.host_pool.page_num,
                layer_num=e.host_pool.layer_num,
                page_size=e.host_pool.page_size,
            )
            for e in group.entries
            if type(e.host_pool).__name__ == "DSAIndexerPoolHost"
        )
        return {
            "host_tokens": booked.get("kv"),
            "host_indexer_bytes": indexer or None,
            "host_bytes": sum(tokens * per_token for _, tokens, per_token in HOST_BOOKINGS)
            + indexer,
        }
    if isinstance(pool, MiniMaxSparseKVPool):
        return _minimax_host_side(pool, page, None if packed else draft)
    if isinstance(pool, SWAKVPool):
        full_map, swa_map = asm._swa_layer_mappings(pool)
        kv_size, swa_size = asm._split_hicache_size(
            get_memory().hicache_size, (pool.full_kv_pool, pool.swa_kv_pool)
        )
        group = asm.build_hybrid_swa_group(
            page_size=page,
            full_kv_pool=pool.full_kv_pool,
            swa_kv_pool=pool.swa_kv_pool,
            full_layer_mapping=full_map,
            swa_layer_mapping=swa_map,
            use_mla=use_mla,
            kv_host_size=kv_size,
            swa_host_size=swa_size,
        )
        layers = max(full_map.keys() | swa_map.keys()) + 1
    else:
        layers = pool.layer_num
        group = asm.build_kv_only_group(
            page_size=page,
            kv_pool=pool,
            full_layer_mapping={i: i for i in range(layers)},
            use_mla=use_mla,
            mtp_draft_device_pools=mtp,
        )
    if draft is not None and not packed:
        tree = types.SimpleNamespace(
            cache_controller=types.SimpleNamespace(
                mem_pool_host=group,
                transfer_layer_id_max=layers + len(mtp),
                page_size=page,
            )
        )
        asm.build_full_draft_pools(draft_kv_pool=draft.token_to_kv_pool, tree_cache=tree)
    booked = {label: tokens for label, tokens, _ in HOST_BOOKINGS}
    return {
        # the anchor pool: "kv" (build_kv_host_pool), "full" in a sliding hybrid's group
        "host_tokens": booked.get("kv", booked.get("full")),
        "host_swa_tokens": booked.get("swa"),
        "host_draft_tokens": booked.get("draft"),
        "host_bytes": sum(tokens * per_token for _, tokens, per_token in HOST_BOOKINGS),
    }


def _minimax_host_side(pool: Any, page: int, draft: Any) -> dict[str, Any]:
    """``build_minimax_sparse_hicache_stack``'s host pools (the non-NVFP4 path, PP 1):
    its check of value-bearing index layers, ``build_kv_host_pool`` over the main pool
    with the whole ``--hicache-size``, ``MHATokenToKOnlyPoolHost`` over the index-K pool
    with the main host pool's tokens (it allocates its buffer itself), their
    ``HostPoolGroup``; then, for a sidecar draft, ``build_full_draft_pools`` on that group
    (``kv_cache_builder.py`` ``maybe_register_hicache_draft``)."""
    from sglang.srt.mem_cache.hybrid_cache import hybrid_pool_assembler as asm
    from sglang.srt.mem_cache.pool_host.mha import MHATokenToKOnlyPoolHost
    from sglang.srt.runtime_context import get_memory

    if pool.index_kv_pool is not None:
        raise ValueError(
            "MiniMax sparse HiCache currently supports index-k-only sparse layers; "
            "index_kv_pool (value-bearing) layers are not cached/restored yet."
        )
    main = pool.main_pool
    layers = main.layer_num
    kv_host = asm.build_kv_host_pool(
        kv_pool=main, page_size=page, use_mla=False, host_size=get_memory().hicache_size
    )
    entries = [
        asm.build_pool_entry(
            name=asm.PoolName.KV,
            host_pool=kv_host,
            device_pool=main,
            layer_mapping={i: i for i in range(layers)},
            transfer_layer_id_max=layers,
            is_anchor=True,
        )
    ]
    indexer = 0
    if pool.index_k_pool is not None:
        index_host = MHATokenToKOnlyPoolHost(
            pool.index_k_pool,
            kv_host,
            get_memory().hicache_mem_layout,
            allocator_type=asm._get_allocator_type(),
        )
        indexer = index_host.size * index_host.size_per_token
        entries.append(
            asm.build_pool_entry(
                name=asm.PoolName.INDEXER,
                host_pool=index_host,
                device_pool=pool.index_k_pool,
                layer_mapping=dict(pool.index_k_layer_id_mapping),
                transfer_layer_id_max=layers,
            )
        )
    if draft is not None:
        tree = types.SimpleNamespace(
            cache_controller=types.SimpleNamespace(
                mem_pool_host=asm.HostPoolGroup(entries),
                transfer_layer_id_max=layers,
                page_size=page,
            )
        )
        asm.build_full_draft_pools(draft_kv_pool=draft.token_to_kv_pool, tree_cache=tree)
    booked = {label: tokens for label, tokens, _ in HOST_BOOKINGS}
    return {
        "host_tokens": booked.get("kv"),
        "host_draft_tokens": booked.get("draft"),
        "host_indexer_bytes": indexer or None,
        "host_bytes": sum(tokens * per_token for _, tokens, per_token in HOST_BOOKINGS) + indexer,
    }


def sglang_side(kb: KbSide, pre_load_bytes: int | None) -> dict[str, Any]:
    """What SGLang's own code makes of kvbudget's emitted command, on a GPU where
    ``pre_load_bytes`` (default: kvbudget's allowance) are in use before weights load."""
    import sglang.srt.mem_cache.kv_cache_configurator as kcc
    from sglang.srt import runtime_context as rc
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.hf_transformers.common import get_context_length

    assert kb.command is not None and kb.gpu_memory_bytes is not None
    env, argv = _command_argv(kb.command)
    if pre_load_bytes is None:
        pre_load_bytes = kb.pre_load_bytes
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        pre_load_gib = (kb.gpu_memory_bytes - pre_load_bytes) / GiB
        free_gib = pre_load_gib - (kb.weights_bytes or 0) / GiB
        kcc.get_available_gpu_memory = lambda *a, **k: free_gib
        # the profile's gc.collect() before it measures frees nothing the stubbed query
        # sees, and takes most of a case's time
        kcc.gc = types.SimpleNamespace(collect=lambda: 0)
        try:
            sa = prepare_server_args(argv)
            sa.resolve_once()
            rc.publish(sa, role="scheduler", ranks=rc.SpawnRanks(world_rank=0, gpu_id=0))
            rc.get_parallel().override_permanently(
                world_group=types.SimpleNamespace(cpu_group=None, world_size=1)
            )
            mc = ModelConfig.from_server_args(sa)
            result = _configurator(sa, mc, draft=False).configure(
                pre_model_load_memory=pre_load_gib
            )
            draft_bytes = draft = None
            draft_path = rc.get_spec().speculative_draft_model_path
            algorithm = (rc.get_spec().speculative_algorithm or "").upper()
            if draft_path is None and algorithm in ("EAGLE", "NEXTN"):
                # Qwen3-Next / Qwen3.5 MTP: no path is resolved and the draft worker's
                # ModelConfig.from_server_args falls back to the target's model_path
                draft_path = sa.model_path
            drafts: list[Any] = []
            if draft_path:
                dmc = ModelConfig.from_server_args(sa, model_path=draft_path, is_draft_model=True)
                # multi-layer EAGLE (Step-3.5: _step3p_overrides): one draft ModelRunner per
                # step, each with its own pool (TpModelWorker._init_multi_layer_eagle_model_runners)
                multi = rc.get_spec().enable_multi_layer_eagle
                for idx in range(rc.get_spec().speculative_num_steps if multi else 1):
                    drafts.append(
                        _configurator(
                            sa,
                            dmc,
                            draft=True,
                            target=result,
                            pool_config=_frozen_config(result),
                            draft_model_idx=idx if multi else None,
                        ).configure(pre_model_load_memory=pre_load_gib)
                    )
                draft = drafts[0]
                draft_bytes = sum(
                    _tensor_bytes(x.token_to_kv_pool, _state_seen(result)) for x in drafts
                )
            host: dict[str, Any] = {}
            if rc.get_memory().enable_hierarchical_cache:
                from sglang.srt.configs.model_config import AttentionArch

                packed = draft is not None and bool(dmc.num_nextn_predict_layers)
                # FROZEN_KV_MTP registers no draft pool with HiCache
                # (BaseSpecWorker._draft_model_runners returns none for it)
                sidecar = None if _frozen_config(result) is not None else draft
                use_mla = mc.attention_arch == AttentionArch.MLA
                host = host_side(result, sidecar, use_mla, packed, tuple(drafts[1:]))
        except (ValueError, RuntimeError, AssertionError) as exc:
            if os.environ.get("SGLANG_FIDELITY_TRACE"):
                traceback.print_exc()
            return {"refused": f"{type(exc).__name__}: {_one_line(exc)}"}
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {
        "refused": None,
        "derived_context_length": get_context_length(mc.hf_text_config),
        "max_total_num_tokens": result.max_total_num_tokens,
        "max_running_requests": result.max_running_requests,
        "swa_tokens": result.swa_max_total_num_tokens if mc.is_hybrid_swa else None,
        "target_pool_bytes": _tensor_bytes(result.token_to_kv_pool, _state_seen(result)),
        "draft_pool_bytes": draft_bytes,
        "indexer_pool_bytes": _indexer_bytes(result.token_to_kv_pool) or None,
        "host_indexer_bytes": host.get("host_indexer_bytes"),
        **_state_side(result),
        "host_tokens": host.get("host_tokens"),
        "host_swa_tokens": host.get("host_swa_tokens"),
        "host_draft_tokens": host.get("host_draft_tokens"),
        "host_state_slots": host.get("host_state_slots"),
        "host_bytes": host.get("host_bytes"),
    }


def _frozen_config(target: Any) -> Any:
    """The draft worker's pool config under FROZEN_KV_MTP (a Gemma-4 assistant draft):
    ``FrozenKVMTPWorkerV2.alloc_memory_pool`` sizes its own pool at a dummy 64 tokens
    (it reads the target's cache), else None (the target's config)."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.model_executor.pool_configurator import MemoryPoolConfig

    if (rc.get_spec().speculative_algorithm or "").upper() != "FROZEN_KV_MTP":
        return None
    return MemoryPoolConfig(
        max_total_num_tokens=64,
        max_running_requests=target.memory_pool_config.max_running_requests,
    )


def _indexer_bytes(pool: Any) -> int:
    """The indexer key buffers: DSA's ``index_k_with_scale_buffer``, DeepSeek-V4's
    ``index_pools`` (``DeepSeekV4IndexerPool`` per compress ratio), MiniMax-M3's index
    pools (``MiniMaxSparseKVPool.index_kv_pool`` and ``index_k_pool``)."""
    buffers = [getattr(pool, "index_k_with_scale_buffer", None)]
    buffers += [x.index_k_with_scale_buffer for x in getattr(pool, "index_pools", {}).values()]
    buffers += [getattr(pool, "index_kv_pool", None), getattr(pool, "index_k_pool", None)]
    return _tensor_bytes(buffers, set())


def _state_seen(result: Any) -> set[int]:
    """The ``MambaPool`` a hybrid KV pool refers to, left to ``state_pool_bytes``."""
    mamba = getattr(result.req_to_token_pool, "mamba_pool", None)
    return set() if mamba is None else {id(mamba)}


def _state_side(result: Any) -> dict[str, Any]:
    """The target's ``MambaPool`` (in the hybrid request pool): its slots and bytes."""
    mamba = getattr(result.req_to_token_pool, "mamba_pool", None)
    if mamba is None:
        return {"state_slots": None, "state_pool_bytes": None}
    return {"state_slots": mamba.size, "state_pool_bytes": _state_bytes(mamba)}


# ---- SGLang's own default --mem-fraction-static (--cases memdefault) -------------------


@dataclass(frozen=True)
class MemCase:
    """A deployment planned without --kv-budget or a memory knob on ``gpu``."""

    target: str
    spec: str
    draft: str | None
    gpu: str
    tp: int
    pp: int = 1
    dp_attention: bool = False

    @property
    def id(self) -> str:
        dpa = f" dpa{self.tp}" if self.dp_attention else ""
        return f"memdefault {self.target} {self.spec} {self.gpu} tp{self.tp} pp{self.pp}{dpa}"


_EAGLE3_8B = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
_MEM_CASES = (
    MemCase("Qwen/Qwen3-0.6B", "none", None, "L4", 1),  # 24 GB class
    MemCase("Qwen/Qwen3-0.6B", "none", None, "RTX-4090", 2, 2),
    MemCase("Qwen/Qwen3-8B", "none", None, "RTX-5090", 4),  # 32 GB, TP >= 4
    MemCase("Qwen/Qwen3-8B", "none", None, "L40S", 1),  # 48 GB class
    MemCase("Qwen/Qwen3-32B", "none", None, "L40S", 4),
    MemCase("Qwen/Qwen3-8B", "none", None, "H100", 1),  # 80 GB class
    MemCase("Qwen/Qwen3-32B", "none", None, "H100", 4),
    MemCase("Qwen/Qwen3-32B", "none", None, "H100", 2, 2),
    MemCase("meta-llama/Llama-3.1-8B-Instruct", "eagle3", _EAGLE3_8B, "H100", 1),
    MemCase("meta-llama/Llama-3.1-8B-Instruct", "ngram", None, "A100-40GB", 1),
    MemCase("Qwen/Qwen3-8B", "none", None, "H200", 1),  # 141 GB class
    MemCase("openai/gpt-oss-120b", "eagle3", "nvidia/gpt-oss-120b-Eagle3-long-context", "H200", 1),
    MemCase("deepseek-ai/DeepSeek-V3", "none", None, "H200", 8),  # MLA
    MemCase("deepseek-ai/DeepSeek-V3", "mtp", None, "H200", 8, dp_attention=True),
    MemCase("Qwen/Qwen3-235B-A22B", "none", None, "H200", 8, dp_attention=True),
    MemCase("Qwen/Qwen3-32B", "none", None, "B200", 1),  # 180+ GB class
    MemCase("Qwen/Qwen3-235B-A22B", "none", None, "B300", 4),
    MemCase("deepseek-ai/DeepSeek-V3", "none", None, "B200", 8, 2),
    MemCase("google/gemma-3-27b-it", "none", None, "H200", 1),  # multimodal off by default
    MemCase("meta-llama/Llama-4-Scout-17B-16E-Instruct", "none", None, "H100", 8),
    MemCase("Qwen/Qwen3.5-27B", "none", None, "H200", 1),  # multimodal: the ViT factor
    MemCase("Qwen/Qwen3.5-35B-A3B", "mtp", None, "H100", 2),
    MemCase("Qwen/Qwen3.5-397B-A17B", "none", None, "B200", 8),
    # the family configs of tests/family_configs.py (as SGLang reads them)
    MemCase("family/deepseek-v4-defaults", "none", None, "H200", 8),  # no prefill graph
    MemCase("family/deepseek-v41-defaults", "none", None, "B200", 8),
    MemCase("family/gemma4-defaults", "none", None, "H100", 1),
    MemCase("family/gemma4-moe-mm", "none", None, "H200", 1),
    MemCase("family/kimi-k3", "none", None, "H200", 8),
    MemCase("family/kimi-linear-defaults", "none", None, "H200", 1),  # KDA
    MemCase("family/minimax-m3-defaults", "none", None, "H200", 8),
    MemCase("family/step3p5-uniform", "mtp", None, "H200", 8),
)


def mem_cases() -> list[MemCase]:
    return list(_MEM_CASES)


def mem_kvbudget_side(case: MemCase, engine: str) -> tuple[dict[str, Any], KbSide]:
    """kvbudget's default fraction for ``case`` and its emitted command."""
    kb = _kvbudget()
    from kvbudget.engines import emit

    par: dict[str, Any] = {"tp": case.tp, "pp": case.pp}
    if case.dp_attention:
        par.update(dp=case.tp, dp_attention=True)
    try:
        p = kb.plan(
            _model_dir(case.target) if _is_family(case.target) else case.target,
            case.draft,
            spec=case.spec,
            engine=engine,
            gpu=case.gpu,
            **par,
        )
    except Exception as exc:
        return {}, KbSide(error=f"{type(exc).__name__}: {_one_line(exc)}")
    side = KbSide(command=emit(p), gpu_memory_bytes=p.budget.gpu_memory_bytes)
    emitted = Decimal(str(p.engine.settings["--mem-fraction-static"]))
    values = {"refused": None, "mem_fraction_static": p.budget.memory_fraction}
    return {**values, "emitted_mem_fraction_static": emitted}, side


def mem_sglang_side(kb: KbSide, gpu: str) -> dict[str, Any]:
    """SGLang's resolved ``mem_fraction_static`` for kvbudget's command without its
    ``--mem-fraction-static``, the device memory that nvidia-smi reports for ``gpu``
    (gpus.csv ``driver_total_mib``) and, as on CUDA, the breakable prefill CUDA graph
    by default (``default_prefill_backend``). ``--max-running-requests`` is the
    deployment's (kvbudget's ``max_batch_size``): the fraction is SGLang's pick for the
    deployment as launched without kvbudget's memory flags, before kvbudget lowers the
    flag to a Mamba hybrid's state pool (a figure of the budget it derives)."""
    import sglang.srt.arg_groups.kv_shard_hook as kv_shard_hook
    import sglang.srt.arg_groups.memory_hook as memory_hook
    import sglang.srt.arg_groups.model_overrides.qwen3_vl as qwen3_vl
    import sglang.srt.model_executor.cuda_graph_config as graph_config
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.server_args import prepare_server_args

    from kvbudget.deployment import DEFAULT_MAX_BATCH_SIZE

    assert kb.command is not None
    env, argv = _command_argv(kb.command)
    at = argv.index("--mem-fraction-static")
    del argv[at : at + 2]
    argv[argv.index("--max-running-requests") + 1] = str(DEFAULT_MAX_BATCH_SIZE)
    mib = _kvbudget().get_gpu(gpu).driver_total_mib
    modules = (memory_hook, kv_shard_hook, qwen3_vl)
    saved = [m.get_device_memory_capacity for m in modules]
    saved_backend = graph_config.default_prefill_backend
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    for m in modules:
        m.get_device_memory_capacity = lambda *a, **k: float(mib)
    graph_config.default_prefill_backend = lambda: graph_config.Backend.BREAKABLE
    try:
        sa = prepare_server_args(argv)
        sa.resolve_once()
        fraction = resolved_view(sa).mem_fraction_static
        # the flag that runs SGLang at its own pick: it, to the 3 decimals kvbudget emits
        # (rounded up: a multimodal model's vision factor leaves more decimals)
        flag = Decimal(str(fraction)).quantize(Decimal("0.001"), rounding=ROUND_CEILING)
        return {
            "refused": None,
            "mem_fraction_static": fraction,
            "emitted_mem_fraction_static": flag,
        }
    except (ValueError, RuntimeError, AssertionError) as exc:
        return {"refused": f"{type(exc).__name__}: {_one_line(exc)}"}
    finally:
        for m, f in zip(modules, saved, strict=True):
            m.get_device_memory_capacity = f
        graph_config.default_prefill_backend = saved_backend
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_mem(cases: list[MemCase], engine: str, verbose: bool) -> int:
    """Compare kvbudget's default fraction with SGLang's for each case."""
    agree = differ = skipped = 0
    for case in cases:
        values, kb = mem_kvbudget_side(case, engine)
        if kb.error is not None:
            skipped += 1
            print(f"{case.id}: n/a (kvbudget: {kb.error})")
            continue
        sg = mem_sglang_side(kb, case.gpu)
        rows = compare(
            values, sg, ("refused", "mem_fraction_static", "emitted_mem_fraction_static")
        )
        ok = print_rows(case.id, rows, verbose)
        agree += ok
        differ += not ok
    print(
        f"{len(cases)} cases, {agree} agree, {differ} differ ({skipped} not planned by "
        "kvbudget for SGLang)"
    )
    return 1 if differ else 0


# ---- comparison -----------------------------------------------------------------------


def print_rows(case_id: str, rows: list[tuple[str, Any, Any, bool]], verbose: bool) -> bool:
    """Print a case's verdict and its differing rows (every row with ``verbose``);
    whether every row agrees."""
    ok = all(r[3] for r in rows)
    print(f"{case_id}: {'OK' if ok else 'DIFF'}")
    for key, k, s, same in rows:
        if verbose or not same:
            print(f"    {key}: kvbudget {k}  sglang {s}  {'ok' if same else 'DIFF'}")
    return ok


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def compare(
    kb: dict[str, Any], sg: dict[str, Any], keys: tuple[str, ...] = COMPARED
) -> list[tuple[str, Any, Any, bool]]:
    rows = []
    for key in keys:
        k, s = kb.get(key), sg.get(key)
        if key == "refused":
            rows.append((key, k, s, (k is None) == (s is None)))
            if k is not None or s is not None:
                break
            continue
        rows.append((key, k, s, k == s))
    return rows


def run(
    cases: list[Case], engine: str, pre_load_bytes: int | None, tsv: str | None, verbose: bool
) -> int:
    agree = differ = skipped = refused = 0
    reasons: dict[str, int] = {}
    out = open(tsv, "w", encoding="utf-8") if tsv else None  # noqa: SIM115
    if out:
        out.write("case\tquantity\tkvbudget\tsglang\tverdict\n")
    for case in cases:
        kb = kvbudget_side(case, engine)
        if kb.error is not None:
            skipped += 1
            reason = kb.error.split(";")[0][:90]
            reasons[reason] = reasons.get(reason, 0) + 1
            print(f"{case.id}: n/a (kvbudget: {kb.error})")
            continue
        if kb.command is None:  # kvbudget refuses the budget: nothing emitted to run
            refused += 1
            print(f"{case.id}: refused by kvbudget, not run ({kb.values['refused'][:160]})")
            continue
        else:
            try:
                sg = sglang_side(kb, pre_load_bytes)
            except Exception as exc:
                if verbose:
                    traceback.print_exc()
                sg = {"refused": f"harness: {type(exc).__name__}: {_one_line(exc)}"}
            rows = compare(kb.values, sg)
        ok = print_rows(case.id, rows, verbose)
        agree += ok
        differ += not ok
        if out:
            for key, k, s, same in rows:
                out.write(f"{case.id}\t{key}\t{k}\t{s}\t{'agree' if same else 'differ'}\n")
    if out:
        out.close()
    why = "; ".join(f"{n} x {r}" for r, n in sorted(reasons.items()))
    print(
        f"{len(cases)} cases, {agree} agree, {differ} differ ({refused} refused by kvbudget "
        f"for the budget, nothing to run; {skipped} not planned by kvbudget for SGLang"
        f"{': ' + why if why else ''})"
    )
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", choices=("quick", "all", "memdefault"), default="quick")
    parser.add_argument("--match", action="append", default=[])
    parser.add_argument("--engine", default="sglang")
    parser.add_argument(
        "--pre-load-gib",
        type=float,
        default=None,
        help="GiB in use before the weights load (default: kvbudget's allowance)",
    )
    parser.add_argument("--tsv")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.WARNING)
    if args.cases == "memdefault":
        import sglang

        memory = [c for c in mem_cases() if all(t in c.id for t in args.match)]
        print(f"SGLang {sglang.__version__}: {len(memory)} cases, kvbudget --engine {args.engine}")
        return run_mem(memory, args.engine, args.verbose)
    cases = all_cases() if args.cases == "all" else quick_cases()
    for text in args.match:
        cases = [c for c in cases if text in c.id]
    pre_load = None if args.pre_load_gib is None else int(args.pre_load_gib * GiB)
    import sglang

    use = "kvbudget's allowance" if pre_load is None else f"{pre_load} B"
    print(
        f"SGLang {sglang.__version__}: {len(cases)} cases, kvbudget --engine "
        f"{args.engine}, GPU memory in use before weights load: {use}",
        flush=True,
    )
    return run(cases, args.engine, pre_load, args.tsv, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
