"""backend.kind megatron: Megatron-Core's GPTModel behind the recipes' HF-shaped calls.

    backend.py        the Backend (tensor, pipeline and sequence parallel; data parallel across groups)
    model.py          building and running a GPTModel; causal_lm.py the shard behind the HF causal LM's call;
                      trunk.py its final hidden states; heads.py a score or value head beside the shard
    pipeline.py       1F1B and interleaved (virtual_stages.py) schedules; sequence_parallel.py
    layout.py         the recipe's parameter names <-> the shards'; optim_state.py a torch optimizer's state over
                      the shards <-> over the HF parameters; wrap.py the model a recipe sees
    dist_checkpoint*  each rank's shards through megatron's dist_checkpointing (safetensors, no pickle)
    generate.py       sampling from the shards (megatron's KV cache); cpu_shim.py megatron-core on CPU (gloo)

The HF <-> Megatron weight conversion (and NeMo checkpoints) is model loading: trainer_core/models/megatron.
These modules import megatron-core; nothing here is imported until backend.kind is megatron.
"""
