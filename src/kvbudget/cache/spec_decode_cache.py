"""``SpecDecodeCache``: the target and draft caches of one rank, in lockstep.

Both roles always hold the same tokens of every request: each operation first asks every
pool whether it fits (reading only), then applies it to every pool, so a refused operation
raises and changes nothing, and no request is ever held by one role only. The roles' kv
pools use the same number of blocks per tier (the plan's ``capacity.<tier>_blocks``; the
rest stays idle and is reported), so they would evolve identically; they share one set of
block ids and one block table per request instead (:mod:`kvbudget.cache.kv_tiers`): the
same tokens are cached, evicted, offloaded and onboarded together in every role, for the
bookkeeping cost of one. Window and recurrent-state pools are each role's own.

Request lifecycle::

    admit(prompt) -> [reserve(k) -> commit(accepted)]* -> free
                         |                   ^
                         +-> preempt(mode="swap") -> resume
                         +-> preempt(mode="recompute")  (request dropped; re-admit it)

Prefix reuse: full blocks of verified tokens (prompt tokens count as verified) are hashed
in a chain (:mod:`kvbudget.cache.hashing`); ``admit`` reuses the longest prefix that every
role holds in some tier, leaving at least one prompt token to compute. With a draft whose
KV depends on the next token (EAGLE3, MTP: policy ``"drop_last_block"``) each block is
hashed with the token after it, so a hit block is always followed by the new prompt's
own next token (its draft KV is valid) and a block is hashed once that token is
verified. Sliding-window groups reuse a prefix when the blocks the window needs at the
hit position are still cached (:mod:`kvbudget.cache.windows`); the longest prefix valid
for every group of every role wins. Roles with recurrent layers reuse a prefix of ``n``
blocks when one of their cached states holds the state after block ``n - 1``
(:mod:`kvbudget.cache.recurrent_state`; the plan's ``cached_states``); with none planned,
reuse is off for the whole cache.

Lookahead: ``reserve`` adds room for at most ``max_reserve_tokens`` unverified tokens
(default ``capacity.lookahead_tokens + 1``: the draft tokens plus the target's bonus
token); ``commit`` keeps the accepted tokens and releases the rest, tail first.

This module is the public facade and the lockstep hot paths (admit, reserve, commit,
free); the shared kv tiers in :mod:`kvbudget.cache.kv_tiers`, swapping in
:mod:`kvbudget.cache.swap`, the stats snapshot in
:mod:`kvbudget.cache.stats`, the integrity check in :mod:`kvbudget.cache.invariants`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from kvbudget.cache.decode_run import DecodeRun
from kvbudget.cache.hashing import chain_root, extend_block_hashes, valid_extra_keys
from kvbudget.cache.ids import BlockId, DraftPrefixPolicy, PreemptMode, RequestId
from kvbudget.cache.invariants import CacheView, check_cache
from kvbudget.cache.kv_tiers import GPU, HOST, KvTiers
from kvbudget.cache.manager import RoleManager
from kvbudget.cache.request import Request
from kvbudget.cache.shortage import Shortage, refuse
from kvbudget.cache.stats import CacheStats, KvCounts, RequestCounters, snapshot
from kvbudget.cache.swap import swap_in, swap_out
from kvbudget.cache.tokens import CheckedIds, checked_prompt_ids, checked_tokens
from kvbudget.engines.kvbudget_cache import MODEL as OWN_CACHE
from kvbudget.errors import (
    InvalidArgumentError,
    InvalidCacheOperationError,
    UnknownRequestError,
)
from kvbudget.plan_types import Plan, Role
from kvbudget.spec_modes import SPEC_MODE_TABLE
from kvbudget.split import TIERS, Tier

if TYPE_CHECKING:
    import torch

    from kvbudget.cache.storage import CacheStorage


class SpecDecodeCache:
    """Paged KV cache of a target and its draft, enforcing one rank's :class:`Plan`.

    Build it with :meth:`from_plan`. Every mutating method either succeeds or raises a
    :class:`~kvbudget.errors.CacheError` and leaves the cache unchanged. Not thread-safe.
    """

    def __init__(
        self,
        plan: Plan,
        *,
        device: str | None = None,
        draft_prefix: DraftPrefixPolicy | None = None,
        max_reserve_tokens: int | None = None,
    ) -> None:
        """See :meth:`from_plan`."""
        if not isinstance(plan, Plan):
            raise InvalidArgumentError(f"plan must be a Plan (from kvbudget.plan), got {plan!r}")
        if not plan.managers:
            raise InvalidArgumentError("the plan has no cache manager; nothing to build")
        if plan.engine.name != OWN_CACHE.name:
            raise InvalidArgumentError(
                f"this plan is {plan.engine.name}'s (engine={plan.engine.name!r}); the "
                "SpecDecodeCache needs a plan made with engine='kvbudget' (the default)"
            )
        tpbs = {m.tokens_per_block for m in plan.managers}
        if any(type(t) is not int or t < 1 for t in tpbs | {plan.tokens_per_block}):
            raise InvalidArgumentError(
                f"the plan's tokens_per_block must be a positive int, got {sorted(tpbs)}; use "
                "a plan from kvbudget.plan"
            )
        if len(tpbs) != 1:
            raise InvalidArgumentError(f"managers disagree on tokens_per_block: {sorted(tpbs)}")
        self._plan = plan
        self._tokens_per_block: int = tpbs.pop()
        # token ids index the target's vocabulary; a hand-built plan without one still
        # bounds them to int64, the width they are hashed at
        self._vocab_size: int = plan.vocab_size if plan.vocab_size else 2**63
        if draft_prefix is None:
            draft_prefix = SPEC_MODE_TABLE[plan.spec].draft_prefix
        if draft_prefix not in ("same_tokens", "drop_last_block"):
            raise InvalidArgumentError(
                f"draft_prefix must be 'same_tokens' or 'drop_last_block', got {draft_prefix!r}"
            )
        self._draft_prefix: DraftPrefixPolicy = draft_prefix
        if max_reserve_tokens is None:
            max_reserve_tokens = plan.capacity.lookahead_tokens + 1
        if isinstance(max_reserve_tokens, bool) or not isinstance(max_reserve_tokens, int):
            raise InvalidArgumentError(
                f"max_reserve_tokens must be an int, got {max_reserve_tokens!r}"
            )
        if max_reserve_tokens < 1:
            raise InvalidArgumentError(f"max_reserve_tokens must be >= 1, got {max_reserve_tokens}")
        self._max_reserve_tokens = max_reserve_tokens
        self._max_seq_len = plan.capacity.max_seq_len
        # the plan's common blocks per tier: every role holds the same tokens
        cap = plan.capacity
        gpu, host, disk = cap.gpu_blocks, cap.host_blocks, cap.disk_blocks
        for m in plan.managers:
            for tier, common in zip(TIERS, (gpu, host, disk), strict=True):
                if common > m.tier(tier).blocks:
                    raise InvalidArgumentError(
                        f"the plan's {tier} capacity of {common} blocks is more than the "
                        f"{m.tier(tier).blocks} of its {m.role} manager; use a plan from "
                        "kvbudget.plan"
                    )
        # block hashes cover the next token (hashing); recurrent state: 2 boundaries per prompt
        self._with_next = draft_prefix == "drop_last_block"
        record = device is not None
        self._kv = KvTiers(plan.managers, usable_blocks=(gpu, host, disk), record_copies=record)
        boundaries = 2 if self._with_next else 1
        self._managers: tuple[RoleManager, ...] = tuple(
            RoleManager(m, state_boundaries_at_admit=boundaries, record_copies=record)
            for m in plan.managers
        )
        self._roles: tuple[Role, ...] = tuple(m.role for m in plan.managers)
        # roles with pools of their own (windows, state): the hot loops visit only these
        self._fixed: tuple[bool, ...] = tuple(m.has_fixed for m in self._managers)
        self._has_fixed = any(self._fixed)
        self._has_windows = any(m.windows is not None for m in self._managers)
        self._has_state = any(m.state is not None for m in self._managers)
        # a role with recurrent state reuses prefixes only from its cached states
        self._prefix_reuse = not any(
            m.state is not None and m.state.checkpoints.num_blocks == 0 for m in self._managers
        )
        self._requests: dict[RequestId, Request[RoleManager]] = {}
        self._counters = RequestCounters()
        self._storage: CacheStorage | None = None
        if device is not None:
            from kvbudget.cache.storage import CacheStorage

            self._storage = CacheStorage(plan.managers, device)

    @classmethod
    def from_plan(
        cls,
        plan: Plan,
        device: str | None = None,
        *,
        draft_prefix: DraftPrefixPolicy | None = None,
        max_reserve_tokens: int | None = None,
    ) -> SpecDecodeCache:
        """A cache whose pools are exactly ``plan``'s blocks per role and tier.

        Args:
            plan: one rank's plan; sizes are taken from it, never re-derived.
            device: ``None`` for metadata only (simulation); ``"cpu"`` or ``"cuda"`` for
                real tensors (needs torch), host tier pinned when CUDA is available.
            draft_prefix: prefix-reuse policy; default ``"drop_last_block"`` for
                ``spec`` eagle3 / mtp, else ``"same_tokens"``.
            max_reserve_tokens: the most unverified tokens a request may hold; default
                ``plan.capacity.lookahead_tokens + 1``.

        Raises:
            InvalidArgumentError: an unusable plan (one made for another engine
                included), policy or device.
        """
        return cls(
            plan, device=device, draft_prefix=draft_prefix, max_reserve_tokens=max_reserve_tokens
        )

    # ------------------------------------------------------------------ settings (read-only)
    @property
    def plan(self) -> Plan:
        """The plan the pools were built from."""
        return self._plan

    @property
    def tokens_per_block(self) -> int:
        """Tokens per block of every kv and window pool."""
        return self._tokens_per_block

    @property
    def draft_prefix(self) -> DraftPrefixPolicy:
        """How a cached prefix is reused when the draft depends on the next token."""
        return self._draft_prefix

    @property
    def max_reserve_tokens(self) -> int:
        """The most unverified tokens one request may hold."""
        return self._max_reserve_tokens

    @property
    def prefix_reuse(self) -> bool:
        """Whether prompts reuse cached blocks (off when a role keeps recurrent state and
        the plan gives it no cached states)."""
        return self._prefix_reuse

    # ------------------------------------------------------------------ queries
    # Every query reads only. Unknown ids raise UnknownRequestError; a role the cache
    # lacks raises InvalidArgumentError; table reads of a swapped-out request raise
    # InvalidCacheOperationError.
    @property
    def roles(self) -> tuple[Role, ...]:
        """The roles held, in order (``("target", "draft")`` or ``("target",)``)."""
        return self._roles

    @property
    def storage(self) -> CacheStorage | None:
        """The real tensors, or None for a metadata-only cache."""
        return self._storage

    def __contains__(self, request_id: object) -> bool:
        """True while ``request_id`` is admitted (running or swapped out); False for an
        unhashable value, which can never be admitted."""
        try:
            return request_id in self._requests
        except TypeError:
            return False

    def __len__(self) -> int:
        """The number of admitted requests, running or swapped out."""
        return len(self._requests)

    def _get(self, request_id: RequestId) -> Request[RoleManager]:
        try:
            return self._requests[request_id]
        except (KeyError, TypeError):  # TypeError: an unhashable id was never admitted
            raise UnknownRequestError(
                f"request {request_id!r} is not in the cache (never admitted, already freed, "
                "or preempted with mode='recompute')"
            ) from None

    def _running(self, request_id: RequestId, what: str) -> Request[RoleManager]:
        req = self._get(request_id)
        if req.swapped:
            raise InvalidCacheOperationError(
                f"cannot {what} request {request_id!r}: it is swapped out; resume() it first"
            )
        return req

    def _role_index(self, role: Role) -> int:
        try:
            return self._roles.index(role)
        except ValueError:
            raise InvalidArgumentError(
                f"no {role!r} manager in this cache (roles: {', '.join(self._roles)})"
            ) from None

    @property
    def available_gpu_blocks(self) -> int:
        """GPU kv blocks an allocation may take now: free plus cached (evictable)."""
        return self._kv.gpu.num_available

    def num_tokens(self, request_id: RequestId) -> int:
        """Verified tokens of a request (prompt plus committed). Raises
        UnknownRequestError."""
        return len(self._get(request_id).tokens)

    def num_reserved(self, request_id: RequestId) -> int:
        """Unverified lookahead tokens a request holds room for. Raises
        UnknownRequestError."""
        return self._get(request_id).num_reserved

    def is_swapped(self, request_id: RequestId) -> bool:
        """True while a request is swapped out to the host tier. Raises
        UnknownRequestError."""
        return self._get(request_id).swapped

    def block_table(self, request_id: RequestId, role: Role) -> tuple[BlockId, ...]:
        """GPU block ids of a running request in ``role``; entry ``i`` holds tokens
        ``i*tokens_per_block ..``. Every role has the same ids (rows of its own kv tensor,
        see :mod:`kvbudget.cache.kv_tiers`). A new tuple; raises for unknown or swapped
        requests."""
        req = self._running(request_id, "read the block table of")
        self._role_index(role)
        return tuple(req.table)

    def window_tables(
        self, request_id: RequestId, role: Role
    ) -> tuple[tuple[int, tuple[BlockId, ...]], ...]:
        """Per window group of ``role``: (index of the first kept block, block ids); ``()``
        for a role without windows. New tuples; raises for unknown or swapped requests."""
        seq = self._running(request_id, "read the window tables of").seqs[self._role_index(role)]
        return tuple(zip(seq.window_first, (tuple(t) for t in seq.window_tables), strict=True))

    def state_slot(self, request_id: RequestId, role: Role) -> int | None:
        """The recurrent-state slot of a request in ``role`` (None without state). Raises
        for unknown or swapped requests."""
        return self._running(request_id, "read the state slot of").seqs[self._role_index(role)].slot

    def state_saves(self, request_id: RequestId, role: Role) -> tuple[tuple[int, int], ...]:
        """The cached states the last admit or commit of a request picked in ``role``, as
        ``(tokens, checkpoint)``: write the recurrent state after that many tokens into
        that checkpoint (:meth:`checkpoint_page`) in the same step. ``()`` for a role
        without state. Raises for unknown or swapped requests."""
        seq = self._running(request_id, "read the state saves of").seqs[self._role_index(role)]
        return tuple(seq.saves)

    # ------------------------------------------------------------------ helpers
    def _flush(self) -> None:
        """Run the block copies the managers logged (real storage only), then clear them."""
        storage = self._storage
        if storage is None:
            return
        copies = self._kv.copies
        if copies:
            storage.run_copies(copies)
            copies.clear()
        for i, m in enumerate(self._managers):
            restores = m.state.restores if m.state is not None else None
            if restores:
                storage.restore_states(i, restores)
                restores.clear()

    # ------------------------------------------------------------------ operations
    def admit(
        self,
        request_id: RequestId,
        token_ids: Sequence[int] | CheckedIds,
        *,
        extra_keys: tuple[Hashable, ...] = (),
        cache_salt: str | None = None,
    ) -> int:
        """Admit a new request with its prompt in every role; return the prompt tokens
        served from the cache (a multiple of ``tokens_per_block``). ``token_ids`` may be a
        :class:`~kvbudget.cache.tokens.CheckedIds` (ids checked once, only its bound is
        compared with the vocabulary).

        ``extra_keys`` (a LoRA name, ...) enter every block hash and ``cache_salt`` (a
        tenant's secret, as vLLM's ``cache_salt``) picks the hash chain's root, so no extra
        key can pose as a salt (:mod:`kvbudget.cache.hashing`): prompts with different
        keys or salts never share blocks, so one tenant cannot detect another's cached
        prompt. Mutates the cache.

        Raises:
            OutOfBlocksError: some role lacks GPU blocks, window blocks or a state slot;
                nothing changes.
            InvalidCacheOperationError: the id is unhashable or taken, the prompt is empty
                or not a sequence of int token ids (bools refused) in the target's
                vocabulary, ``extra_keys`` is not a tuple of strings, ints, bytes, bools,
                None or tuples of those, or ``cache_salt`` is not a string.
        """
        if not isinstance(request_id, Hashable):
            raise InvalidCacheOperationError(
                f"request id must be hashable (e.g. RequestId('r1')), got {request_id!r}"
            )
        if request_id in self._requests:
            raise InvalidCacheOperationError(
                f"request {request_id!r} is already admitted; free() it or use a new id"
            )
        tokens, packed = checked_prompt_ids(token_ids, request_id, self._vocab_size)
        num_tokens = len(tokens)
        if num_tokens == 0:
            raise InvalidCacheOperationError(f"request {request_id!r} has an empty prompt")
        if not valid_extra_keys(extra_keys):
            raise InvalidCacheOperationError(
                "extra_keys must be a tuple of strings, ints, bytes, bools, None or tuples "
                f"of those, e.g. ('my-lora',); got {extra_keys!r}"
            )
        if cache_salt is not None and not isinstance(cache_salt, str):
            raise InvalidCacheOperationError(f"cache_salt must be a string, got {cache_salt!r}")
        tpb = self._tokens_per_block
        kv = self._kv
        req = Request(tokens, extra_keys, chain_root(cache_salt), self._managers, self._fixed)
        hashes = req.hashes
        num_hit = 0
        match: list[tuple[int, BlockId]] = []
        if self._prefix_reuse:
            with_next = self._with_next  # then a hash covers the token after its block
            if type(token_ids) is CheckedIds:  # a shared prefix's blocks, hashed once
                hashes += token_ids.head_hashes(tpb, with_next, req.extra_keys, req.root)
            extend_block_hashes(
                hashes, tokens, tpb, req.extra_keys, packed, req.root, with_next=with_next
            )
            max_hit = (num_tokens - 1) // tpb  # at least one token left to compute
            match = kv.match(hashes, max_hit)
            num_hit = len(match)
            # the longest prefix whose window blocks and cached state every role holds
            while num_hit and self._has_fixed:
                if all(m.hit(hashes, num_hit) for m, _ in req.parts):
                    break
                num_hit -= 1
        num_blocks = -(-num_tokens // tpb)

        def shortages() -> list[Shortage | None]:
            return [
                kv.admit_shortage(match, num_hit, num_blocks),
                *(m.admit_shortage(hashes, num_hit, num_tokens) for m, _ in req.parts),
            ]

        refusals = shortages()
        if num_hit and self._has_windows and any(refusals):
            # a window hit holds the blocks its prefill reads besides the new window; when
            # that does not fit, the prompt is admitted as it would be without the hit
            num_hit = 0
            refusals = shortages()
        refuse(f"cannot admit request {request_id!r} ({num_tokens} prompt tokens)", refusals)
        kv.admit(req.table, hashes, match, num_hit, num_blocks)
        for m, seq in req.parts:
            m.admit(seq, hashes, num_hit, num_tokens)
        self._flush()
        self._requests[request_id] = req
        self._counters.prompt_tokens += num_tokens
        self._counters.hit_tokens += num_hit * tpb
        return num_hit * tpb

    def reserve(self, request_id: RequestId, num_tokens: int) -> None:
        """Add room for ``num_tokens`` unverified tokens (lookahead) in every role.

        A request never holds more than the plan's ``max_seq_len`` tokens, committed and
        reserved together: near that length the reservation is cut to what is left (as
        engines cap ``tokens + K`` at ``max_model_len``), so a full-length sequence takes
        exactly the blocks the plan counted for it.

        Raises:
            OutOfBlocksError: not enough GPU (or window) blocks in some role.
            InvalidCacheOperationError: negative count, or the request would hold more
                than ``max_reserve_tokens`` unverified tokens.
            UnknownRequestError: no such request.
        """
        try:
            req = self._requests[request_id]
        except (KeyError, TypeError):  # TypeError: an unhashable id
            req = self._running(request_id, "reserve for")  # raises
        if req.swapped:
            req = self._running(request_id, "reserve for")  # raises
        if type(num_tokens) is not int or num_tokens < 0:
            raise InvalidCacheOperationError(
                f"num_tokens must be a non-negative int, got {num_tokens!r}"
            )
        committed = len(req.tokens)
        room = self._max_seq_len - committed - req.num_reserved
        if num_tokens > room:
            num_tokens = max(0, room)
        reserved = req.num_reserved + num_tokens
        if reserved > self._max_reserve_tokens:
            raise InvalidCacheOperationError(
                f"cannot reserve {num_tokens!r} tokens for request {request_id!r}: it holds "
                f"{req.num_reserved} of at most max_reserve_tokens={self._max_reserve_tokens} "
                "unverified tokens; commit first, or plan a larger max_draft_len"
            )
        total = committed + reserved
        table = req.table
        tpb = self._tokens_per_block
        extra = 0 if total <= len(table) * tpb else -(-total // tpb) - len(table)
        if extra:
            kv = self._kv
            available = kv.gpu.num_available
            if extra > available:
                raise kv.gpu_shortage(extra, available).error(
                    f"cannot reserve {num_tokens} tokens for request {request_id!r}"
                )
        if self._has_windows:
            for m, seq in req.parts:
                if m.windows is not None:
                    shortage = m.windows.shortage(seq, committed, total)
                    if shortage is not None:
                        raise shortage.error(
                            f"cannot reserve {num_tokens} tokens for request {request_id!r}"
                        )
            for m, seq in req.parts:
                if m.windows is not None:
                    m.windows.grow(seq, total)
        if extra:
            self._kv.take_gpu(table, extra)
            if self._storage is not None:
                self._flush()
        req.num_reserved = reserved

    def commit(self, request_id: RequestId, accepted_token_ids: Sequence[int]) -> None:
        """Append the verified ``accepted_token_ids`` (at most the reserved count) and
        release the rest of the lookahead in every role; newly full blocks are hashed.

        Raises:
            InvalidCacheOperationError: more tokens than reserved, or not a sequence of
                int token ids; nothing changes.
            UnknownRequestError: no such request.
        """
        try:
            req = self._requests[request_id]
        except (KeyError, TypeError):  # TypeError: an unhashable id
            req = self._running(request_id, "commit to")  # raises
        if req.swapped:
            req = self._running(request_id, "commit to")  # raises
        kind = type(accepted_token_ids)
        vocab = self._vocab_size
        if kind is list or kind is tuple:  # the per-token path: ints in range pass as is
            for t in accepted_token_ids:
                if type(t) is not int or not 0 <= t < vocab:
                    accepted_token_ids = checked_tokens(
                        accepted_token_ids, "the accepted tokens", request_id, vocab
                    )
                    break
        else:
            accepted_token_ids = checked_tokens(
                accepted_token_ids, "the accepted tokens", request_id, vocab
            )
        accepted = len(accepted_token_ids)
        if accepted > req.num_reserved:
            raise InvalidCacheOperationError(
                f"cannot commit {accepted} tokens to request {request_id!r}: only "
                f"{req.num_reserved} are reserved; reserve() room for them first"
            )
        req.tokens.extend(accepted_token_ids)
        req.num_reserved = 0
        self._settle(req)

    def _settle(self, req: Request[RoleManager]) -> None:
        """After verified tokens were appended to ``req`` (no lookahead left): hash its
        newly full blocks and release the blocks past ``ceil(tokens / tpb)``, tail first
        (:meth:`commit`'s second half; :meth:`~kvbudget.cache.decode_run.DecodeRun.settle`
        is its copy for caches with kv pools only)."""
        tokens = req.tokens
        committed = len(tokens)
        tpb = self._tokens_per_block
        hashes = req.hashes
        table = req.table
        with_next = self._with_next
        if self._prefix_reuse and (committed - with_next) // tpb > len(hashes):
            start = len(hashes)
            extend_block_hashes(
                hashes, tokens, tpb, req.extra_keys, root=req.root, with_next=with_next
            )
            self._kv.gpu.register(table, hashes, start)
            for m, seq in req.parts:
                if m.windows is not None:
                    m.windows.register(seq, hashes, start)
                if m.state is not None:
                    m.state.commit(seq, hashes, start)
        elif self._has_state:
            for _, seq in req.parts:
                seq.saves = []
        if len(table) * tpb - committed >= tpb:  # blocks past ceil(committed / tpb)
            self._kv.gpu.release_tail(table, len(table) + (-committed // tpb))
        if self._has_windows:
            for m, seq in req.parts:
                if m.windows is not None:
                    m.windows.shrink(seq, committed)

    def decode_run(self, request_ids: Sequence[RequestId], token_id: int) -> DecodeRun | None:
        """A :class:`~kvbudget.cache.decode_run.DecodeRun` over running ``request_ids``
        (each holding no lookahead) that commit ``token_id`` only: many decode steps with
        the cache touched only where blocks change. None for a cache with window or state
        pools or real storage (decode them step by step).

        Raises:
            InvalidCacheOperationError: a request swapped out or holding lookahead, or a
                token id outside the vocabulary.
            UnknownRequestError: no such request.
        """
        if self._has_fixed or self._storage is not None:
            return None
        if type(token_id) is not int or not 0 <= token_id < self._vocab_size:
            raise InvalidCacheOperationError(f"token id {token_id!r} is outside the vocabulary")
        requests = []
        for rid in request_ids:
            req = self._running(rid, "decode")
            if req.num_reserved:
                raise InvalidCacheOperationError(
                    f"request {rid!r} holds {req.num_reserved} reserved tokens; commit first"
                )
            requests.append(req)
        return DecodeRun(
            self._kv,
            requests,
            token_id,
            tokens_per_block=self._tokens_per_block,
            with_next=self._with_next,
            prefix_reuse=self._prefix_reuse,
        )

    def free(self, request_id: RequestId) -> None:
        """Release every block of a request in every role, tail first (its full blocks
        stay cached for reuse). Raises UnknownRequestError (e.g. a double free)."""
        req = self._get(request_id)
        self._kv.tiers[HOST if req.swapped else GPU].release_table(req.table)
        for m, seq in req.parts:
            m.release_all(seq)
        del self._requests[request_id]

    def preempt(self, request_id: RequestId, *, mode: PreemptMode) -> tuple[int, ...]:
        """Take a running request off the GPU; its lookahead is rolled back first.

        ``mode="swap"``: its blocks move to the host tier in every role (shared with host
        blocks of the same hash); :meth:`resume` brings them back. ``mode="recompute"``:
        the request is dropped (as by :meth:`free`); re-admit the returned tokens.
        Returns the request's verified tokens.

        Raises:
            OutOfBlocksError: swap without enough host blocks in some role; nothing changes.
            InvalidCacheOperationError: unknown mode, already swapped, or a swap of a cache
                with sliding-window / recurrent layers (their GPU-only state has no host
                budget: use ``mode="recompute"``).
            UnknownRequestError: no such request.
        """
        if mode not in ("swap", "recompute"):
            raise InvalidCacheOperationError(f"mode must be 'swap' or 'recompute', got {mode!r}")
        req = self._running(request_id, "preempt")
        tokens = tuple(req.tokens)
        if mode == "recompute":
            self.free(request_id)
            self._counters.recomputed += 1
            return tokens
        swap_out(self._kv, req, request_id, self._tokens_per_block)
        self._flush()
        self._counters.swapped_out += 1
        return tokens

    def resume(self, request_id: RequestId) -> None:
        """Bring a swapped-out request back to the GPU in every role (host copies of its
        full blocks stay cached there).

        Raises:
            OutOfBlocksError: not enough GPU blocks in some role; nothing changes.
            InvalidCacheOperationError: the request is not swapped out.
            UnknownRequestError: no such request.
        """
        swap_in(self._kv, self._get(request_id), request_id)
        self._flush()

    # ------------------------------------------------------------------ storage access
    def page(self, request_id: RequestId, role: Role, index: int) -> torch.Tensor:
        """The bytes of block ``index`` of a running request's table in ``role`` (a view
        of the GPU tier tensor). Raises InvalidCacheOperationError without storage."""
        if self._storage is None:
            raise InvalidCacheOperationError("this cache is metadata-only (device=None)")
        r = self._role_index(role)
        table = self._running(request_id, "read a page of").table
        if type(index) is not int or not 0 <= index < len(table):
            raise InvalidCacheOperationError(
                f"block index {index!r} is outside the table of request {request_id!r} in "
                f"{role} (0 to {len(table) - 1})"
            )
        return self._storage.page(r, GPU, table[index])

    def state_page(self, request_id: RequestId, role: Role) -> torch.Tensor:
        """The bytes of a running request's recurrent-state slot in ``role`` (a view).
        Raises InvalidCacheOperationError without storage or state."""
        if self._storage is None:
            raise InvalidCacheOperationError("this cache is metadata-only (device=None)")
        r = self._role_index(role)
        slot = self._running(request_id, "read the state of").seqs[r].slot
        if slot is None:
            raise InvalidCacheOperationError(f"role {role} of this cache keeps no recurrent state")
        return self._storage.state_row(r, slot)

    def checkpoint_page(self, role: Role, checkpoint: int) -> torch.Tensor:
        """The bytes of cached state ``checkpoint`` of ``role`` (a view; write the state
        :meth:`state_saves` names here). Raises InvalidCacheOperationError without storage
        or for a checkpoint the role lacks."""
        if self._storage is None:
            raise InvalidCacheOperationError("this cache is metadata-only (device=None)")
        r = self._role_index(role)
        state = self._managers[r].state
        count = 0 if state is None else state.checkpoints.num_blocks
        if type(checkpoint) is not int or not 0 <= checkpoint < count:
            raise InvalidCacheOperationError(
                f"cached state {checkpoint!r} is outside role {role}'s {count} cached states"
            )
        return self._storage.checkpoint_row(r, BlockId(checkpoint))

    # ------------------------------------------------------------------ introspection
    def stats(self) -> CacheStats:
        """A snapshot of every pool and the request counters. Reads only."""
        return snapshot(self._kv, self._managers, self._requests.values(), self._counters)

    def kv_counts(self, tier: Tier = "gpu") -> KvCounts:
        """The kv pool's counters in ``tier`` (the same in every role, one block table):
        used, cached, offloaded and onboarded blocks, as :meth:`stats` reports them.
        Reads only; raises InvalidArgumentError for an unknown tier."""
        if tier not in TIERS:
            raise InvalidArgumentError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
        p = self._kv.tiers[TIERS.index(tier)]
        return KvCounts(p.num_used, p.num_cached, p.offloaded_blocks, p.onboarded_blocks)

    def check_invariants(self) -> None:
        """Raise AssertionError naming the first broken invariant. Reads only; O(size).

        Checked: every pool's free + used + cached == total and its internal indexes;
        every block's refcount equals its owners (no block owned twice by one request,
        no unowned used block, no owned cached state); every request holds
        ``ceil((tokens + reserved) / tokens_per_block)`` kv blocks (one table, every
        role's rows), each hashed as its tokens are; window tables hold exactly their
        window; every stateful running request has its slot; no role uses more blocks
        or bytes than its plan share in any tier.
        """
        check_cache(
            CacheView(
                tokens_per_block=self._tokens_per_block,
                max_reserve_tokens=self._max_reserve_tokens,
                prefix_reuse=self._prefix_reuse,
                with_next=self._with_next,
                kv=self._kv,
                managers=self._managers,
                requests=self._requests,
                storage=self._storage,
            )
        )
