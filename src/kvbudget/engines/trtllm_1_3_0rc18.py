"""TensorRT-LLM v1.3.0rc18 (2026-06-10): the last release whose V1 manager gave each draft
manager the whole host budget.

Everything :mod:`kvbudget.engines.trtllm` describes is taken to hold for this release too,
except one thing. ``KvCacheCreator.build_managers`` split ``host_cache_size`` between the
target and a separate draft manager only for the V2 manager (PR #13130). The V1 target
and draft managers were each built with the whole value, so EAGLE3, MTP and draft-target
pinned twice the configured host memory per rank. PR #14373 ("Fix KV cache host
splitting logic", ``tensorrt_llm/_torch/pyexecutor/_util.py``) fixed this. Its regression
test ``test_host_budget_not_doubled`` (``tests/unittest/_torch/executor/
test_kv_cache_budget_split.py``, the version in ``shared/trtllm-src/tests/pr14373``)
reads "both managers used to receive the full host_cache_size". The PR merged on
2026-06-12 as c3238810f2, after v1.3.0rc18 (published 2026-06-10) and before v1.3.0rc19
(2026-06-23).

The plan reports the doubling with numbers and emits half the per-rank host budget, so
that target and draft pin the budget together (:func:`kvbudget.engines.trtllm.host_setting`).

Not checked against this release's code (no stored copy of its ``_util.py`` was pinned):
the rest of the sizing, which ``benchmarks/fidelity/trtllm`` checks at 38198e34 only.
"""

from __future__ import annotations

from kvbudget.engines.trtllm import TrtllmRelease, engine_model

RELEASE = TrtllmRelease(
    version="1.3.0rc18",
    ref="v1.3.0rc18 (2026-06-10; PR #14373 merged after it, as c3238810f2)",
    host_split=False,
)

MODEL = engine_model(RELEASE, default=False)

__all__ = ["MODEL", "RELEASE"]
