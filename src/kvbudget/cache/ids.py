"""Identifier and choice types of the paged cache.

Ids are ``NewType`` integers, strings or bytes so that a block id is never mistaken for a
token count in review; at run time they are plain ``int`` / ``str``.
"""

from __future__ import annotations

from typing import Literal, NewType

from kvbudget.spec_modes import DraftPrefixPolicy as _DraftPrefixPolicy

BlockId = NewType("BlockId", int)
"""Index of one block inside one pool (one role, one tier, one kind)."""

BlockHash = NewType("BlockHash", bytes)
"""Chained SHA-256 of a full block: parent hash, the block's token ids, extra keys."""

RequestId = NewType("RequestId", str)
"""The caller's name for a sequence; any hashable value works at run time."""

PreemptMode = Literal["swap", "recompute"]
"""How :meth:`SpecDecodeCache.preempt` frees a running request's GPU blocks.

* ``"swap"``: copy its blocks to the host tier; :meth:`SpecDecodeCache.resume` brings
  them back. Needs host blocks for every block of the request in every role.
* ``"recompute"``: drop the request; its full verified blocks stay cached (GPU LRU, then
  host), so re-admitting its tokens usually hits them.
"""

DraftPrefixPolicy = _DraftPrefixPolicy  # defined with the speculation modes
"""How a cached prefix is reused when a draft depends on the *next* token.

* ``"same_tokens"``: the KV of position ``i`` depends on tokens ``0..i`` only (a separate
  draft model, n-gram, no speculation): every hit block is reused.
* ``"drop_last_block"``: an EAGLE3 head or MTP layers compute position ``i`` from the
  target's hidden state at ``i`` *and token* ``i + 1``; a cached block may hold draft KV
  built with a different next token. Each block is hashed with the token after it
  (:mod:`kvbudget.cache.hashing`), so a hit block is always followed by the same token
  as in the new prompt, whichever request wrote it; a block is hashed only once that
  token is verified. One chain and one block table for every
  role: the target reuses exactly what the draft can, in lockstep. (The name is older
  than this rule: it used to drop the last block of a match, which missed blocks inside
  a hit written by a request with another next token.)
"""
