"""One recipe per algorithm, each a readable top-to-bottom setup / train / save_checkpoint.

One module per algorithm (sft, reward, dpo, ppo, grpo, ilql); `loop` runs every recipe's steps (reporting,
evaluation, checkpoints, `divergence`'s judgement of non-finite steps), `common` holds the other shared
pieces, `checkpointing` the checkpoint half, `tokenize` and `pairs` turn rows into token ids. The recipes
import torch; `divergence` does not (the trainer's command line reads its error type).
"""
