"""What samples an RL step's responses: the engines behind one protocol (`engines`: hf and megatron; `continuous`,
transformers' continuous batching; `vllm`, a vLLM server for the run), the sampling loop and its scoring
(`rollouts`), multi-turn episodes with an environment (`episodes`, `chat_turns`). The recipes (PPO, GRPO,
evaluation) call it; it knows nothing of their losses."""
