"""Throughput of the reference engine on tiny CPU models, with and without speculation.

Run: ``python benchmarks/bench_engine.py [--threads 1] [--new-tokens 64] [--repeats 3]``

Writes the demo checkpoints (:mod:`kvbudget.engine.demo`: a 4-layer target, its noisy
copy as draft, an EAGLE3 head) to a temporary directory, then measures generated tokens
per second of greedy decoding for batches of 1, 8, 16 and 32 prompts of 32 random
tokens: the target alone (``spec none``), draft-target and EAGLE3, and ``transformers``'
assisted generation (``generate(assistant_model=...)``, 3 assistant tokens per step, a
constant schedule) and plain ``generate`` at batch 1 on the same checkpoints. Every
figure is the best of ``--repeats`` runs after a warm-up, and each is printed with its
ratio to the engine's target-only batch-1 run measured in the same process (timings on
shared machines are noise; ratios are the signal). The budget is roomy (no preemption):
this measures compute, not memory pressure.

Then profiles one draft-target step mix at batch 8 with cProfile and prints the
functions that take the most time, grouped (model matmuls, attention, index building,
cache bookkeeping, sampling), so the step's cost is visible.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

import kvbudget
from kvbudget.engine import Engine, SamplingParams, write_demo_models

PROMPT_LEN = 32


def prompts(batch: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(PROMPT_LEN)] for _ in range(batch)]


def best_of(repeats: int, fn: Callable[[], int]) -> tuple[float, int]:
    """(best seconds, tokens) of ``repeats`` calls after one warm-up call."""
    fn()
    best = float("inf")
    tokens = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = fn()
        best = min(best, time.perf_counter() - t0)
    return best, tokens


def engine_run(
    target: str, draft: str | None, spec: str, batch: int, new_tokens: int
) -> tuple[Engine, Callable[[], int]]:
    plan = kvbudget.plan(
        target=target,
        draft=draft,
        spec=spec,
        kv_budget="32MiB",
        tokens_per_block=16,
        max_batch_size=32,
        max_seq_len=PROMPT_LEN + new_tokens + 8,
        max_draft_len=3,
    )
    engine = Engine(plan, target=target, draft=draft)
    params = SamplingParams(max_new_tokens=new_tokens)
    batch_prompts = prompts(batch)

    def go() -> int:
        return sum(len(o.token_ids) for o in engine.generate(batch_prompts, params))

    return engine, go


def transformers_runs(
    target: str, draft: str, new_tokens: int
) -> dict[str, tuple[Callable[[], int], list[int]]]:
    from transformers import LlamaForCausalLM

    tgt = LlamaForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    asst = LlamaForCausalLM.from_pretrained(draft, dtype=torch.float32).eval()
    ids = torch.tensor(prompts(1))
    common: dict[str, Any] = {
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "do_sample": False,
        "pad_token_id": 0,
    }
    asst.generation_config.num_assistant_tokens = 3
    asst.generation_config.num_assistant_tokens_schedule = "constant"
    asst.generation_config.assistant_confidence_threshold = 0.0
    out: dict[str, tuple[Callable[[], int], list[int]]] = {}
    for name, kw in (("plain", {}), ("assisted", {"assistant_model": asst})):

        def go(kw: dict[str, Any] = kw) -> int:
            with torch.no_grad():
                res = tgt.generate(ids, **common, **kw)
            return int(res.shape[1] - ids.shape[1])

        with torch.no_grad():
            first = tgt.generate(ids, **common, **kw)[0, PROMPT_LEN:].tolist()
        out[name] = (go, first)
    return out


def profile(target: str, draft: str, new_tokens: int) -> None:
    _, go = engine_run(target, draft, "draft-target", 8, new_tokens)
    go()
    prof = cProfile.Profile()
    prof.enable()
    go()
    prof.disable()
    stats = pstats.Stats(prof)
    groups = {
        "linear (matmuls)": ("linear",),
        "scaled_dot_product_attention": ("scaled_dot_product_attention",),
        "attend: pad/gather/scatter": ("attend", "index_put_", "new_zeros"),
        "build_batch (indices, masks)": ("build_batch", "repeat_interleave", "nonzero"),
        "module forwards, rope (python glue)": ("apply_rope", "cos_sin", "silu", "forward"),
        "cache bookkeeping (scheduler)": ("schedule", "finish_step", "reserve", "commit"),
        "sampling / verification": ("verify", "argmax", "tolist", "_pick"),
    }
    total = 0.0
    per: dict[str, float] = dict.fromkeys(groups, 0.0)
    rows = []
    for (file, _, func), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        total += tottime
        rows.append((tottime, f"{file.rsplit('/', 1)[-1]}:{func}"))
        for g, keys in groups.items():
            if any(k in func for k in keys):
                per[g] += tottime
                break
    print(f"\nprofile: draft-target, batch 8, {new_tokens} new tokens, {total:.3f} s total")
    for g, t in sorted(per.items(), key=lambda x: -x[1]):
        print(f"  {g:<34} {t:7.3f} s  {100 * t / total:5.1f}%")
    print("  top functions by own time:")
    for t, name in sorted(rows, reverse=True)[:12]:
        print(f"    {t:7.3f} s  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,8,16,32")
    parser.add_argument("--no-profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = args.new_tokens
    batches = [int(b) for b in args.batches.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench-engine-")
    demo = write_demo_models(tmp, seed=0, draft_noise=0.02)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s); prompts {PROMPT_LEN} tokens, "
        f"{n} new tokens, greedy; best of {args.repeats}"
    )
    results: list[tuple[str, int, float, int, str]] = []
    baseline = None
    checks: dict[str, list[int]] = {}
    for spec, draft in (("none", None), ("draft-target", demo.draft), ("eagle3", demo.eagle3)):
        for batch in batches:
            engine, go = engine_run(demo.target, draft, spec, batch, n)
            seconds, tokens = best_of(args.repeats, go)
            st = engine.stats()
            extra = f"acceptance {st['acceptance_rate']:.2f}" if spec != "none" else ""
            results.append((f"engine {spec}", batch, seconds, tokens, extra))
            if spec == "none" and batch == 1:
                baseline = tokens / seconds
            if batch == 1:
                checks[spec] = engine.generate(prompts(1), SamplingParams(max_new_tokens=n))[
                    0
                ].token_ids
    try:
        hf = transformers_runs(demo.target, demo.draft, n)
    except ImportError:
        hf = {}
        print("transformers not installed: no assisted-generation comparison")
    for name, (go, first) in hf.items():
        seconds, tokens = best_of(args.repeats, go)
        results.append((f"transformers {name}", 1, seconds, tokens, ""))
        checks[f"transformers {name}"] = first
    assert baseline is not None
    print(f"\n{'run':<26}{'batch':>6}{'tokens':>8}{'seconds':>9}{'tok/s':>9}{'ratio':>8}  notes")
    for name, batch, seconds, tokens, extra in results:
        rate = tokens / seconds
        print(
            f"{name:<26}{batch:>6}{tokens:>8}{seconds:>9.3f}{rate:>9.1f}{rate / baseline:>8.2f}"
            f"  {extra}"
        )
    same = {k: v == checks["none"] for k, v in checks.items()}
    print(f"\nbatch-1 greedy outputs equal the engine's target-only output: {same}")
    rates = {(name, b): t / s for name, b, s, t, _ in results}
    if ("transformers assisted", 1) in rates:
        ratio = rates[("engine draft-target", 1)] / rates[("transformers assisted", 1)]
        print(f"engine draft-target / transformers assisted at batch 1: {ratio:.2f}x")
    if 16 in batches:
        for spec in ("none", "draft-target"):
            r = rates[(f"engine {spec}", 16)] / rates[(f"engine {spec}", 1)]
            print(f"engine {spec}: batch 16 / batch 1 throughput: {r:.2f}x")
    if not args.no_profile:
        profile(demo.target, demo.draft, n)


if __name__ == "__main__":
    main()
