"""What samples an RL step's responses: the engines (hf, megatron) behind one protocol (`engines`), the sampling
loop and its scoring (`rollouts`), multi-turn episodes with an environment (`episodes`, `chat_turns`). The recipes
(PPO, GRPO, evaluation) call it; it knows nothing of their losses."""
