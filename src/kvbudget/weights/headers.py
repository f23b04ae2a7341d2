"""The checkpoint's own tensors placed on ranks: header bytes by inventory tensor name.

A :class:`~kvbudget.checkpoint.Checkpoint` (read from safetensors headers) says how many
bytes each stored tensor takes, whatever its format; the inventory
(:mod:`kvbudget.inventory`) says how engines shard and place the tensor of that name. So
each stored tensor is matched to its inventory tensor by name (:func:`match`) and one
rank holds :func:`share` of its bytes: the fraction of the inventory tensor's values that
rank holds (``rank_shape`` over the full shape: a head split, a replicated KV head, the
vocabulary padded to 64 rows; ``ceil(experts / ep)`` of the experts under expert
parallelism). A quantized weight's scales, zero points and packed values share the
weight's fraction. A stored tensor matching no inventory tensor (a rotary buffer, a
vision tower the family module does not list) is held whole, on the stage of the layer
its name gives (``layers.N``; past the last decoder layer, or ``mtp.N``: an MTP layer),
else (and for a vision tower's layers) the first.

An MTP layer's stored copies of the main model's embedding and head (DeepSeek-V3's
``model.layers.61.embed_tokens.weight`` and ``model.layers.61.shared_head.head.weight``,
1.85 GB each in bf16; GLM-4.5 stores ``model.layers.92.shared_head.head.weight``) are
not held (:func:`main_model_copy`): the engines load them and then point the MTP layer
at the main model's (vLLM 0.33.0 ``v1/worker/gpu/spec_decode/eagle/utils.py``
``load_eagle_model``: the draft's ``embed_tokens`` replaced by the target's at PP 1,
every layer's ``shared_head.head`` by the target's lm_head). Under vLLM with PP > 1 the
draft keeps its embedding; the vLLM plan warns with its bytes
(:mod:`kvbudget.engines.vllm_pp_draft`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from kvbudget.inventory import Place, Weight

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_MAIN_MODEL_COPY = re.compile(r"(?:^|\.)layers\.(\d+)\.(?:embed_tokens|shared_head\.head)\.")
_MTP = re.compile(r"^(?:model\.)?mtp\.\d+\.")
_VISION = re.compile(r"(?:^|\.)(?:vision|visual|multi_modal_projector|mm_projector)")
_EXPERT_INDEX = re.compile(r"(?<=\.experts)\.\d+(?=\.)")
# a multimodal checkpoint's text model nested one level down: transformers' newer
# wrappers (Gemma-3, Qwen3.5, Llama-4) store ``model.language_model.layers.N...`` for the
# ``model.layers.N...`` of the text model's own naming
_NESTED_TEXT_MODEL = re.compile(r"^model\.language_model\.")
# suffixes a packed format appends to a weight's own name (gpt-oss's MXFP4 experts:
# gate_up_proj_blocks, gate_up_proj_scales; their biases: gate_up_proj_bias)
_PACKED_SUFFIXES = ("_blocks", "_scales", "_scale", "_bias", "_zeros", "_packed", "_shape")


def renamed(name: str, rules: tuple[tuple[str, str], ...]) -> str:
    """``name`` as the inventory names it: a family's checkpoint naming rules
    (``Architecture.checkpoint_names``: regex pattern and replacement, in order)."""
    for pattern, replacement in rules:
        name = re.sub(pattern, replacement, name)
    return name


def match(names: list[str], inventory: tuple[Weight, ...]) -> list[Weight | None]:
    """The inventory tensor each stored tensor name belongs to (None: none).

    ``model.layers.3.mlp.experts.17.down_proj.weight_scale_inv`` belongs to
    ``model.layers.3.mlp.experts.down_proj`` (the expert index dropped, then the longest
    dotted prefix; a last part less a packed format's suffix too: gpt-oss's
    ``gate_up_proj_blocks``);
    a name under a wrapper's prefix (``language_model.model.layers.0...``) to the
    inventory name it ends with; a text model nested in the wrapper's own ``model``
    (``model.language_model.layers.0...``) to the ``model.layers.0...`` it stands for.
    """
    by_name = {w.name: w for w in inventory}
    return [_lookup(_canonical(name), by_name) for name in names]


def _canonical(name: str) -> str:
    """``name`` with the expert index dropped and a nested text model's prefix undone."""
    return _NESTED_TEXT_MODEL.sub("model.", _EXPERT_INDEX.sub("", name))


def _lookup(name: str, by_name: dict[str, Weight]) -> Weight | None:
    parts = name.split(".")
    for start in range(len(parts)):  # the name itself first, then under a wrapper prefix
        for end in range(len(parts), start, -1):
            last = parts[end - 1]
            stems = [last] + [last.removesuffix(x) for x in _PACKED_SUFFIXES if last.endswith(x)]
            for stem in stems:
                found = by_name.get(".".join([*parts[start : end - 1], stem]))
                if found is not None:
                    return found
    return None


def share(w: Weight, *, tp: int, attention_tp: int, ep: int) -> Fraction:
    """The fraction of ``w``'s stored bytes one rank holds (module docstring)."""
    if w.expert and ep > 1:  # whole experts, spread over the EP ranks
        return Fraction(-(-w.copies // ep), w.copies)
    rows, cols = w.rank_shape(attention_tp if w.component == "attention" else tp)
    return Fraction(rows * cols, w.rows * w.cols)


def unmatched_place(name: str, num_layers: int) -> Place:
    """Where a stored tensor no inventory tensor names is held (module docstring)."""
    if _MTP.match(name):  # DeepSeek-V4's MTP layers, V4.1's DSpark stages: mtp.{j}.*
        return "mtp"
    found = _LAYER.search(name)
    if found is None or _VISION.search(name):  # a vision tower is on the first stage
        return "first"
    layer = int(found[1])
    return layer if layer < num_layers else "mtp"


def main_model_copy(name: str, num_layers: int) -> bool:
    """Whether stored tensor ``name`` is an MTP layer's copy of the main model's embedding
    or head, which no engine holds beside the main model's (module docstring)."""
    found = _MAIN_MODEL_COPY.search(name)
    return found is not None and int(found[1]) >= num_layers


__all__ = ["main_model_copy", "match", "renamed", "share", "unmatched_place"]
