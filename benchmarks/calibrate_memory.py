"""The non-KV memory estimate (:mod:`kvbudget.memory`) against engine start-up logs.

Usage::

    python benchmarks/calibrate_memory.py

Each row is one start-up log quoted in a public issue or file (the source is printed):
what the engine measured (GiB, as logged) and what :func:`kvbudget.memory.estimate_non_kv`
says for the same model, chunk (``max_num_batched_tokens``), batch and TP. Where a log's
chunk or batch is a version default rather than printed, the row says so. The README's
calibration table is this script's output; ``tests/test_calibration.py`` runs it.

Rows ``H*`` and ``G*`` are hybrid (Gated DeltaNet) models: 64 layers, 16 full attention
and 48 Gated DeltaNet, the geometry of the Qwen3.5-27B config the estimate reads
(Qwen3.6-27B and Qwen3.8-27B share it: github.com/anthony-chaudhary/fak/issues/447,
github.com/baidu-baige/LoongForge/pull/176). Their activation estimate counts the Gated
DeltaNet prefill scratch that vLLM's profile does not run (vllm#52872, vllm#54775), so
it sits above the logged peak by design. ``G1``-``G3`` ran MTP (vLLM logs
"FULL_AND_PIECEWISE is not supported with spec-decode ... setting
cudagraph_mode=PIECEWISE"); every ``G*`` log has "Add 3 padding layers, may waste at
most 6.25% KV cache memory" (3 of 48: the 48 Gated DeltaNet layers). The ``H*`` graph
figures are vLLM's estimate, which for hybrid models includes a profiling transient that
grows with the chunk (vllm#50780), and their capture sizes are not in the issue.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.memory import capture_sizes, estimate_non_kv
from kvbudget.model import ModelSpec, load_model, parse_config

GIB = 1024**3

# Qwen2.5-0.5B-Instruct's config.json (huggingface.co/Qwen/Qwen2.5-0.5B-Instruct), the
# fields the estimate reads; not a preset
QWEN25_05B = {
    "model_type": "qwen2",
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": True,
}


# the hybrid rows' model: the Qwen3.5-27B preset (64 layers, 48 Gated DeltaNet). G rows
# compare graphs only: their chunk and batch do not enter (the logged number of captured
# sizes replaces the batch's)
GDN_27B = "Qwen/Qwen3.5-27B"
H_NOTE = "64-layer GDN hybrid, RTX 5090, util 0.93, 256 seqs assumed (serve default)"


@dataclass(frozen=True)
class Point:
    """One logged start-up: the setting and what the engine measured (GiB)."""

    label: str
    model: str
    tokens: int  # max_num_batched_tokens (the prefill chunk)
    batch: int  # max_num_seqs
    tp: int
    activation: float | None
    graphs: float | None
    runtime: float | None
    graph_sizes: int | None = None  # captured batch sizes when the log says so
    note: str = ""
    source: str = ""


POINTS = (
    Point("V1", "meta-llama/Llama-3.1-8B-Instruct", 8192, 256, 1, 1.26, None, None,
          note="Llama-3-8B (same geometry), vLLM V0, chunk = max_model_len 8192",
          source="github.com/vllm-project/vllm/pull/10511"),
    Point("V6", "mistralai/Mistral-7B-v0.1", 16384, 256, 1, 1.97, 0.67, 0.07, 67,
          note="llava-v1.6-mistral-7b (Mistral-7B text geometry), vLLM 0.10.2, LLM class",
          source="GitHub file, index id 34680831065"),
    Point("V8", "meta-llama/Llama-3.1-8B-Instruct", 8192, 1024, 1, 1.44, 0.23, 0.26,
          note="vLLM 0.31.0 serve defaults on an A100-80GB (chunk 8192, 1024 seqs assumed)",
          source="GitHub file, index id 70682754770"),
    Point("V9", "qwen2.5-0.5b", 2048, 256, 1, 0.25, 0.37, 0.56, 67,
          note="vLLM 0.27.1 serve, 24 GB card (defaults: chunk 2048, 256 seqs assumed)",
          source="GitHub file, index id 61918553602"),
    Point("V7", "", 0, 0, 4, None, None, 0.95,
          note="GLM-5.2 NVFP4, vLLM 0.26.0, TP4: runtime (non-torch) only",
          source="GitHub file, index id 61511710941"),
    Point("V3", "", 0, 0, 8, None, None, 1.96,
          note="Qwen3-235B-A22B, vLLM V0, TP8: non-torch 1.82-2.10 over ranks (mean)",
          source="github.com/vllm-project/vllm/issues/18446"),
    Point("T1", "openai/gpt-oss-120b", 8192, 64, 1, 0.85, None, None,
          note="TensorRT-LLM 1.1.0rc3, max_num_tokens 8192, max_batch 64",
          source="GitHub file, index id 2263047771"),
    Point("S4", "meta-llama/Llama-3.1-8B-Instruct", 2048, 8, 1, None, 0.11, None, 4,
          note="SGLang, graphs for bs 1, 2, 4, 8",
          source="GitHub file, index id 49361099215"),
    # vllm#52872, "Measured, RTX 5090 (31.4 GiB), 64-layer hybrid (16 full-attention + 48
    # GDN)", all rows --gpu-memory-utilization 0.93; its table: "| 8192 | 2.84 GiB |
    # 0.89 GiB | 8.89 GiB |", "| 4096 | 2.42 GiB | 0.52 GiB | 9.72 GiB |", "| 3072 |
    # 2.32 GiB | 0.52 GiB | 9.82 GiB |", "| 2048 | 2.21 GiB | 0.52 GiB | 9.93 GiB |"
    # (--max-num-batched-tokens, peak activation (profiled), CUDA-graph pool, KV cache)
    Point("H1", GDN_27B, 8192, 256, 1, 2.84, 0.89, None,
          note=f"{H_NOTE}, chunk 8192",
          source="github.com/vllm-project/vllm/issues/52872"),
    Point("H2", GDN_27B, 4096, 256, 1, 2.42, 0.52, None,
          note=f"{H_NOTE}, chunk 4096",
          source="github.com/vllm-project/vllm/issues/52872"),
    Point("H3", GDN_27B, 3072, 256, 1, 2.32, 0.52, None,
          note=f"{H_NOTE}, chunk 3072",
          source="github.com/vllm-project/vllm/issues/52872"),
    Point("H4", GDN_27B, 2048, 256, 1, 2.21, 0.52, None,
          note=f"{H_NOTE}, chunk 2048",
          source="github.com/vllm-project/vllm/issues/52872"),
    # club-3090#617: "Profiling CUDA graph memory: PIECEWISE=4 (largest=8)", "Estimated
    # CUDA graph memory: 0.08 GiB total"; #104: "PIECEWISE=5 (largest=16)", "0.13 GiB
    # total"; PR #44 (4 ranks): "PIECEWISE=7 (largest=32)", "0.17 GiB total"; #434:
    # "PIECEWISE=3 (largest=16), FULL=2 (largest=8)", "0.09 GiB total"
    Point("G1", GDN_27B, 2048, 2, 1, None, 0.08, None, 4,
          note="Qwen3.6-27B NVFP4, RTX 5090, MTP, PIECEWISE=4 (largest=8)",
          source="github.com/noonghunna/club-3090/issues/617"),
    Point("G2", GDN_27B, 2048, 2, 2, None, 0.13, None, 5,
          note="Qwen3.6-27B AutoRound, 2x RTX 3090 TP2, MTP, PIECEWISE=5 (largest=16)",
          source="github.com/noonghunna/club-3090/issues/104"),
    Point("G3", GDN_27B, 2048, 2, 4, None, 0.17, None, 7,
          note="club-3090 dual4 baseline (27B, unnamed), TP4, MTP, PIECEWISE=7 (largest=32)",
          source="github.com/noonghunna/club-3090/pull/44"),
    Point("G4", GDN_27B, 2048, 2, 2, None, 0.09, None, 5,
          note="qwen-27b-dual-lmcache, TP2, PIECEWISE=3 (largest=16) + FULL=2 (largest=8)",
          source="github.com/noonghunna/club-3090/issues/434"),
)  # fmt: skip


def _model(name: str) -> ModelSpec:
    if name == "qwen2.5-0.5b":
        return parse_config(QWEN25_05B, source="Qwen2.5-0.5B-Instruct", name="qwen2.5-0.5b")
    return load_model(name)


def rows(p: Point) -> list[tuple[str, float | None, int]]:
    """(part, logged GiB or None, estimated bytes) of each part of one point."""
    if not p.model:
        return [("runtime", p.runtime, p.tp * 256 * 1024**2)]
    model = _model(p.model)
    est = estimate_non_kv(
        model, None, eagle3=False, tp=p.tp, max_num_batched_tokens=p.tokens,
        max_batch_size=p.batch, num_layers=model.num_layers,
    )  # fmt: skip
    graphs = est.cuda_graph_bytes
    if p.graph_sizes is not None:  # the logged number of captured sizes
        graphs = graphs // capture_sizes(p.batch) * p.graph_sizes
    return [
        ("activation", p.activation, est.activation_bytes),
        ("cuda graphs", p.graphs, graphs),
        ("runtime", p.runtime, est.runtime_bytes),
    ]


def error(measured: float, estimate: int) -> float:
    """The estimate's error against a logged GiB figure, as a fraction."""
    return estimate / GIB / measured - 1


def _row(measured: float, estimate: int) -> str:
    return f"{measured:8.2f} {estimate / GIB:8.2f} {error(measured, estimate) * 100:+6.0f}%"


def main() -> int:
    print(f"{'':4} {'part':11} {'logged':>8} {'estimate':>8} {'error':>7}  setting / source")
    for p in POINTS:
        for part, measured, estimate in rows(p):
            if measured is None:
                continue
            print(f"{p.label:4} {part:11} {_row(measured, estimate)}  {p.note}; {p.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
