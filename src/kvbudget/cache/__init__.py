"""Paged KV cache for a target and its draft in lockstep, built from a :class:`Plan`.

Layers, each in its own module::

    ids              id NewTypes and the policy / mode literals
    block_pool       BlockPool: free list, refcounts, LRU of cached blocks (one role/tier/kind)
    hashing          chained block hashes for prefix reuse
    windows          WindowPools: one role's sliding-window groups
    recurrent_state  StatePool: one role's recurrent-state slots
    request          Request, SeqBlocks: per-request state and per-role block tables
    manager          RoleManager: one role's pools; kv tiers, eviction, offload, onboarding
    swap             moving a request between GPU and host in every role
    shortage         Shortage, refuse(): a refusal as data (role, tier, pool, counts)
    spec_decode_cache  SpecDecodeCache: both roles in lockstep, the public facade
    storage          real tensors (torch, imported only when a device is given)
    stats            immutable snapshots returned by SpecDecodeCache.stats(), and their assembly
    invariants       the integrity check behind SpecDecodeCache.check_invariants()

Example::

    cache = SpecDecodeCache.from_plan(plan)          # metadata only; device="cpu" for tensors
    hit_tokens = cache.admit(RequestId("r1"), prompt_token_ids)
    cache.reserve(RequestId("r1"), 4)                # 3 draft tokens + the bonus token
    cache.commit(RequestId("r1"), accepted_token_ids)
    cache.free(RequestId("r1"))
"""

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.hashing import (
    ROOT_HASH,
    chain_root,
    extend_block_hashes,
    hash_block_tokens,
)
from kvbudget.cache.ids import BlockHash, BlockId, DraftPrefixPolicy, PreemptMode, RequestId
from kvbudget.cache.spec_decode_cache import SpecDecodeCache
from kvbudget.cache.stats import CacheStats, PoolStats

__all__ = [
    "ROOT_HASH",
    "BlockHash",
    "BlockId",
    "BlockPool",
    "CacheStats",
    "DraftPrefixPolicy",
    "PoolStats",
    "PreemptMode",
    "RequestId",
    "SpecDecodeCache",
    "chain_root",
    "extend_block_hashes",
    "hash_block_tokens",
]
