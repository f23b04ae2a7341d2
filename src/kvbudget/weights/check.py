"""Where a model's safetensors headers and its inventory disagree: :func:`headers_notes`."""

from __future__ import annotations

from kvbudget.errors import ConfigError
from kvbudget.model_spec import ModelSpec
from kvbudget.weights.placement import weights_bytes

# a difference above this share of the inventory's figure is reported
TOLERANCE = 0.005


def headers_notes(model: ModelSpec, *, include_mtp: bool = False) -> list[str]:
    """Warnings for ``model`` whose weights come from its safetensors headers: where the
    headers' bytes (what an engine loads, one rank holding the whole model) and the
    inventory's count from config.json differ by more than 0.5%, and by how much; where
    the index's ``total_size`` is not the headers' sum. Empty without headers or when
    the inventory cannot count the model."""
    checkpoint = model.checkpoint
    if checkpoint is None:
        return []
    try:
        headers = weights_bytes(model, include_mtp=include_mtp)
        counted = weights_bytes(model, include_mtp=include_mtp, source="inventory").total_bytes
    except ConfigError:
        return []
    notes = []
    loaded, diff = headers.total_bytes, headers.total_bytes - counted
    if abs(diff) > TOLERANCE * counted:
        other = ""
        if headers.other_bytes:
            other = (
                f"; {headers.other_bytes:,} B of it in stored tensors kvbudget's "
                f"{model.model_type} inventory does not name (held whole on every TP rank)"
            )
        notes.append(
            f"{model.name}: its safetensors headers hold {loaded:,} B of the weights an "
            f"engine loads, the inventory from config.json counts {counted:,} B "
            f"({diff:+,} B, {100 * diff / counted:+.2f}%): the plan uses the headers{other}"
        )
    total, index = checkpoint.total_bytes, checkpoint.index_total_bytes
    if index is not None and index != total:
        notes.append(
            f"{model.name}: model.safetensors.index.json gives total_size {index:,} B, its "
            f"shards' headers {total:,} B ({total - index:+,} B): the plan uses the headers"
        )
    return notes


__all__ = ["TOLERANCE", "headers_notes"]
