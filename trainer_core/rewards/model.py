"""reward: {kind: model, path: ...}: a reward model (a `reward` run's output) scores each (prompt, response).

Sequences are tokenized exactly as the reward recipe trained on them (data/pairs.py): a string
prompt as prompt + response + eos; a conversation (metadata["prompt_messages"], a message list,
which the RL recipe passes for message-list prompt rows) through the chat template with the
response as the assistant turn. The score is the head's output at the last non-pad token, read
by one forward pass per batch_size responses, in eval mode, without gradients, on a frozen copy,
placed by the backend (`place`: whole on every rank, or sharded where the backend shards frozen
models, in which case every rank must score as many batches as the others).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from rlplane.spec.sections import ModelReward
from rlplane.spec.shapes import DEFAULT_MAX_SEQ_LEN_CAP
from trainer_core.data.pairs import tokenize_side
from trainer_core.data.tokenize import Example, collate, pad_id
from trainer_core.models import RunResolver, load_model
from trainer_core.models.from_spec import max_positions


class ModelScorer:
    def __init__(
        self,
        spec: ModelReward,
        device: torch.device,
        *,
        seed: int,
        resolver: RunResolver | None,
        place: Callable[[nn.Module], nn.Module] | None = None,
    ) -> None:
        self.spec, self.device = spec, device
        model, self.tokenizer = load_model(spec.path, "score", resolver=resolver, seed=seed)
        self.max_tokens = max_positions(model) or DEFAULT_MAX_SEQ_LEN_CAP  # no stated limit (rare): the default cap
        model = model.eval().requires_grad_(False)
        self.model = place(model) if place is not None else model.to(device)

    def tokenize(self, prompt: str, response: str, meta: dict) -> Example:
        """The reward recipe's tokenization of one (prompt, response) as its chosen side."""
        messages = meta.get("prompt_messages")
        source: Any = messages if isinstance(messages, list) else prompt
        return tokenize_side(source, response, self.tokenizer, self.max_tokens)

    @torch.no_grad()
    def __call__(self, prompts: list[str], responses: list[str], metadata: list[dict]) -> list[float]:
        examples = [self.tokenize(p, r, m) for p, r, m in zip(prompts, responses, metadata, strict=True)]
        scores: list[float] = []
        for start in range(0, len(examples), self.spec.batch_size):
            batch = collate(examples[start : start + self.spec.batch_size], pad_id(self.tokenizer))
            out = self.model(input_ids=batch["input_ids"].to(self.device), attention_mask=batch["attention_mask"].to(self.device))
            scores += out.logits.squeeze(-1).float().cpu().tolist()
        return scores

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]  # frees the weights (and GPU memory) with the last reference
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
