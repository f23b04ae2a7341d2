"""The speculation modes: one table of what each means for the caches.

Every place that asks "what does ``--spec X`` imply" reads :data:`SPEC_MODE_TABLE`: the
planner (which draft it needs, which managers, whether sequences reserve lookahead), the
cache (how a prefix hit treats the draft) and the reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

DraftKind = Literal["head", "model", "mtp", "none"]
DraftPrefixPolicy = Literal["same_tokens", "drop_last_block"]


@dataclass(frozen=True, kw_only=True)
class SpecModeInfo:
    """What one speculation mode asks of the caches.

    ``draft``: what proposes tokens: an EAGLE or EAGLE3 ``head`` (a separate draft manager), a
    small ``model`` (a separate draft manager with its own geometry), the target's own
    ``mtp`` layers (MTP layers or, for ``dspark``, DeepSeek-V4.1's DSpark stages; costed
    with the target, or as a draft manager with ``separate_draft_cache``), or ``none``
    (n-gram lookup or no speculation).
    ``lookahead``: every sequence reserves room for ``max_draft_len`` unverified tokens.
    ``draft_prefix``: how a prefix hit treats the draft's KV (:mod:`kvbudget.cache.ids`):
    drafts that read the next token (EAGLE heads, MTP) hit a block only where the token
    after it matches too.
    """

    name: str
    draft: DraftKind
    lookahead: bool
    draft_prefix: DraftPrefixPolicy
    managers: str  # in words, for docs and reports


SPEC_MODE_TABLE: MappingProxyType[str, SpecModeInfo] = MappingProxyType(
    {
        info.name: info
        for info in (
            SpecModeInfo(
                name="eagle3",
                draft="head",
                lookahead=True,
                draft_prefix="drop_last_block",
                managers="target + a separate draft manager for the EAGLE3 head",
            ),
            SpecModeInfo(
                name="eagle",
                draft="head",
                lookahead=True,
                draft_prefix="drop_last_block",
                managers="target + a separate draft manager for the EAGLE-1/EAGLE-2 head",
            ),
            SpecModeInfo(
                name="dflash",
                draft="head",
                lookahead=True,
                # its draft KV at a position comes from the target's hidden state alone:
                # no trailing-block drop (vLLM 0.33.0 SpeculativeConfig
                # .needs_eagle_block_drop, config/speculative.py)
                draft_prefix="same_tokens",
                managers="target + a separate draft manager for the DFlash draft's layers",
            ),
            SpecModeInfo(
                name="mtp",
                draft="mtp",
                lookahead=True,
                draft_prefix="drop_last_block",
                managers="one target manager whose cost includes the MTP layers (default), "
                "or target + draft(MTP layers) with separate_draft_cache",
            ),
            SpecModeInfo(
                name="dspark",
                draft="mtp",
                lookahead=True,
                # DSpark's draft KV comes from the target's hidden states alone: no
                # trailing-block drop (vLLM 0.33.0 SpeculativeConfig.needs_eagle_block_drop)
                draft_prefix="same_tokens",
                managers="one target manager whose cost includes the DSpark stages "
                "(DeepSeek-V4.1's mtp.* layers: one window cache each)",
            ),
            SpecModeInfo(
                name="draft-target",
                draft="model",
                lookahead=True,
                draft_prefix="same_tokens",
                managers="target + a draft manager for a small model (own geometry)",
            ),
            SpecModeInfo(
                name="ngram",
                draft="none",
                lookahead=True,
                draft_prefix="same_tokens",
                managers="target only; every sequence still needs its lookahead slots",
            ),
            SpecModeInfo(
                name="none",
                draft="none",
                lookahead=False,
                draft_prefix="same_tokens",
                managers="target only, no lookahead",
            ),
        )
    }
)

SPEC_MODES: tuple[str, ...] = tuple(SPEC_MODE_TABLE)


__all__ = [
    "SPEC_MODES",
    "SPEC_MODE_TABLE",
    "DraftKind",
    "DraftPrefixPolicy",
    "SpecModeInfo",
]
