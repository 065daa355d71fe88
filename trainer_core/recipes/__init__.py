"""One recipe per algorithm, each a readable top-to-bottom setup / train / save_checkpoint.

One module per algorithm (sft, reward, dpo, spin, ppo, grpo, ilql), each keeping its algorithm inline; `loop` runs
every recipe's steps (reporting, evaluation, checkpoints, `divergence`'s judgement of non-finite steps), `common`
holds the other shared pieces (the run's platform fields, setup, batches, one optimizer step, evaluation),
`checkpointing` the checkpoint half (one CheckpointState a recipe fills), `online` what PPO and GRPO share around
their algorithm (the rollout package, trainer_core/rollout, samples and scores; `samples` is what a run shows),
`tokenize` and `pairs` turn rows into token ids. The recipes import torch; `divergence` does not (the trainer's
command line reads its error type).
"""
