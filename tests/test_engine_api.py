"""The engine's public surface: exact memory accounting, stats, sampling runs, errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_engine_support import (
    EAGLE3_BYTES_PER_TOKEN,
    TARGET_BYTES_PER_TOKEN,
    demo,
    make_plan,
    shared_prefix_prompts,
)

torch = pytest.importorskip("torch")

from kvbudget.engine import DemoModels, Engine, SamplingParams  # noqa: E402
from kvbudget.engine.demo import llama_config, write_model  # noqa: E402
from kvbudget.errors import ConfigError, InvalidArgumentError  # noqa: E402

__all__ = ["demo"]


def test_storage_bytes_equal_the_plan_per_role_and_tier(demo: DemoModels) -> None:
    plan = make_plan(demo.target, demo.eagle3, "eagle3", kv_budget=400_000, host_budget=100_000)
    engine = Engine(plan, target=demo.target, draft=demo.eagle3)
    storage = engine.stats()["storage"]
    # slopes: target 1024 B/token, EAGLE3 head 256 B/token; blocks of 4 tokens
    assert [m.slope_bytes_per_token for m in plan.managers] == [
        TARGET_BYTES_PER_TOKEN,  # 4 layers x 2 (K, V) x 2 KV heads x 16 x 4 B = 1024
        EAGLE3_BYTES_PER_TOKEN,  # 1 layer x 2 x 2 x 16 x 4 B = 256
    ]
    # gpu: draft = floor(400_000 x 256 / 1280) = 80_000, target = 320_000
    #   target: floor(320_000 / 4096) = 78 blocks = 319_488 B, padding 512
    #   draft:  floor(80_000 / 1024) = 78 blocks = 79_872 B, padding 128
    # host: draft = floor(100_000 x 256 / 1280) = 20_000, target = 80_000
    #   target: floor(80_000 / 4096) = 19 blocks = 77_824 B, padding 2_176
    #   draft:  floor(20_000 / 1024) = 19 blocks = 19_456 B, padding 544
    assert storage == {
        "target": {
            "gpu": {"bytes": 319_488, "plan_bytes": 320_000, "padding_bytes": 512},
            "host": {"bytes": 77_824, "plan_bytes": 80_000, "padding_bytes": 2_176},
            "disk": {"bytes": 0, "plan_bytes": 0, "padding_bytes": 0},
        },
        "draft": {
            "gpu": {"bytes": 79_872, "plan_bytes": 80_000, "padding_bytes": 128},
            "host": {"bytes": 19_456, "plan_bytes": 20_000, "padding_bytes": 544},
            "disk": {"bytes": 0, "plan_bytes": 0, "padding_bytes": 0},
        },
    }
    # the bytes are the tensors the layers read and write: 78 rows of 4096 B on the GPU
    cache_storage = engine.cache.storage
    assert cache_storage is not None
    assert tuple(cache_storage.roles[0].kv[0].shape) == (78, 4096)
    assert tuple(cache_storage.roles[1].kv[1].shape) == (19, 1024)


def test_window_pools_are_counted_in_the_gpu_bytes(tmp_path: Path) -> None:
    types = ["sliding_attention", "full_attention"] * 2
    target = write_model(llama_config(layer_types=types, sliding_window=8), tmp_path, seed=0)
    engine = Engine(make_plan(target, None, "none"), target=target)
    # growing layers: 2 full layers x 2 x 2 heads x 16 x 4 B = 512 B/token, blocks of
    # 2048 B; window group: 2 layers, 512 B/token, with no lookahead (spec none)
    # ceil((8 - 1) / 4) + 1 = 3 blocks per sequence x 8 sequences x 4 tokens x 512 B
    assert engine.plan.managers[0].window_bytes == 3 * 8 * 4 * 512 == 49_152
    # kv: floor((400_000 - 49_152) / 2048) = 171 blocks = 350_208 B; padding 640
    assert engine.stats()["storage"]["target"]["gpu"] == {
        "bytes": 350_208 + 49_152,
        "plan_bytes": 400_000,
        "padding_bytes": 640,
    }


def test_stats_count_what_happened(demo: DemoModels) -> None:
    plan = make_plan(demo.target, demo.draft, "draft-target")
    engine = Engine(plan, target=demo.target, draft=demo.draft)
    prompts = shared_prefix_prompts()
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=10))
    stats = engine.stats()
    assert stats["requests"] == 10 and stats["generated_tokens"] == 100
    assert sum(len(o.token_ids) for o in outs) == 100
    assert [o.prompt_tokens for o in outs] == [len(p) for p in prompts]
    assert 0 < stats["accepted_tokens"] <= stats["proposed_tokens"]
    # the six prompts sharing 12 tokens: the first computes them, the other five reuse
    # 3 blocks x 4 tokens each (admitted together, they hit blocks written that step)
    assert stats["prefix_hit_tokens"] == 5 * 12
    # every prompt token is computed once except the hits
    assert stats["prefill_tokens"] == sum(len(p) for p in prompts) - 5 * 12
    assert stats["preemptions"] == 0


def test_sampling_runs_are_reproducible_by_seed(demo: DemoModels) -> None:
    plan = make_plan(demo.target, demo.draft, "draft-target")
    params = SamplingParams(max_new_tokens=12, temperature=0.8)
    prompts = shared_prefix_prompts()[:4]

    def run(seed: int) -> list[list[int]]:
        engine = Engine(plan, target=demo.target, draft=demo.draft, seed=seed)
        return [o.token_ids for o in engine.generate(prompts, params)]

    first = run(0)
    assert first == run(0)
    assert first != run(1)
    assert all(len(t) == 12 for t in first)


def test_mistakes_raise_typed_errors(demo: DemoModels, tmp_path: Path) -> None:
    plan = make_plan(demo.target, demo.draft, "draft-target")
    with pytest.raises(InvalidArgumentError, match="pass a draft"):
        Engine(plan, target=demo.target)
    none_plan = make_plan(demo.target, None, "none")
    with pytest.raises(InvalidArgumentError, match="pass no draft"):
        Engine(none_plan, target=demo.target, draft=demo.draft)
    with pytest.raises(InvalidArgumentError, match="EAGLE3 head"):
        Engine(plan, target=demo.target, draft=demo.eagle3)
    # a plan made for another geometry is refused, not misread
    with pytest.raises(InvalidArgumentError, match="bytes per token"):
        Engine(make_plan(demo.small_draft, None, "none"), target=demo.target)
    with pytest.raises(InvalidArgumentError, match="preempt_mode"):
        Engine(none_plan, target=demo.target, preempt_mode="drop")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Engine(none_plan, target=tmp_path / "nothing")
    # the demo target has 1,024 positions: a plan for 2,048 would run past them
    with pytest.raises(InvalidArgumentError, match="1024 positions of the target"):
        long_plan = make_plan(demo.target, None, "none", max_seq_len=2048, kv_budget="4MiB")
        Engine(long_plan, target=demo.target)
    engine = Engine(none_plan, target=demo.target)
    for prompts, match in (
        ([[]], "empty"),
        ([[1, 256]], "vocabulary"),
        ([list(range(65))], "max_seq_len"),
        (["abc"], "list of token ids"),
    ):
        with pytest.raises(InvalidArgumentError, match=match):
            engine.generate(prompts)  # type: ignore[arg-type]
    assert engine.stats()["requests"] == 0


def test_a_bare_config_gives_random_weights_from_the_seed(tmp_path: Path) -> None:
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps(llama_config(num_layers=2)))
    plan = make_plan(str(config), None, "none")
    params = SamplingParams(max_new_tokens=8)

    def run(seed: int) -> list[int]:
        engine = Engine(plan, target=config, seed=seed)
        return engine.generate([[1, 2, 3]], params)[0].token_ids

    assert run(0) == run(0)
    assert run(0) != run(1)


def test_a_temperature_below_the_minimum_decodes_greedily(demo: DemoModels) -> None:
    # issue #21: at 1e-45, logits / t overflow float32 to inf and torch.multinomial
    # crashed on the NaN probabilities; below MIN_TEMPERATURE = 1e-5 decoding is greedy
    from kvbudget.engine.sampling import MIN_TEMPERATURE

    assert MIN_TEMPERATURE == 1e-5
    assert SamplingParams(temperature=1e-45).greedy
    assert not SamplingParams(temperature=1e-5).greedy
    plan = make_plan(demo.target, demo.draft, "draft-target")
    prompts = shared_prefix_prompts()[:3]

    def run(t: float) -> list[list[int]]:
        engine = Engine(plan, target=demo.target, draft=demo.draft, seed=0)
        params = SamplingParams(max_new_tokens=6, temperature=t)
        return [o.token_ids for o in engine.generate(prompts, params)]

    assert run(1e-45) == run(0.0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("role", ["target", "draft"])
def test_nan_logits_are_a_typed_error(demo: DemoModels, temperature: float, role: str) -> None:
    # NaN weights that got past the checkpoint (set here in memory): at temperature 1
    # torch.multinomial used to raise on the NaN probabilities, greedy picked garbage
    from kvbudget.errors import ModelOutputError

    plan = make_plan(demo.target, demo.draft, "draft-target")
    engine = Engine(plan, target=demo.target, draft=demo.draft, seed=0)
    rm = engine.target if role == "target" else engine.draft
    assert rm is not None
    with torch.no_grad():
        rm.model.lm_head.weight[3, 0] = float("nan")  # one row: one token's logit
    params = SamplingParams(max_new_tokens=4, temperature=temperature)
    with pytest.raises(ModelOutputError, match=f"the {role} model's logits hold [1-9]"):
        engine.generate(shared_prefix_prompts()[:2], params)


def test_logits_that_overflow_at_the_temperature_are_a_typed_error() -> None:
    from kvbudget.engine.sampling import probabilities
    from kvbudget.errors import ModelOutputError

    # 1e34 / 1e-5 = 1e39 > float32's 3.4e38
    with pytest.raises(ModelOutputError, match="overflow float32 at temperature 1e-05"):
        probabilities(torch.tensor([1e34, 0.0]), 1e-5)
    with pytest.raises(ModelOutputError, match="draft model's logits hold 0 NaN and 1 inf"):
        probabilities(torch.tensor([float("inf"), 0.0]), 1.0, "draft")
    assert probabilities(torch.tensor([0.0, 0.0]), 1.0).tolist() == [0.5, 0.5]
