#!/usr/bin/env python3
"""Fidelity harness: kvbudget's TensorRT-LLM plans (V1, and V2 via ``trtllm@v2``) against
TensorRT-LLM's own sizing code.

Run it with a Python that has CPU torch, pydantic and strenum (README.md here)::

    python benchmarks/fidelity/trtllm/trtllm_fidelity.py [--trtllm-src PATH]
        [--match TEXT ...] [--diff-only] [--json OUT] [--tsv OUT]

``--trtllm-src`` is the folder of TensorRT-LLM's sizing code transcribed at pinned commits
(default ``../shared/trtllm-src`` next to this checkout; its SOURCES.md lists the files and
commits). Nothing of it is copied here: the folder goes on ``sys.path`` and its modules are
imported and run.

For every case, kvbudget plans the deployment with ``engine="trtllm@v1"`` (the V1
manager whatever the model's default; ``trtllm@v2`` for the V2 cases); its emitted
settings (``plan.engine.settings``: ``kv_cache_config.*``, ``speculative_config.*``, the
parallel sizes, ``env.TRTLLM_WINDOW_SIZE_SHARES``) are then handed to TensorRT-LLM's
``KvCacheCreator`` (``_torch/pyexecutor/_util.py``) as ``trtllm-serve`` would hand them:
``try_prepare_estimation``, ``build_managers`` (estimation), ``configure_kv_cache_capacity``
(with an executor stub whose dummy run allocates nothing), ``teardown_managers`` and
``build_managers`` again. The V1 ``KVCacheManager`` (``resource_manager.py``) sizes its
pools; the recording fake of the C++ manager keeps ``blocks_per_window``. For the V2 cases
(``use_kv_cache_manager_v2: true``) ``KVCacheManagerV2`` (``kv_cache_manager_v2.py``; a
hybrid's ``MambaHybridCacheManagerV2``, ``mamba_cache_manager.py``) and the transcribed V2
runtime size each manager's pool groups per tier (``impl.harness_pools()``); a V2 case
without a host budget runs again with ``host_cache_size`` unset, to compare the host tier
V2 builds by itself.
Each PP stage is one simulated rank; the ranks' ``allreduce(MIN)`` is reproduced by a
second pass that feeds each stage the smallest value any stage recorded (the
transcription's allreduce hook).

What a CPU process cannot ask TensorRT-LLM is stood in for here, each stand-in named where
it is written: the model engine and its ``ModelConfig`` (``_model_config``), the parts of
``py_executor_creator.create_py_executor`` that run before the creator (``_engine_inputs``:
the FlashMLA block size, the internal ``max_seq_len``), the LLM API's reading of the
settings (``_kv_cache_config``, ``_spec_config``, ``_quant_config``) and the fake GPU's
size (an H200 with nothing else on it, so the emitted settings are what binds).

Each case prints ``quantity kvbudget trtllm verdict`` rows; the run ends with
``N cases, M quantities agree, K differ``. Exit status 1 when a quantity differs.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "src"))

import kvbudget  # noqa: E402
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError  # noqa: E402
from kvbudget.model import _preset_dir, list_presets, load_model  # noqa: E402

# Families without a verbatim Hub config (no preset): the configs the tests read too
# (tests/family_configs.py, plain dicts), written to a folder kvbudget plans from
sys.path.insert(0, str(REPO / "tests"))
from family_configs import FAMILY_CONFIGS, GEMMA4_MULTIMODAL  # noqa: E402

GIB = 1 << 30
H200_BYTES = 150_021_734_400  # the CUDA-visible total of an H200 SXM (kvbudget's preset)
MAX_SEQ_LEN = 32_768  # min(this, the model's maximum), as the vLLM harness plans
DRAFT_MODEL = "meta-llama/Llama-3.2-1B-Instruct"
LAYOUTS: dict[str, dict[str, Any]] = {
    "tp1": {"tp": 1},
    "tp8": {"tp": 8},
    "tp4pp2": {"tp": 4, "pp": 2},
    "dp8attn": {"tp": 8, "dp": 8, "dp_attention": True, "ep": 8},  # MoE models only
}
BUDGETS = {"8GiB": 8 * GIB, "40GiB": 40 * GIB}
HOSTS = {"host0": 0, "host64GiB": 64 * GIB}
DISKS = {"disk0": 0, "disk256GiB": 256 * GIB}  # V2 cases only: V1 has no disk tier
V2_ENGINE = "trtllm@v2"  # kvbudget's KVCacheManagerV2 model
NODE_MEMORY = 160 * GIB  # the node V2's automatic host tier is checked on (host0 V2 cases)
NODE_GPUS = 8
DISK_DIR = tempfile.gettempdir()  # stands in for the emitted disk_cache_path
HYBRID_MTP_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
# ngram on a few presets (V1 default, V2 defaults, windows, MLA): no draft manager, so the
# target's sizing with the speculation's headroom is what changes
NGRAM_PRESETS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "Qwen/Qwen3-8B",
    "openai/gpt-oss-20b",
    "google/gemma-3-27b-it",
    "deepseek-ai/DeepSeek-V3",
)
# Gemma-4 family cases (V2 only: TensorRT-LLM builds it no V1 manager): the multimodal
# checkpoint with Gemma4TextConfig's defaults, KV sharing (text and multimodal), the MoE
# variant; the multimodal wrapper's text_config is what the manager reads
FAMILIES: dict[str, dict[str, Any]] = (
    {
        name: FAMILY_CONFIGS[name]
        for name in ("family/gemma4-defaults", "family/gemma4-kv-shared", "family/gemma4-moe")
    }
    | dict(GEMMA4_MULTIMODAL)
    # the MoE variant with the flag Gemma4ForCausalLM wants for moe_ep_size > 1 (its
    # attention DP + EP 8 cases run; without it they are refused)
    | {"family/gemma4-moe-block": {**FAMILY_CONFIGS["family/gemma4-moe"], "enable_moe_block": True}}
)
FAMILY_DRAFTS = {"family/gemma4-eagle3-head", "family/gemma4-assistant"}
FAMILY_SPECS: dict[str, list[tuple[str, str | None]]] = {
    # ngram runs (no draft in the model); EAGLE3 and the MTP assistant are refused
    # (Gemma4ForCausalLM builds no one-model draft) and listed as skipped
    "family/gemma4-defaults": [
        ("ngram", None),
        ("eagle3", "family/gemma4-eagle3-head"),
        ("mtp", "family/gemma4-assistant"),
    ],
}


# ----------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    target: str
    draft: str | None
    spec: str
    kv_dtype: str
    host: str
    layout: str
    budget: str
    engine: str = "trtllm@v1"  # "trtllm@v2": the V2 manager's model
    disk: str = "disk0"

    @property
    def id(self) -> str:
        draft = f"+{self.draft.split('/')[-1]}" if self.draft else ""
        manager = " V2" if self.engine == V2_ENGINE else ""
        disk = "" if self.disk == "disk0" else f" {self.disk}"
        return (
            f"{self.target.split('/')[-1]}{draft} {self.spec} {self.kv_dtype} {self.layout} "
            f"{self.host}{disk} kv{self.budget}{manager}"
        )

    def plan_args(self) -> dict[str, Any]:
        target = _source(self.target)
        seq = min(MAX_SEQ_LEN, load_model(target).max_position_embeddings)
        return {
            "target": target,
            "draft": None if self.draft is None else _source(self.draft),
            "spec": self.spec,
            "engine": self.engine,
            "kv_budget": BUDGETS[self.budget],
            "host_budget": HOSTS[self.host],
            "disk_budget": DISKS[self.disk],
            "kv_dtype": self.kv_dtype,
            "max_seq_len": seq,
            **LAYOUTS[self.layout],
            **({"host_memory": NODE_MEMORY} if self.auto_host else {}),
        }

    @property
    def auto_host(self) -> bool:
        """A V2 case without a host budget: V2's automatic host tier is checked too."""
        return self.engine == V2_ENGINE and HOSTS[self.host] == 0


_TMP = tempfile.TemporaryDirectory(prefix="kvbudget-trtllm-fidelity-")


def _source(name: str) -> str:
    """What kvbudget plans from: a preset's name, or a folder holding a family config's
    config.json (written once)."""
    if name not in FAMILIES and name not in FAMILY_DRAFTS:
        return name
    folder = Path(_TMP.name) / name.replace("/", "--")
    if not folder.is_dir():
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(_raw(name)), encoding="utf-8")
    return str(folder)


def _raw(name: str) -> dict[str, Any]:
    """The preset's (or family config's) config.json, as TensorRT-LLM's ModelConfig would
    read it."""
    if name in FAMILIES:
        return copy.deepcopy(FAMILIES[name])
    if name in FAMILY_DRAFTS:
        return copy.deepcopy(FAMILY_CONFIGS[name])
    path = _preset_dir() / f"{name.replace('/', '--', 1)}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _is_moe(raw: dict[str, Any]) -> bool:
    text = raw.get("text_config") or raw
    return any(text.get(k) for k in ("n_routed_experts", "num_local_experts", "num_experts"))


def _specs(name: str) -> list[tuple[str, str | None]]:
    """(spec, draft) pairs a preset is run with: none; eagle3 where a head preset exists;
    MTP for DeepSeek / GLM; Llama-3.2-1B as the draft model of a Llama-3 target."""
    from kvbudget.deployment import EAGLE3_DRAFTS

    raw = _raw(name)
    out: list[tuple[str, str | None]] = [("none", None)]
    if name in FAMILIES:
        return out + FAMILY_SPECS.get(name, [])
    if name in EAGLE3_DRAFTS:
        out.append(("eagle3", EAGLE3_DRAFTS[name]))
    family = raw.get("model_type", "")
    if family in ("deepseek_v3", "glm4_moe") and raw.get("num_nextn_predict_layers"):
        out.append(("mtp", None))
    text_family = (raw.get("text_config") or raw).get("model_type", "")
    if text_family in HYBRID_MTP_FAMILIES and load_model(name).mtp_layers:
        out.append(("mtp", None))  # Qwen3-Next / Qwen3.5: MambaHybridCacheManagerV2 + MTP
    if family == "llama" and raw.get("vocab_size") == 128256 and "3.2-1B" not in name:
        out.append(("draft-target", DRAFT_MODEL))
    if name in NGRAM_PRESETS:
        out.append(("ngram", None))
    return out


def all_cases() -> list[Case]:
    """Every preset the V1 model plans x spec x dtype x host x layout x budget; then every
    preset the V2 model plans, likewise (hybrids included)."""
    cases = []
    for name in list_presets():
        model = load_model(name)
        if model.is_head:
            continue
        try:
            kvbudget.plan(
                name, spec="none", engine="trtllm@v1", kv_budget="40GiB", max_seq_len=4096
            )
        except InvalidArgumentError:
            continue  # hybrids (V2 manager), sparse indexers: not the V1 model's
        layouts = [k for k in LAYOUTS if k != "dp8attn" or _is_moe(_raw(name))]
        for spec, draft in _specs(name):
            for dtype in ("bf16", "fp8"):
                for host in HOSTS:
                    for layout in layouts:
                        for budget in BUDGETS:
                            cases.append(Case(name, draft, spec, dtype, host, layout, budget))
    return cases + _v2_cases()


def _v2_cases() -> list[Case]:
    """The presets ``trtllm@v2`` plans x spec x dtype x host x disk x layout x budget."""
    cases = []
    for name in [*list_presets(), *FAMILIES]:
        if name not in FAMILIES and load_model(name).is_head:
            continue
        try:
            kvbudget.plan(
                _source(name), spec="none", engine=V2_ENGINE, kv_budget="40GiB", max_seq_len=4096
            )
        except InvalidArgumentError:
            continue  # sparse indexers: not the V2 model's yet
        except InfeasibleBudgetError:
            pass  # a hybrid whose states outgrow 40 GiB at TP1: its cases say so
        layouts = [k for k in LAYOUTS if k != "dp8attn" or _is_moe(_raw(name))]
        for spec, draft in _specs(name):
            for dtype in ("bf16", "fp8"):
                for host in HOSTS:
                    for disk in DISKS:
                        for layout in layouts:
                            for budget in BUDGETS:
                                case = Case(name, draft, spec, dtype, host, layout, budget)
                                cases.append(replace(case, engine=V2_ENGINE, disk=disk))
    return cases


# ----------------------------------------------------------------------------- TensorRT-LLM


@dataclass
class Trt:
    """The transcribed TensorRT-LLM modules."""

    gpu: Any
    comm: Any
    util: Any
    rm: Any
    args: Any
    mapping: Any
    logger: Any


def load_trtllm(path: Path) -> Trt:
    """Import the transcription at ``path`` (its ``tensorrt_llm`` package)."""
    if not (path / "tensorrt_llm" / "_torch" / "pyexecutor" / "_util.py").is_file():
        raise SystemExit(f"--trtllm-src {path}: no tensorrt_llm/_torch/pyexecutor/_util.py there")
    sys.path.insert(0, str(path))
    import tensorrt_llm._torch._harness_gpu as gpu
    import tensorrt_llm._torch.distributed.communicator as comm
    import tensorrt_llm._torch.pyexecutor._util as util
    import tensorrt_llm._torch.pyexecutor.resource_manager as rm
    import tensorrt_llm.llmapi.llm_args as args
    import tensorrt_llm.mapping as mapping
    from tensorrt_llm.logger import logger

    return Trt(gpu=gpu, comm=comm, util=util, rm=rm, args=args, mapping=mapping, logger=logger)


def _pretrained(name: str) -> SimpleNamespace:
    """The HF config as attributes. A multimodal preset (Gemma-3, Llama-4) is its
    ``text_config``: the language model owns the KV cache (the vision tower caches
    nothing). ``torch_dtype`` becomes a torch dtype, as transformers gives it."""
    import torch

    raw = _raw(name)
    text = dict(raw.get("text_config") or raw)
    text.setdefault("architectures", raw.get("architectures"))
    if text.get("model_type") == "gemma4_text":
        text = _gemma4_text(text)
    # Qwen3.5's vision-language checkpoint: TensorRT-LLM builds its language model as the
    # text architecture (Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM, the names
    # config_utils.is_qwen3_5 checks), whose config is this text_config
    text["architectures"] = [
        a.replace("ForConditionalGeneration", "ForCausalLM") if a.startswith("Qwen3_5") else a
        for a in text.get("architectures") or []
    ] or None
    # Gemma-3's text_config names no vocab_size (transformers' default 262,208; only the
    # estimation's dummy prompts read it, as token ids)
    text.setdefault("vocab_size", raw.get("vocab_size", 262_208))
    # transformers reads a config's "dtype" (Qwen3.5's text_config) as torch_dtype too
    dtype = next((c[k] for c in (text, raw) for k in ("torch_dtype", "dtype") if c.get(k)), None)
    text["torch_dtype"] = getattr(torch, dtype) if isinstance(dtype, str) else None
    return SimpleNamespace(**text)


# transformers 5.20.2 Gemma4TextConfig's defaults for the fields TensorRT-LLM's sizing path
# reads (config_utils.is_gemma4_hybrid, _util.py _create_kv_cache_manager, modeling_gemma4.py)
GEMMA4_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_144,
    "num_hidden_layers": 30,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "global_head_dim": 512,
    "num_global_key_value_heads": None,
    "attention_k_eq_v": False,
    "num_kv_shared_layers": 0,
    "enable_moe_block": False,
    "sliding_window": 512,
    "use_bidirectional_attention": None,
    "max_position_embeddings": 131_072,
    "layer_types": None,
}


def _gemma4_text(text: dict[str, Any]) -> dict[str, Any]:
    """A Gemma-4 text config as transformers' ``Gemma4TextConfig`` hands it to
    TensorRT-LLM: its defaults, and ``__post_init__``'s rewrites (the window halved plus
    one under bidirectional "all"; ``layer_types`` every sixth layer full when absent,
    the last layer forced full). ``global_head_dim`` stays an attribute, as
    ``is_gemma4_hybrid`` and ``_create_kv_cache_manager`` read it."""
    out = {**GEMMA4_TEXT_DEFAULTS, **text}
    if out["use_bidirectional_attention"] == "all":
        out["sliding_window"] = out["sliding_window"] // 2 + 1
    n = out["num_hidden_layers"]
    types = list(out["layer_types"] or [])
    if not types:
        types = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(n)]
    types[-1] = "full_attention"
    out["layer_types"] = types
    return out


class _QuantMode:
    def __init__(self, kv_algo: str | None) -> None:
        self.kv_algo = kv_algo

    def has_fp8_kv_cache(self) -> bool:
        return self.kv_algo == "FP8"

    def has_fp4_kv_cache(self) -> bool:
        return self.kv_algo == "NVFP4"

    def has_kv_cache_quant(self) -> bool:
        return self.kv_algo is not None


def _quant_config(name: str, dtype_setting: str) -> SimpleNamespace:
    """``QuantConfig.kv_cache_quant_algo`` as the LLM API leaves it: the checkpoint's
    ModelOpt ``kv_cache_quant_algo``; ``kv_cache_config.dtype: fp8`` sets FP8 and "auto"
    keeps the checkpoint's (``TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype``,
    llmapi/llm_args.py)."""
    qc = _raw(name).get("quantization_config") or {}
    inner = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else {}
    algo = inner.get("kv_cache_quant_algo")
    if dtype_setting == "fp8":
        algo = "FP8"
    return SimpleNamespace(kv_cache_quant_algo=algo, quant_mode=_QuantMode(algo))


class _ModelConfig:
    """Stand-in for ``tensorrt_llm/_torch/model_config.py`` ``ModelConfig``: the
    attributes the sizing path reads. ``enable_flash_mla`` and
    ``get_num_attention_layers`` re-express that file's properties (stored id 54702305068):
    FlashMLA is on for the TRTLLM backend with a 576-wide MLA head on SM 9.0; a non-hybrid
    model's attention layers are ``num_hidden_layers``."""

    def __init__(
        self, pretrained: SimpleNamespace, quant: SimpleNamespace, mapping: Any, spec_config: Any
    ) -> None:
        self.pretrained_config = pretrained
        self.quant_config = quant
        self.mapping = mapping
        self.spec_config = spec_config
        self.attn_backend = "TRTLLM"
        self.sparse_attention_config = None
        self.is_generation = True
        self.is_encoder_decoder = False
        self.multimodal_config = None

    @property
    def enable_flash_mla(self) -> bool:
        import torch

        c = self.pretrained_config
        rank, rope = getattr(c, "kv_lora_rank", None), getattr(c, "qk_rope_head_dim", None)
        if self.attn_backend != "TRTLLM" or not (rank and rope):
            return False
        return bool(rank + rope == 576 and torch.cuda.get_device_capability() == (9, 0))

    @property
    def torch_dtype(self) -> Any:
        import torch

        return self.pretrained_config.torch_dtype or torch.bfloat16

    def _hybrid_masks(self) -> tuple[list[bool], list[bool]] | None:
        """(attention, recurrent) layer masks of a hybrid Mamba / Gated-DeltaNet config
        (``config_utils.extract_mamba_kv_cache_params``), None for other models."""
        from tensorrt_llm._torch.pyexecutor import config_utils

        if not config_utils.is_hybrid_linear(self.pretrained_config):
            return None
        params = config_utils.extract_mamba_kv_cache_params(self.pretrained_config)
        return params.target_full_attention_layer_mask, params.mamba_layer_mask

    def get_num_attention_layers(self) -> int:
        masks = self._hybrid_masks()
        if masks is not None:  # model_config.py: the hybrid's attention layers
            return sum(masks[0])
        return int(self.pretrained_config.num_hidden_layers)

    def get_num_mamba_layers(self) -> int:
        masks = self._hybrid_masks()
        return 0 if masks is None else sum(masks[1])

    def get_bindings_model_config(self, **kwargs: Any) -> None:
        return None  # the V1 VSWA path passes it to the C++ manager only


def _spec_config(trt: Trt, settings: dict[str, Any], draft: str | None) -> Any:
    """``speculative_config`` from the emitted keys, with what loading the models adds:
    ``num_nextn_predict_layers`` from the target (``update_spec_config_from_model_config``)
    and ``_num_draft_hidden_layers`` from the EAGLE3 head
    (``update_spec_config_from_loaded_model``, _torch/speculative/utils.py, id 57358327182)."""
    kind = settings.get("speculative_config.decoding_type")
    if kind is None:
        return None
    k = settings["speculative_config.max_draft_len"]
    model = settings.get("speculative_config.speculative_model")
    if kind == "Eagle3":
        spec = trt.args.Eagle3DecodingConfig(max_draft_len=k, speculative_model=model)
        spec._num_draft_hidden_layers = _pretrained(draft or "").num_hidden_layers
    elif kind == "MTP":
        spec = trt.args.MTPDecodingConfig(max_draft_len=k)
    elif kind == "Draft_Target":
        spec = trt.args.DraftTargetDecodingConfig(max_draft_len=k, speculative_model=model)
    elif kind == "NGram":
        spec = _ngram_config(trt)(max_draft_len=k)
    else:
        raise NotImplementedError(f"harness: decoding_type {kind}")
    return spec


def _ngram_config(trt: Trt) -> Any:
    """Stand-in for ``NGramDecodingConfig`` (llmapi/llm_args.py, read at stored id
    55143598664; not in the transcription): a ``DecodingBaseConfig`` whose
    ``decoding_type`` "NGram" gives ``SpeculativeDecodingMode.NGRAM`` and whose linear
    draft makes ``max_total_draft_tokens = max_draft_len``. Its matching fields
    (``max_matching_ngram_size``, ``is_keep_all``, ...) size nothing and are left out."""
    base = trt.args.DecodingBaseConfig

    class NGramDecodingConfig(base):  # type: ignore[misc, valid-type]
        decoding_type: str = "NGram"

        def model_post_init(self, context: Any) -> None:
            super().model_post_init(context)
            self.max_total_draft_tokens = self.max_draft_len

    return NGramDecodingConfig


def _kv_cache_config(trt: Trt, settings: dict[str, Any]) -> Any:
    """``KvCacheConfig`` from the emitted ``kv_cache_config.*`` keys."""
    fields = {
        key.split(".", 1)[1]: value
        for key, value in settings.items()
        if key.startswith("kv_cache_config.")
    }
    if not fields.get("host_cache_size") and not fields.get("use_kv_cache_manager_v2"):
        fields.pop("host_cache_size", None)  # V1: 0 and unset are alike; V2: 0 is no tier
    if fields.get("disk_cache_path"):
        # the deployer creates the emitted directory (the plan's warning says so); here an
        # existing one stands in, which validate_disk_cache_config checks (os.path.isdir)
        fields["disk_cache_path"] = DISK_DIR
    return trt.args.KvCacheConfig(**fields)


@dataclass
class EngineInputs:
    """What ``py_executor_creator.create_py_executor`` hands the creator (re-expressed
    from tensorrt_llm/_torch/pyexecutor/py_executor_creator.py @ 000429d5, id 36005802797)."""

    tokens_per_block: int
    max_seq_len: int  # the creator's (model length + overlap + draft tokens + extra)
    net_max_seq_len: int
    flash_mla: bool


def _engine_inputs(settings: dict[str, Any], target_mc: _ModelConfig, spec: Any) -> EngineInputs:
    """``tokens_per_block`` (64 where ``ModelConfig.enable_flash_mla``: "Change
    tokens_per_block to: 64 for using FlashMLA") and the internal ``max_seq_len``: the
    model length, + 1 with the overlap scheduler (on for every mode here but NGram,
    ``support_overlap_scheduler``) + the draft tokens again under overlap, + the extra KV
    tokens + the draft tokens (``max_total_draft_tokens = max_draft_len``, linear trees)."""
    from tensorrt_llm._torch.speculative import get_num_extra_kv_tokens

    net = settings["max_seq_len"]
    ngram = spec is not None and spec.spec_dec_mode.is_ngram()
    seq = net if ngram else net + 1  # NGram: no overlap scheduler
    if spec is not None:
        if not ngram:
            seq += spec.max_total_draft_tokens  # overlap scheduler on
        seq += get_num_extra_kv_tokens(spec) + spec.max_total_draft_tokens
    tpb = settings["kv_cache_config.tokens_per_block"]
    flash = bool(target_mc.enable_flash_mla)
    return EngineInputs(
        tokens_per_block=64 if flash else tpb,
        max_seq_len=seq,
        net_max_seq_len=net,
        flash_mla=flash,
    )


class _Executor:
    """The PyExecutor of the estimation run: its dummy requests allocate nothing."""

    enable_iter_perf_stats = False
    is_warmup = False

    def __init__(self, resources: dict[Any, Any]) -> None:
        self.resource_manager = SimpleNamespace(resource_managers=resources)
        self.dist = SimpleNamespace(
            mapping=SimpleNamespace(rank=0), broadcast=lambda value, root=0: value
        )

    def set_gather_responses(self, flag: bool) -> None:
        del flag

    def enqueue_requests(self, requests: list[Any]) -> list[int]:
        return list(range(len(requests)))

    def start_worker(self) -> None:
        pass

    def await_responses(self, ids: list[int]) -> list[Any]:
        return []

    def shutdown(self) -> None:
        pass


@dataclass
class StageRun:
    """One PP stage's final managers and the creator that built them."""

    managers: dict[str, Any]
    configs: dict[str, Any]
    max_tokens: int
    recorded: list[Any] = field(default_factory=list)


def _model_engine(
    trt: Trt, case: Case, settings: dict[str, Any], mapping: Any, spec: Any
) -> tuple[SimpleNamespace, _ModelConfig | None, EngineInputs]:
    """Stand-in for ``PyTorchModelEngine`` (the attributes the creator reads), the draft's
    ModelConfig and what create_py_executor hands the creator."""
    dtype = settings["kv_cache_config.dtype"]
    target_mc = _ModelConfig(
        _pretrained(case.target), _quant_config(case.target, dtype), mapping, spec
    )
    draft_mc = None
    if case.draft is not None:  # the draft's KV algo is the target's (one-model spec)
        draft_mc = _ModelConfig(_pretrained(case.draft), target_mc.quant_config, mapping, spec)
    inputs = _engine_inputs(settings, target_mc, spec)
    engine = SimpleNamespace(
        model=SimpleNamespace(
            model_config=target_mc, draft_config=draft_mc if case.spec == "eagle3" else None
        ),
        max_seq_len=inputs.net_max_seq_len,
        batch_size=settings["max_batch_size"],
        _max_cuda_graph_batch_size=min(128, settings["max_batch_size"]),
        kv_cache_manager_key=trt.rm.ResourceManagerType.KV_CACHE_MANAGER,
        dtype=target_mc.torch_dtype,
        is_multimodal=False,
        attn_runtime_features=SimpleNamespace(
            chunked_prefill=False,
            chunk_size=settings["max_num_tokens"],
            chunked_prefill_buffer_batch_size=1,
        ),
    )
    return engine, draft_mc, inputs


def _run_stage(
    trt: Trt, case: Case, settings: dict[str, Any], stage: int, overrides: list[Any]
) -> tuple[StageRun, EngineInputs]:
    """KvCacheCreator's whole flow on the first TP rank of PP stage ``stage``."""
    import torch

    mapping = trt.mapping.Mapping(
        tp_size=settings["tensor_parallel_size"],
        pp_size=settings["pipeline_parallel_size"],
        pp_rank=stage,
        enable_attention_dp=bool(settings.get("enable_attention_dp", False)),
        moe_ep_size=settings.get("moe_expert_parallel_size", 1),
    )
    spec = _spec_config(trt, settings, case.draft)
    engine, draft_mc, inputs = _model_engine(trt, case, settings, mapping, spec)
    kvc = _kv_cache_config(trt, settings)
    llm_args = trt.args.TorchLlmArgs(kv_cache_config=kvc)
    trt.gpu.configure(total=H200_BYTES, free=H200_BYTES)
    trt.comm.RECORDED.clear()
    trt.comm.OVERRIDES[:] = list(overrides)
    torch.manual_seed(0)
    creator = trt.util.KvCacheCreator(
        model_engine=engine,
        draft_model_engine=None,
        mapping=mapping,
        net_max_seq_len=inputs.net_max_seq_len,
        kv_connector_manager=None,
        max_num_tokens=settings["max_num_tokens"],
        max_beam_width=1,
        tokens_per_block=inputs.tokens_per_block,
        max_seq_len=inputs.max_seq_len,
        max_batch_size=settings["max_batch_size"],
        kv_cache_config=kvc,
        llm_args=llm_args,
        speculative_config=spec,
        sparse_attention_config=None,
        profiling_stage_data=None,
        is_disagg=False,
        execution_stream=None,
        draft_config=draft_mc,
    )
    resources: dict[Any, Any] = {}
    estimating = creator.try_prepare_estimation()
    creator.build_managers(resources, estimating)
    if estimating:
        creator.configure_kv_cache_capacity(_Executor(resources))
        creator.teardown_managers(resources)
        creator._max_seq_len = inputs.max_seq_len  # create_py_executor restores it
        creator.build_managers(resources, False)
    kinds = trt.rm.ResourceManagerType
    target_cfg, draft_cfg = creator._harness_configs
    run = StageRun(
        managers={
            "target": resources[kinds.KV_CACHE_MANAGER],
            "draft": resources[kinds.DRAFT_KV_CACHE_MANAGER],
        },
        configs={"target": target_cfg, "draft": draft_cfg},
        max_tokens=kvc.max_tokens,
        recorded=list(trt.comm.RECORDED),
    )
    return run, inputs


def run_trtllm(trt: Trt, case: Case, settings: dict[str, Any]) -> dict[str, Any]:
    """TensorRT-LLM's figures for ``settings``, every stage (two passes with PP: the second
    reproduces ``allreduce(MIN)`` over the stages' recorded values)."""
    pp = settings["pipeline_parallel_size"]
    shares = settings.get("env.TRTLLM_WINDOW_SIZE_SHARES")
    old = os.environ.pop("TRTLLM_WINDOW_SIZE_SHARES", None)
    if shares is not None:
        os.environ["TRTLLM_WINDOW_SIZE_SHARES"] = shares
    try:
        # a collective's inputs can depend on an earlier one's result (the auto host tier
        # on the synced device quota): pass again with the previous pass's MINs until
        # they stop changing, the fixed point where every call returns the ranks' MIN
        mins: list[Any] = []
        for _ in range(8):
            runs = [_run_stage(trt, case, settings, s, mins) for s in range(pp)]
            lengths = {len(r.recorded) for r, _ in runs}
            if len(lengths) != 1:
                raise RuntimeError(f"stages made different allreduce calls: {lengths}")
            new = [min(values) for values in zip(*(r.recorded for r, _ in runs), strict=True)]
            if new == mins:
                break
            mins = new
        else:
            raise RuntimeError("the ranks' allreduce(MIN) values did not settle")
    finally:
        os.environ.pop("TRTLLM_WINDOW_SIZE_SHARES", None)
        if old is not None:
            os.environ["TRTLLM_WINDOW_SIZE_SHARES"] = old
    return _trtllm_figures(runs, settings)


def _window_label(window: int, net_max_seq_len: int) -> str:
    """A pool's window as compared: the sliding size, or "full" for a pool sized at the
    model length or longer (the creator's internal max_seq_len)."""
    return "full" if window >= net_max_seq_len else str(window)


def _trtllm_figures(
    runs: list[tuple[StageRun, EngineInputs]], settings: dict[str, Any]
) -> dict[str, Any]:
    """The compared quantities of TensorRT-LLM's managers."""
    out: dict[str, Any] = {}
    run0, inputs = runs[0]
    out["tokens_per_block"] = inputs.tokens_per_block
    out["max_tokens"] = run0.max_tokens
    for stage, (run, _) in enumerate(runs):
        roles = [r for r in ("target", "draft") if run.managers[r] is not None]
        out[f"pp{stage}.managers"] = "+".join(roles)
        for role in roles:
            mgr, cfg = run.managers[role], run.configs[role]
            prefix = f"pp{stage}.{role}"
            if type(mgr).__name__ in ("KVCacheManagerV2", "MambaHybridCacheManagerV2"):
                out.update(_v2_manager_figures(mgr, cfg, prefix))
            else:
                out.update(_manager_figures(mgr, cfg, prefix, inputs))
    return out


def _v2_manager_figures(mgr: Any, cfg: Any, prefix: str) -> dict[str, Any]:
    """One KVCacheManagerV2: class, layers, bytes per token, the host_cache_size it was
    given, its device quota (after the ranks' sync) and per pool group and tier its slots,
    slot bytes and pool bytes (the runtime's ``harness_pools()``)."""
    out: dict[str, Any] = {
        f"{prefix}.manager_class": type(mgr).__name__,
        f"{prefix}.layers": mgr.num_local_layers,
        f"{prefix}.bytes_per_token": mgr.get_cache_bytes_per_token(),
        f"{prefix}.max_gpu_total_bytes": cfg.max_gpu_total_bytes,
        f"{prefix}.max_tokens": cfg.max_tokens,
        f"{prefix}.host_cache_size": cfg.host_cache_size,
        f"{prefix}.disk_cache_size": cfg.disk_cache_size or 0,
        f"{prefix}.device_quota": mgr.harness_device_quota,
    }
    if type(mgr).__name__ == "MambaHybridCacheManagerV2":  # its recurrent-state slots
        out[f"{prefix}.ssm_slots"] = mgr.harness_num_ssm_slots
        out[f"{prefix}.intermediate_state_bytes"] = mgr.harness_intermediate_state_bytes
    if getattr(mgr, "harness_host_source", None) == "auto":
        tiers_config = mgr.kv_cache_manager_py_config.cache_tiers
        out[f"{prefix}.auto_host_quota"] = tiers_config[1].quota if len(tiers_config) > 1 else 0
    tiers = {"GPU_MEM": "gpu", "HOST_MEM": "host", "DISK": "disk"}
    for pool in mgr.impl.harness_pools():
        key = f"{prefix}.pg{pool['pool_group']}.{tiers[str(pool['tier']).split('.')[-1]]}"
        out[f"{key}.slot_bytes"] = ",".join(str(b) for b in pool["slot_bytes"])
        out[f"{key}.slots"] = pool["slots"]
        out[f"{key}.bytes"] = pool["bytes"]
    return out


def _manager_figures(mgr: Any, cfg: Any, prefix: str, inputs: EngineInputs) -> dict[str, Any]:
    """One V1 manager: class, layers, bytes per token, host share, blocks per sequence,
    and per window its primary/secondary blocks and bytes."""
    tpb = mgr.tokens_per_block
    out: dict[str, Any] = {
        f"{prefix}.manager_class": type(mgr).__name__,
        f"{prefix}.layers": mgr.num_local_layers,
        f"{prefix}.bytes_per_token": mgr.get_cache_bytes_per_token(),
        f"{prefix}.host_cache_size": cfg.host_cache_size or 0,
    }
    seq = inputs.net_max_seq_len
    # get_request_kv_block_budget's count for one request of the model length (its
    # _num_blocks_to_completion with the extra KV and draft tokens), for any window layout
    extra = mgr.num_extra_kv_tokens + mgr._kv_reserve_draft_tokens
    out[f"{prefix}.blocks_per_sequence"] = mgr._num_blocks_to_completion(
        seq // 2, seq - seq // 2 + extra, 1
    )
    layers = mgr._get_window_size_to_layers()
    labels = []
    for window in sorted(mgr.blocks_per_window):
        primary, secondary = mgr.blocks_per_window[window]
        per_token = mgr._calculate_cache_bytes_per_token_for_layers(layers[window])
        label = _window_label(window, inputs.net_max_seq_len)
        labels.append(label)
        key = f"{prefix}.w{label}"
        out[f"{key}.window"] = window
        out[f"{key}.bytes_per_token"] = per_token
        out[f"{key}.primary_blocks"] = primary
        out[f"{key}.secondary_blocks"] = secondary
        out[f"{key}.primary_bytes"] = primary * tpb * per_token
        out[f"{key}.secondary_bytes"] = secondary * tpb * per_token
    out[f"{prefix}.windows"] = ",".join(labels)
    return out


# ----------------------------------------------------------------------------- kvbudget


def kvbudget_figures(plan: Any) -> dict[str, Any]:
    """The same quantities from kvbudget's plan: ``plan.engine.detail`` (per stage where it
    reports stages, else its one reported stage, the last) and ``plan.capacity``."""
    detail = plan.engine.detail
    out: dict[str, Any] = {
        "tokens_per_block": plan.capacity.tokens_per_block,
        "max_tokens": plan.engine.settings.get("kv_cache_config.max_tokens"),
    }
    if detail.get("kv_cache_manager") == "V2":
        return out | _v2_figures(plan)
    stages = detail.get("stages") or [{"pp_stage": plan.pp - 1, "managers": detail["managers"]}]
    cls = {"V1": "KVCacheManager"}.get(detail.get("kv_cache_manager"), "?")
    for stage in stages:
        s = stage["pp_stage"]
        out[f"pp{s}.managers"] = "+".join(m["role"] for m in stage["managers"])
        for m in stage["managers"]:
            prefix = f"pp{s}.{m['role']}"
            out[f"{prefix}.manager_class"] = cls
            out[f"{prefix}.layers"] = m.get("num_layers", "-")
            out[f"{prefix}.bytes_per_token"] = m["bytes_per_token"]
            out[f"{prefix}.host_cache_size"] = m.get("host_cache_size", "-")
            out[f"{prefix}.blocks_per_sequence"] = m.get(
                "blocks_per_sequence", detail["blocks_per_sequence"]
            )
            labels = []
            for w in m["windows"]:
                # TensorRT-LLM's window size for the pool where kvbudget reports it
                size = w.get("attention_window")
                if size is None:
                    label = "full" if w["window"] is None else str(w["window"])
                else:
                    label = _window_label(size, plan.engine.settings["max_seq_len"])
                    out[f"{prefix}.w{label}.window"] = size
                labels.append(label)
                key = f"{prefix}.w{label}"
                per_token, tpb = w["bytes_per_token"], plan.capacity.tokens_per_block
                out[f"{key}.bytes_per_token"] = per_token
                out[f"{key}.primary_blocks"] = w["primary_blocks"]
                out[f"{key}.secondary_blocks"] = w["secondary_blocks"]
                out[f"{key}.primary_bytes"] = w["primary_blocks"] * tpb * per_token
                out[f"{key}.secondary_bytes"] = w["secondary_blocks"] * tpb * per_token
            out[f"{prefix}.windows"] = ",".join(labels)
    return out


def _v2_figures(plan: Any) -> dict[str, Any]:
    """The V2 quantities from kvbudget's plan: per stage each manager (target, draft)."""
    out: dict[str, Any] = {}
    for stage in plan.engine.detail["stages"]:
        s = stage["pp_stage"]
        out[f"pp{s}.managers"] = "+".join(m["role"] for m in stage["managers"])
        for m in stage["managers"]:
            prefix = f"pp{s}.{m['role']}"
            out[f"{prefix}.manager_class"] = m["manager_class"]
            out[f"{prefix}.layers"] = m["num_layers"]
            out[f"{prefix}.bytes_per_token"] = m["bytes_per_token"]
            out[f"{prefix}.max_gpu_total_bytes"] = m["max_gpu_total_bytes"]
            out[f"{prefix}.max_tokens"] = m["max_tokens"]
            out[f"{prefix}.host_cache_size"] = m["host_cache_size"]
            out[f"{prefix}.disk_cache_size"] = m["disk_cache_size"]
            out[f"{prefix}.device_quota"] = m["device_quota"]
            for key in ("ssm_slots", "intermediate_state_bytes"):
                if key in m:
                    out[f"{prefix}.{key}"] = m[key]
            for pool in m["pools"]:
                key = f"{prefix}.pg{pool['pool_group']}.{pool['tier']}"
                out[f"{key}.slot_bytes"] = ",".join(str(b) for b in pool["slot_bytes"])
                out[f"{key}.slots"] = pool["slots"]
                out[f"{key}.bytes"] = pool["bytes"]
    return out


# ----------------------------------------------------------------------------- comparison


def _order(key: str) -> tuple[Any, ...]:
    return (key.count("."), key)


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> Iterator[tuple[str, Any, Any, bool]]:
    """``(quantity, kvbudget, trtllm, agree)`` for every quantity either side has."""
    for key in sorted(set(ours) | set(theirs), key=_order):
        a, b = ours.get(key, "-"), theirs.get(key, "-")
        yield key, a, b, a == b


def run_case(trt: Trt, case: Case) -> dict[str, Any]:
    """One case: kvbudget's plan, TensorRT-LLM's figures from its settings, the rows."""
    try:
        plan = kvbudget.plan(**case.plan_args())
    except (InvalidArgumentError, InfeasibleBudgetError) as exc:
        return {"id": case.id, "skipped": f"kvbudget refuses: {' '.join(str(exc).split())}"}
    settings = dict(plan.engine.settings)
    theirs = run_trtllm(trt, case, settings)
    ours = kvbudget_figures(plan)
    if case.auto_host:
        ours |= _auto_host_figures(plan)
        theirs |= run_auto_host(trt, case, settings)
    rows = list(compare(ours, theirs))
    return {"id": case.id, "rows": rows}


def run_auto_host(trt: Trt, case: Case, settings: dict[str, Any]) -> dict[str, Any]:
    """The host tier V2 builds by itself with ``host_cache_size`` unset, per stage and
    manager: the same settings without the key, on a node of ``NODE_MEMORY`` bytes
    (MemAvailable) shared by the deployment's ranks on it (``local_world_size``:
    ``min(tp x pp, NODE_GPUS)``), RLIMIT_MEMLOCK unlimited (``HARNESS_HOST``)."""
    from tensorrt_llm._torch.pyexecutor.kv_cache import kv_cache_manager_v2 as kv2

    unset = {k: v for k, v in settings.items() if k != "kv_cache_config.host_cache_size"}
    world = settings["tensor_parallel_size"] * settings["pipeline_parallel_size"]
    saved = dict(kv2.HARNESS_HOST)
    kv2.HARNESS_HOST.update(mem_available=NODE_MEMORY, local_ranks=min(world, NODE_GPUS))
    try:
        figures = run_trtllm(trt, case, unset)
    finally:
        kv2.HARNESS_HOST.clear()
        kv2.HARNESS_HOST.update(saved)
    return {k: v for k, v in figures.items() if k.endswith(".auto_host_quota")}


def _auto_host_figures(plan: Any) -> dict[str, Any]:
    """kvbudget's figure for that tier: ``detail["auto_host_quotas"]`` per manager, on
    every stage (the ranks' MIN makes them equal)."""
    quotas = plan.engine.detail["auto_host_quotas"]
    out: dict[str, Any] = {}
    for stage in plan.engine.detail["stages"]:
        for m, q in zip(stage["managers"], quotas, strict=True):
            out[f"pp{stage['pp_stage']}.{m['role']}.auto_host_quota"] = q
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trtllm-src",
        type=Path,
        default=REPO.parent / "shared" / "trtllm-src",
        help="the transcribed TensorRT-LLM sizing code (default: %(default)s)",
    )
    parser.add_argument(
        "--match",
        action="append",
        default=[],
        help="run the cases whose id contains every TEXT given",
    )
    parser.add_argument("--diff-only", action="store_true", help="print differing rows only")
    parser.add_argument("--json", metavar="OUT", help="write every case's rows here")
    parser.add_argument("--tsv", metavar="OUT", help="case, quantity, kvbudget, trtllm, verdict")
    parser.add_argument("--verbose", action="store_true", help="tracebacks for harness errors")
    opts = parser.parse_args(argv)
    trt = load_trtllm(opts.trtllm_src.resolve())
    trt.logger.records.clear() if hasattr(trt.logger, "records") else None
    cases = [c for c in all_cases() if all(m in c.id for m in opts.match)]
    results, agree, differ, failed = [], 0, 0, 0
    for case in cases:
        try:
            result = run_case(trt, case)
        except Exception as exc:  # the harness itself failed on this case
            failed += 1
            result = {"id": case.id, "error": f"{type(exc).__name__}: {exc}"}
            if opts.verbose:
                traceback.print_exc()
        if hasattr(trt.logger, "records"):
            trt.logger.records.clear()
        results.append(result)
        agree, differ = _print_case(result, opts.diff_only, agree, differ)
    _write(results, opts)
    skipped = sum(1 for r in results if "skipped" in r)
    run = len(results) - skipped - failed
    if skipped or failed:
        print(f"({skipped} cases skipped: kvbudget refuses them; {failed} harness errors)")
    print(f"{run} cases, {agree} quantities agree, {differ} differ")
    return 1 if differ or failed else 0


def _print_case(
    result: dict[str, Any], diff_only: bool, agree: int, differ: int
) -> tuple[int, int]:
    rows = result.get("rows", [])
    bad = [r for r in rows if not r[3]]
    if not diff_only or bad or "error" in result or "skipped" in result:
        status = result.get("skipped") or result.get("error") or ("DIFF" if bad else "OK")
        print(f"== {result['id']}: {status}")
    for quantity, a, b, same in rows:
        if same and diff_only:
            continue
        print(f"  {quantity} {a} {b} {'agree' if same else 'DIFF'}")
    return agree + len(rows) - len(bad), differ + len(bad)


def _write(results: list[dict[str, Any]], opts: argparse.Namespace) -> None:
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    if opts.tsv:
        lines = ["case\tquantity\tkvbudget\ttrtllm\tverdict"]
        for r in results:
            for quantity, a, b, same in r.get("rows", []):
                verdict = "agree" if same else "DIFF"
                lines.append(f"{r['id']}\t{quantity}\t{a}\t{b}\t{verdict}")
        Path(opts.tsv).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
