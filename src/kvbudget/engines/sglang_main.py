"""SGLang at ``main`` @ 003fca8027387a3d6565b2c08e497e3020ac6211, where its sizing
differs from the 0.5.23 wheel (:mod:`kvbudget.engines.sglang`, the default ``sglang``).

Everything :mod:`kvbudget.engines.sglang` describes was read at this commit; one thing
differs from 0.5.23:

* **The sidecar draft's host pool has one page more** than the target's host pool
  (``python/sglang/srt/mem_cache/pool_host/base.py`` ``HostKVCache``: ``(tokens // page
  + 1) x page`` of the draft's own size, PR #30393); 0.5.23's ``build_full_draft_pools``
  gives it the host group's logical size (run by the fidelity harness).

The Mamba / Gated DeltaNet state pools and DeepSeek-V3.2's indexer pools were checked
against 0.5.23 only: this release refuses those models (``SglangRelease.hybrid_pools``).
"""

from __future__ import annotations

from kvbudget.engines.sglang import SglangRelease, engine_model

RELEASE = SglangRelease(
    version="main@003fca80",
    ref="003fca8027387a3d6565b2c08e497e3020ac6211",
    default=False,
    sidecar_host_padding_page=True,
    hybrid_pools=False,
)

MODEL = engine_model(RELEASE)

__all__ = ["MODEL", "RELEASE"]
