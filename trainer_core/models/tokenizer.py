"""A small byte-level BPE tokenizer, trained in code so the builtin models need no download.

The corpus is fixed and the trainer is deterministic, so every call builds the same vocabulary:
a checkpoint saved with one process loads in another. Digits are split one per token before BPE,
so `12+7=19` is `1 2 + 7 = 1 9` and an arithmetic answer is a sequence of single-digit tokens
the model can learn. Encoding plain text adds no special tokens; the chat template adds `<s>`
once and ends every message with `</s>`.
"""

from __future__ import annotations

import string
from functools import cache

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]  # ids 0..3, in this order
VOCAB_SIZE = 512

# <s><|user|>What is 3+4?</s><|assistant|>7</s>  -- add_generation_prompt ends with <|assistant|>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}{{ eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

_WORDS = (
    "the a an and or not is are was were be to of in on at for with by from as it this that "
    "what how many much who why when where which answer question result total sum difference "
    "product plus minus times divided equals number numbers count step left right up down walk "
    "good bad great nice happy sad yes no true false hello world please thank you model reward "
    "user assistant system prompt response chosen rejected solve compute calculate"
).split()


def _corpus() -> list[str]:
    """The fixed training corpus: arithmetic, words, letters, punctuation and chat markers."""
    lines = [f"{a}+{b}={a + b}" for a in range(20) for b in range(20)]
    lines += [f"{a}-{b}={a - b}" for a in range(20) for b in range(0, 20, 3)]
    lines += [f"{a}*{b}={a * b}" for a in range(13) for b in range(13)]
    lines += [f"What is {a} + {b}? The answer is {a + b}." for a in range(10) for b in range(10)]
    lines += [" ".join(_WORDS[i : i + 8]) for i in range(0, len(_WORDS), 3)]
    lines += [" ".join(_WORDS).capitalize() + "."]
    lines += [string.ascii_letters, string.digits, string.punctuation, " ".join(string.ascii_lowercase)]
    lines += [f"<|{role}|>" for role in ("system", "user", "assistant")] * 20
    return lines


@cache
def _trained_json() -> str:
    """Train once per process (about a second); later calls copy the result."""
    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodes: no <unk> in practice
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer.to_str()


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The builtin tokenizer: byte-level BPE, <= 512 tokens, `<pad> <s> </s> <unk>`, a chat template."""
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_trained_json()),
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        chat_template=CHAT_TEMPLATE,
        model_max_length=256,
    )
