"""What the tests share, so no test module imports another (docs/testing.md):

launch.py      the trainer's environment, torchrun launches, curve comparisons
specs.py       the specs several modules train (random walks, PPO/GRPO on the walker, Megatron's)
baselines.py   trained models shared by the whole session (the 300-step walker), as fixtures
worker_stack.py  an API process, Redis and real `rlplane worker` processes
servers.py     `rlplane api` / `rlplane up` as child processes
factories.py   API objects through the endpoints (specs, runs, projects, tokens)
training.py    specs on disk, metrics read back, held-out accuracy, exact-resume checks
"""
