"""The reference speculative-decoding engine on the paged cache (needs the torch extra).

Modules::

    config          DecoderConfig: a Llama-family config.json or EAGLE3 head config (no torch)
    rope            rotary embeddings (default, llama3 scaling)
    model           Decoder (LlamaForCausalLM names), Eagle3Head
    checkpoint      seeded random weights; safetensors load/save (sharded), noisy copies
    kv_layout       which layer lives in which cache pool; views of the storage bytes
    paged_attention write K/V into slots, gather by block table, SDPA
    reference       the dense (no cache) forward the tests compare against
    sampling        SamplingParams; greedy and rejection-sampling verification
    scheduler       continuous batching: admit, reserve, preempt (swap/recompute), resume
    runner          one step's passes: propose, verify, draft catch-up
    accounting      storage bytes against the plan's, per role and tier
    demo            tiny demo checkpoints (kvbudget run, README, tests)
    engine          Engine, RequestOutput: the public facade

Example::

    from kvbudget.engine import Engine, SamplingParams
    engine = Engine(plan, target="ckpt/", draft="draft/", device="cpu", seed=0)
    outs = engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=32, temperature=0.0))
    outs[0].token_ids, engine.stats()
"""

from kvbudget.engine.checkpoint import noisy_copy, save_checkpoint
from kvbudget.engine.demo import DemoModels, write_demo_models
from kvbudget.engine.engine import Engine, RequestOutput
from kvbudget.engine.sampling import SamplingParams

__all__ = [
    "DemoModels",
    "Engine",
    "RequestOutput",
    "SamplingParams",
    "noisy_copy",
    "save_checkpoint",
    "write_demo_models",
]
