"""Small hand-built plans for the cache tests (and a check that they are consistent).

``tiny_plan`` builds Plan values directly, so every test states its own tight budget:
per role ``gpu_blocks`` / ``host_blocks`` / ``disk_blocks`` blocks of
``slope x tokens_per_block`` bytes.
"""

from __future__ import annotations

from dataclasses import MISSING, fields

from kvbudget.cost import WindowGroup
from kvbudget.engines.kvbudget_cache import MODEL as OWN_CACHE
from kvbudget.engines.kvbudget_cache import own_pools
from kvbudget.plan_types import Budget, Capacity, EnginePlan, ManagerPlan, Plan, Role, TierPlan


def _tier(tier: str, blocks: int, block_bytes: int, tpb: int, fixed: int = 0) -> TierPlan:
    return TierPlan(
        tier=tier,  # type: ignore[arg-type]
        bytes=blocks * block_bytes + fixed,
        blocks=blocks,
        tokens=blocks * tpb,
        padding_bytes=0,
    )


def tiny_manager(
    role: Role,
    *,
    gpu_blocks: int,
    host_blocks: int = 0,
    disk_blocks: int = 0,
    tokens_per_block: int = 4,
    slope: int = 8,
    max_batch_size: int = 4,
    window_groups: tuple[WindowGroup, ...] = (),
    state_bytes_per_seq: int = 0,
    cached_states: int = 0,
    state_bytes_per_checkpoint: int = 0,
) -> ManagerPlan:
    block_bytes = slope * tokens_per_block
    window_bytes = max_batch_size * sum(
        g.blocks_per_seq * tokens_per_block * g.bytes_per_token for g in window_groups
    )
    fixed = (
        window_bytes
        + state_bytes_per_seq * max_batch_size
        + cached_states * state_bytes_per_checkpoint
    )
    return ManagerPlan(
        role=role,
        model=f"tiny-{role}",
        layers="model",
        num_layers=2,
        kv_dtype="bf16",
        tokens_per_block=tokens_per_block,
        slope_bytes_per_token=slope,
        fixed_bytes=fixed,
        window_bytes=window_bytes,
        window_groups=window_groups,
        state_bytes_per_seq=state_bytes_per_seq,
        max_batch_size=max_batch_size,
        cached_states=cached_states,
        state_bytes_per_checkpoint=state_bytes_per_checkpoint,
        gpu=_tier("gpu", gpu_blocks, block_bytes, tokens_per_block, fixed),
        host=_tier("host", host_blocks, block_bytes, tokens_per_block),
        disk=_tier("disk", disk_blocks, block_bytes, tokens_per_block),
    )


def tiny_plan(
    *,
    gpu_blocks: int = 8,
    host_blocks: int = 0,
    disk_blocks: int = 0,
    draft: bool = True,
    spec: str = "draft-target",
    tokens_per_block: int = 4,
    max_draft_len: int = 3,
    max_batch_size: int = 4,
    draft_gpu_blocks: int | None = None,
    draft_host_blocks: int | None = None,
    target_window_groups: tuple[WindowGroup, ...] = (),
    target_state_bytes_per_seq: int = 0,
    target_cached_states: int = 0,
    target_state_bytes_per_checkpoint: int = 0,
) -> Plan:
    """A plan with a target (8 bytes/token) and optionally a draft (2 bytes/token)."""
    managers = [
        tiny_manager(
            "target",
            gpu_blocks=gpu_blocks,
            host_blocks=host_blocks,
            disk_blocks=disk_blocks,
            tokens_per_block=tokens_per_block,
            slope=8,
            max_batch_size=max_batch_size,
            window_groups=target_window_groups,
            state_bytes_per_seq=target_state_bytes_per_seq,
            cached_states=target_cached_states,
            state_bytes_per_checkpoint=target_state_bytes_per_checkpoint,
        )
    ]
    if draft:
        managers.append(
            tiny_manager(
                "draft",
                gpu_blocks=gpu_blocks if draft_gpu_blocks is None else draft_gpu_blocks,
                host_blocks=host_blocks if draft_host_blocks is None else draft_host_blocks,
                disk_blocks=disk_blocks,
                tokens_per_block=tokens_per_block,
                slope=2,
                max_batch_size=max_batch_size,
            )
        )
    lookahead = 0 if spec == "none" else max_draft_len
    values: dict[str, object] = dict(
        target="tiny-target",
        draft="tiny-draft" if draft else None,
        spec=spec,
        tp=1,
        pp=1,
        kv_dtype="bf16",
        tokens_per_block=tokens_per_block,
        budget=Budget(
            gpu_bytes=sum(m.gpu.bytes for m in managers),
            host_bytes=sum(m.host.bytes for m in managers),
            disk_bytes=sum(m.disk.bytes for m in managers),
            gpu_source="given",
        ),
        managers=tuple(managers),
        engine=EnginePlan(
            name=OWN_CACHE.name,
            version=OWN_CACHE.version,
            source=OWN_CACHE.source,
            pools=own_pools(tuple(managers)),
            settings={},
            capacity=Capacity(
                tokens=gpu_blocks * tokens_per_block,
                tokens_per_block=tokens_per_block,
                gpu_blocks=min(m.gpu.blocks for m in managers),
                host_blocks=min(m.host.blocks for m in managers),
                disk_blocks=min(m.disk.blocks for m in managers),
                host_tokens=host_blocks * tokens_per_block,
                disk_tokens=disk_blocks * tokens_per_block,
                max_seq_len=64,
                lookahead_tokens=lookahead,
                max_batch_size=max_batch_size,
                max_concurrency=1,
                max_seq_len_at_batch=16,
            ),
        ),
    )
    # fields the plan gained since (e.g. the PP stage reported) default to 0 here
    for f in fields(Plan):
        if f.default is MISSING and f.default_factory is MISSING:
            values.setdefault(f.name, 0)
    return Plan(**values)  # type: ignore[arg-type]


def test_tiny_plan_sizes_follow_the_arguments() -> None:
    plan = tiny_plan(gpu_blocks=5, host_blocks=3)
    target, draft = plan.managers
    assert (target.gpu.blocks, target.host.blocks, target.block_bytes) == (5, 3, 32)
    assert (draft.gpu.blocks, draft.host.blocks, draft.block_bytes) == (5, 3, 8)
