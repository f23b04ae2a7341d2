"""End to end: the engine's sampled tokens follow the target's distribution.

A target with a vocabulary of 8 and a draft that disagrees with it (its weights plus 50%
noise, or a random EAGLE3 head) generate 3 tokens for ``N = 2_000`` copies of one prompt
at temperature 1, two drafts per step, so the second and third tokens come out of every
path of the rejection sampler (accepted drafts, residual draws, bonus tokens cut at the
limit). The exact marginals of tokens 2 and 3 are computed from the target alone with
the dense reference (summing over the 8 first tokens, and the 64 pairs). Pearson's chi-
square (bins with fewer than 5 expected merged) is compared with its 1 - 1e-4 quantile
for its degrees of freedom (``scipy.stats.chi2.ppf(1 - 1e-4, df)``, tabled below): a
correct engine fails one check with probability 1e-4 over seeds; the seed is fixed. An
engine whose verifier accepts every draft fails the same check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_engine_support import make_plan

torch = pytest.importorskip("torch")

from kvbudget.engine import Engine, SamplingParams, noisy_copy  # noqa: E402
from kvbudget.engine import runner as runner_module  # noqa: E402
from kvbudget.engine.checkpoint import build_model  # noqa: E402
from kvbudget.engine.demo import eagle3_config, llama_config, write_model  # noqa: E402
from kvbudget.engine.model import Decoder  # noqa: E402
from kvbudget.engine.reference import dense_logits  # noqa: E402

N = 2_000
PROMPT = [1, 2, 3]
CHI2_1E4 = {1: 15.1367, 2: 18.4207, 3: 21.1075, 4: 23.5127, 5: 25.7448, 6: 27.8563, 7: 29.8775}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    root = tmp_path_factory.mktemp("e2e")
    cfg = llama_config(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, vocab_size=8)
    target = write_model(cfg, root / "target", seed=11)
    draft = str(noisy_copy(target, root / "draft", noise_std=0.5, seed=3))
    head = write_model(eagle3_config(cfg), root / "eagle3", seed=4)
    return target, draft, head


def marginals(target: str) -> tuple[torch.Tensor, torch.Tensor]:
    model = build_model(target, seed=0, device="cpu")
    assert isinstance(model, Decoder)

    def probs(ids: list[int]) -> torch.Tensor:
        return torch.softmax(dense_logits(model, ids)[-1].double(), -1)

    p1 = probs(PROMPT)
    p2 = torch.zeros(8, dtype=torch.float64)
    p3 = torch.zeros(8, dtype=torch.float64)
    for a in range(8):
        pa = probs([*PROMPT, a])
        p2 += p1[a] * pa
        for b in range(8):
            p3 += p1[a] * pa[b] * probs([*PROMPT, a, b])
    return p2, p3


def chi_square(counts: list[int], probs: torch.Tensor) -> tuple[float, int]:
    """The statistic and its degrees of freedom, bins under 5 expected merged."""
    expected = (probs * sum(counts)).tolist()
    obs, exp, small_o, small_e = [], [], 0, 0.0
    for o, e in zip(counts, expected, strict=True):
        if e < 5:
            small_o, small_e = small_o + o, small_e + e
        else:
            obs.append(o)
            exp.append(e)
    if small_e:
        obs.append(small_o)
        exp.append(small_e)
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    return stat, len(obs) - 1


def sampled_counts(
    target: str, draft: str, spec: str = "draft-target"
) -> tuple[list[int], list[int], float]:
    plan = make_plan(target, draft, spec, max_batch_size=32, max_draft_len=2)
    engine = Engine(plan, target=target, draft=draft, seed=5)
    outs = engine.generate([PROMPT] * N, SamplingParams(max_new_tokens=3, temperature=1.0))
    second, third = [0] * 8, [0] * 8
    for o in outs:
        second[o.token_ids[1]] += 1
        third[o.token_ids[2]] += 1
    return second, third, engine.stats()["acceptance_rate"]


@pytest.mark.parametrize("spec", ["draft-target", "eagle3"])
def test_sampled_tokens_follow_the_target(models: tuple[str, str, str], spec: str) -> None:
    target, draft, head = models
    assert json.loads((Path(target) / "config.json").read_text())["vocab_size"] == 8
    p2, p3 = marginals(target)
    drafted = draft if spec == "draft-target" else head
    second, third, acceptance = sampled_counts(target, drafted, spec)
    assert 0.1 < acceptance < 0.9  # drafts are both accepted and rejected
    for counts, probs in ((second, p2), (third, p3)):
        stat, df = chi_square(counts, probs)
        assert stat < CHI2_1E4[df], (stat, df, counts, (probs * N).tolist())


def test_an_engine_that_accepts_every_draft_is_caught(
    models: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, draft, _ = models

    def accept_all(drafts, q, p, gen):  # type: ignore[no-untyped-def]
        return len(drafts), int(torch.multinomial(p[len(drafts)], 1, generator=gen))

    monkeypatch.setattr(runner_module, "verify_rejection", accept_all)
    p2, _ = marginals(target)
    second, _, _ = sampled_counts(target, draft)
    stat, df = chi_square(second, p2)
    assert stat > CHI2_1E4[df]
