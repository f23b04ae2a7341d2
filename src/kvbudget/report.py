"""Human-readable rendering of a plan (rich tables); exact numbers stay in ``--json``."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from kvbudget.commands.terminal import printable
from kvbudget.plan_types import Plan, PoolPlan
from kvbudget.units import format_bytes


def render_plan(plan: Plan) -> Group:
    """A rich renderable of ``plan``: budget, managers per tier, capacity, warnings."""
    parts: list[Table | Text] = [
        _title(plan),
        _budget_table(plan),
        Text(f"GPU budget = {plan.budget.gpu_source}", style="dim"),
        _managers_table(plan),
        _pools_table(plan),
        _capacity_table(plan),
    ]
    if (ranks := _ranks_table(plan)) is not None:
        parts.append(ranks)
    parts.extend(_engine_lines(plan))
    for w in plan.warnings:
        parts.append(Text(f"warning: {printable(w)}", style="yellow"))
    return Group(*parts)


def _title(plan: Plan) -> Text:
    """The plan's heading: target, draft, layout, dtype, block size, provenance."""
    title = Text.assemble(
        ("kvbudget plan: ", "bold"),
        printable(plan.target),
        f"\n  draft: {printable(_draft(plan))}",
        f"\n  {_layout(plan)}  kv={plan.kv_dtype}  {_block(plan)}",
    )
    if plan.pp > 1:
        title.append(f"  (PP stage {plan.pp_stage} shown)")
    if plan.spec_reason:
        title.append(f"\n  {plan.spec_reason}", style="dim")
    if (provenance := _provenance(plan)) is not None:
        title.append(f"\n  {provenance}", style="dim")
    return title


def _budget_table(plan: Plan) -> Table:
    """GPU memory, weights, non-KV memory and the KV budget per tier, per rank and node."""
    b = plan.budget
    budget = Table(title="Budget per rank", show_header=False, title_justify="left")
    budget.add_column("item")
    budget.add_column("value", justify="right")
    if b.gpu_memory_bytes is not None and b.weights_bytes is not None:
        budget.add_row(f"GPU memory ({b.gpu_name})", format_bytes(b.gpu_memory_bytes))
        budget.add_row("weights on this rank", format_bytes(b.weights_bytes))
        nk = b.non_kv
        if nk is not None and nk.source.startswith("given (--reserve)"):
            budget.add_row("non-KV memory (--reserve)", format_bytes(nk.total_bytes))
        elif nk is not None:
            budget.add_row("activations (one forward pass)", format_bytes(nk.activation_bytes))
            if nk.draft_activation_bytes:
                budget.add_row("draft activations", format_bytes(nk.draft_activation_bytes))
            budget.add_row("CUDA graphs", format_bytes(nk.cuda_graph_bytes))
            budget.add_row("runtime (NCCL, workspaces)", format_bytes(nk.runtime_bytes))
    budget.add_row("KV budget, GPU", format_bytes(b.gpu_bytes))
    budget.add_row("KV budget, host", format_bytes(b.host_bytes))
    budget.add_row("KV budget, disk", format_bytes(b.disk_bytes))
    if b.gpus_per_node > 1:
        node_gpu = format_bytes(b.gpu_bytes * b.gpus_per_node)
        budget.add_row(f"GPU KV per node ({b.gpus_per_node} ranks)", node_gpu)
        budget.add_row(
            f"host pinned per node ({b.gpus_per_node} ranks)", format_bytes(b.node_host_bytes)
        )
    return budget


def _managers_table(plan: Plan) -> Table:
    """kvbudget's managers: role, model, layers, bytes per token, fixed bytes."""
    managers = Table(title="Managers (per rank)", title_justify="left")
    for col in ("role", "model", "layers", "bytes/token", "fixed"):
        managers.add_column(
            col,
            justify="left" if col in ("role", "model") else "right",
            overflow="fold",
        )
    for m in plan.managers:
        managers.add_row(
            m.role,
            Text(printable(m.model)),  # a folder name: no markup, no control characters
            _layers(m.num_layers, m.layers),
            f"{m.slope_bytes_per_token:,}",
            format_bytes(m.fixed_bytes),
        )
    return managers


def _pools_table(plan: Plan) -> Table:
    """The engine's pools per role, kind and tier."""
    engine = plan.engine
    tiers = Table(title=f"Pools (per rank): {engine.name} {engine.version}", title_justify="left")
    for col in ("role", "pool", "tier", "bytes", "blocks", "tokens", "padding"):
        # fold rather than cut: a narrow terminal wraps numbers, never truncates them
        tiers.add_column(
            col, justify="left" if col in ("role", "pool", "tier") else "right", overflow="fold"
        )
    for pool in engine.pools:
        tiers.add_row(
            pool.role,
            _pool_kind(pool),
            pool.tier,
            format_bytes(pool.bytes),
            f"{pool.blocks:,}",
            f"{pool.tokens:,}",
            format_bytes(pool.padding_bytes),
        )
    return tiers


def _capacity_table(plan: Plan) -> Table:
    """Tokens per tier and sequences at once, in the engine's count."""
    c = plan.capacity
    cap = Table(title="Capacity", show_header=False, title_justify="left")
    cap.add_column("item")
    cap.add_column("value", justify="right")
    cap.add_row(f"tokens on GPU ({plan.engine.name}'s count)", f"{c.tokens:,}")
    cap.add_row("tokens on host", f"{c.host_tokens:,}")
    if c.disk_tokens:
        cap.add_row("tokens on disk", f"{c.disk_tokens:,}")
    cap.add_row(
        f"sequences of {c.max_seq_len:,} tokens at once",
        f"{c.max_concurrency:,} of {c.max_batch_size:,}",
    )
    if c.max_seq_len_at_batch is not None:
        cap.add_row(
            f"tokens per sequence at the full batch of {c.max_batch_size:,}",
            f"{c.max_seq_len_at_batch:,}",
        )
    if c.kv_groups > 1:
        cap.add_row(f"tokens on GPU, all {c.kv_groups} DP groups", f"{c.total_tokens:,}")
        cap.add_row(f"sequences at once, all {c.kv_groups} DP groups", f"{c.total_concurrency:,}")
    return cap


def _ranks_table(plan: Plan) -> Table | None:
    """The last stage's TP ranks where they differ (None: every rank is the same)."""
    ranks = [st for st in plan.stages if st.tp_ranks != "all"]
    if not ranks:
        return None
    per_rank = Table(title="TP ranks of the last stage", title_justify="left")
    for col in ("TP ranks", "weights", "KV budget", "blocks"):
        per_rank.add_column(col, justify="left" if col == "TP ranks" else "right")
    for st in ranks:
        per_rank.add_row(
            st.tp_ranks,
            "-" if st.weights_bytes is None else format_bytes(st.weights_bytes),
            format_bytes(st.gpu_bytes),
            f"{st.blocks:,}",
        )
    return per_rank


def _engine_lines(plan: Plan) -> list[Text]:
    """The engine's predicted start-up lines, its notes and where its settings come from."""
    engine = plan.engine
    lines: list[Text] = []
    if engine.log:
        lines.append(
            Text.assemble(
                (f"{engine.name} {engine.version}", "bold"),
                " will allocate (predicted start-up lines; capacity above is the engine's):",
            )
        )
        lines.extend(Text(f"  {line}") for line in engine.log)
    for note in engine.notes:  # what the settings do there, as --emit and --json say it
        lines.append(Text(f"  note: {printable(note.removeprefix('# '))}", style="dim"))
    if engine.settings:
        lines.append(Text(f"  settings: kvbudget plan ... --emit {engine.name}", style="dim"))
    return lines


def _layout(plan: Plan) -> str:
    """``tp=4 pp=1``, with the draft's TP, DP groups and EP when they are set."""
    parts = [f"tp={plan.tp}", f"pp={plan.pp}"]
    if plan.draft_tp is not None:
        parts.append(f"draft_tp={plan.draft_tp}")
    if plan.dp > 1:
        attention = f" (attention tp={plan.tp // plan.dp})" if plan.dp_attention else ""
        parts.append(f"dp={plan.dp}{' dp-attention' if plan.dp_attention else ''}{attention}")
    if plan.ep > 1:
        parts.append(f"ep={plan.ep}")
    return " ".join(parts)


def _provenance(plan: Plan) -> str | None:
    """The Hub commits and where the weights figures come from, in one line; None for
    models whose weights are counted from their configs (presets)."""
    if not (plan.target_revision or plan.draft_revision) and all(
        src == "inventory" for src in plan.weights_source.values()
    ):
        return None
    revisions = [
        f"{role} revision {rev}"
        for role, rev in (("target", plan.target_revision), ("draft", plan.draft_revision))
        if rev
    ]
    sources = ", ".join(f"{role}: {src}" for role, src in plan.weights_source.items())
    return "  ".join([*revisions, f"weights from {sources}"])


def _draft(plan: Plan) -> str:
    """The speculation mode in words."""
    if plan.spec == "mtp" and plan.draft is not None:  # a Gemma-4 assistant
        return f"{plan.draft} (mtp: reads the target's KV cache)"
    if plan.spec == "mtp":
        own = plan.manager("draft") is not None
        return f"the target's MTP layers (mtp, {'own cache' if own else 'in the target cache'})"
    if plan.spec == "dspark":  # SGLang's draft worker keeps a pool of its own
        own = any(x.role == "draft" for x in plan.engine.pools)
        where = "own pool" if own else "in the target cache"
        return f"the target's DSpark stages (dspark, {where})"
    if plan.spec == "ngram":
        return "none (ngram: lookahead slots, no draft cache)"
    if plan.draft is None:
        return "none (no speculation)"
    return f"{plan.draft} ({plan.spec})"


def _block(plan: Plan) -> str:
    """The engine's tokens per block, and the one asked for when the engine changed it
    (vLLM's hybrid block size, TensorRT-LLM's FlashMLA 64)."""
    engine_block = plan.capacity.tokens_per_block
    if engine_block == plan.tokens_per_block:
        return f"{engine_block} tokens per block"
    return (
        f"{engine_block} tokens per block ({plan.engine.name}'s; --tokens-per-block "
        f"{plan.tokens_per_block} asked)"
    )


def _pool_kind(pool: PoolPlan) -> str:
    """``kv``, ``window 128``, ``state``, ... with the engine's name for the pool."""
    kind = pool.kind if pool.window_tokens is None else f"{pool.kind} {pool.window_tokens:,}"
    return f"{kind} ({pool.name})" if pool.name else kind


def _layers(count: int, which: str) -> str:
    """``32``, ``62 (with MTP)`` or ``1 (MTP)``: the layers a manager caches."""
    return {"model": f"{count}", "all": f"{count} (with MTP)", "mtp": f"{count} (MTP)"}.get(
        which, f"{count} ({which})"
    )


def print_plan(plan: Plan, console: Console) -> None:
    """Print :func:`render_plan` to ``console``."""
    console.print(render_plan(plan))
