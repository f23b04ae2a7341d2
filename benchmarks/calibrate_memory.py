"""The non-KV memory estimate (:mod:`kvbudget.memory`) against engine start-up logs.

Usage::

    python benchmarks/calibrate_memory.py

Each row is one start-up log quoted in a public issue or file (the source is printed):
what the engine measured (GiB, as logged) and what :func:`kvbudget.memory.estimate_non_kv`
says for the same model, chunk (``max_num_batched_tokens``), batch and TP. Where a log's
chunk or batch is a version default rather than printed, the row says so. The README's
calibration table is this script's output.
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
)  # fmt: skip


def _model(name: str) -> ModelSpec:
    if name == "qwen2.5-0.5b":
        return parse_config(QWEN25_05B, source="Qwen2.5-0.5B-Instruct", name="qwen2.5-0.5b")
    return load_model(name)


def _row(measured: float | None, estimate: int) -> str:
    if measured is None:
        return f"{'-':>8} {'-':>8} {'-':>7}"
    est = estimate / GIB
    return f"{measured:8.2f} {est:8.2f} {(est / measured - 1) * 100:+6.0f}%"


def main() -> int:
    print(f"{'':4} {'part':11} {'logged':>8} {'estimate':>8} {'error':>7}  setting / source")
    for p in POINTS:
        if p.model:
            model = _model(p.model)
            est = estimate_non_kv(
                model, None, eagle3=False, tp=p.tp, max_num_batched_tokens=p.tokens,
                max_batch_size=p.batch, num_layers=model.num_layers,
            )  # fmt: skip
            graphs = est.cuda_graph_bytes
            if p.graph_sizes is not None:  # the logged number of captured sizes
                graphs = graphs // capture_sizes(p.batch) * p.graph_sizes
            rows = [
                ("activation", p.activation, est.activation_bytes),
                ("cuda graphs", p.graphs, graphs),
                ("runtime", p.runtime, est.runtime_bytes),
            ]
        else:
            rows = [("runtime", p.runtime, p.tp * 256 * 1024**2)]
        for part, measured, estimate in rows:
            if measured is None:
                continue
            print(f"{p.label:4} {part:11} {_row(measured, estimate)}  {p.note}; {p.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
