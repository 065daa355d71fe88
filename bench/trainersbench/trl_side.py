"""The TRL half of bench/trainers.py: one SFTTrainer, RewardTrainer or DPOTrainer run, timed per step.

Run by bench/trainers.py with bench/.venv-trl/bin/python (trl 1.16.0), never imported by the project:

    bench/.venv-trl/bin/python bench/trainersbench/trl_side.py CONFIG.json

CONFIG holds recipe, model (a local save_pretrained directory), data (JSONL), out, steps, batch,
seq_len, lr, beta, threads and result (where the JSON answer goes); bench/gpu.py adds accumulation
(micro-batches per step), gpu (true: bf16 mixed precision on the GPU instead of fp32 on the CPU), and compile and liger
(TrainingArguments' torch_compile and use_liger_kernel). Settings match the rlplane
spec the bench writes: fp32 (TRL defaults to bf16), no gradient checkpointing (TRL defaults to on),
constant lr without warmup or weight decay, clip 1.0, sequential data order, no eval, no saving,
log every step. The answer: per-step seconds (end of step to end of step), non-padding input
tokens per step, the logged loss per step, and the versions.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import datasets
import torch
import transformers
import trl
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback


class StepClock(TrainerCallback):
    def __init__(self) -> None:
        self.ends: list[float] = []
        self.losses: list[float] = []
        self.started = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(float(logs["loss"]))


def counting(base: type) -> type:
    """`base` with training_step counting the non-padding tokens of each batch."""

    class Counting(base):
        tokens: list[int]
        batch_keys: list[str] = []

        def training_step(self, model, inputs, *args, **kwargs):
            if not self.batch_keys:
                type(self).batch_keys = sorted(inputs)
            masks = [v for k, v in inputs.items() if k.endswith("attention_mask")]
            self.tokens.append(int(sum(int(m.sum()) for m in masks)) if masks else int(inputs["input_ids"].numel()))
            return super().training_step(model, inputs, *args, **kwargs)

    Counting.__name__ = f"Counting{base.__name__}"
    return Counting


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text())
    torch.set_num_threads(int(cfg["threads"]))
    recipe = cfg["recipe"]
    rows = [json.loads(line) for line in Path(cfg["data"]).read_text().splitlines() if line.strip()]
    dataset = datasets.Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(cfg["model"])
    common = dict(
        output_dir=cfg["out"],
        max_steps=cfg["steps"],
        per_device_train_batch_size=cfg["batch"],
        gradient_accumulation_steps=int(cfg.get("accumulation", 1)),
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        bf16=bool(cfg.get("gpu")),  # bench/gpu.py: bf16 mixed precision on the GPU, as its rlplane runs
        fp16=False,
        use_cpu=not cfg.get("gpu"),
        gradient_checkpointing=False,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=1,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
        train_sampling_strategy="sequential",
        max_length=cfg["seq_len"],
        # bench/gpu.py's "run the same way" rows: TrainingArguments' own switches for what model.compile and
        # model.kernels do on our side (torch_compile compiles the whole model, use_liger_kernel patches it)
        torch_compile=bool(cfg.get("compile")),
        use_liger_kernel=bool(cfg.get("liger")),
    )
    if recipe == "sft":
        model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
        # padding-free (bench/packing.py) leaves max_length unenforced, which TRL refuses unless it is None: the
        # bench's rows are within it already
        free = cfg.get("padding_free", False)
        common |= {"max_length": None} if free else {}
        args = trl.SFTConfig(**common, packing=False, completion_only_loss=True, padding_free=free)
        cls, extra = counting(trl.SFTTrainer), {}
    elif recipe == "reward":
        model = AutoModelForSequenceClassification.from_pretrained(cfg["model"], dtype=torch.float32)
        args = trl.RewardConfig(**common)
        cls, extra = counting(trl.RewardTrainer), {}
    elif recipe == "dpo":
        model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
        ref = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)  # explicit: offline, no hub lookup
        args = trl.DPOConfig(**common, beta=cfg["beta"], loss_type=["sigmoid"], precompute_ref_log_probs=False)
        cls, extra = counting(trl.DPOTrainer), {"ref_model": ref}
    else:
        raise SystemExit(f"unknown recipe {recipe!r}")
    clock = StepClock()
    trainer = cls(model=model, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[clock], **extra)
    trainer.tokens = []
    trainer.train()
    step_s = [b - a for a, b in zip([clock.started, *clock.ends[:-1]], clock.ends, strict=True)]
    result = {
        "step_s": step_s,
        "tokens": trainer.tokens,
        "losses": clock.losses,
        "batch_keys": cls.batch_keys,
        "gradient_checkpointing": bool(getattr(trainer.model, "is_gradient_checkpointing", False)),
        "optim": str(args.optim),
        "bf16": bool(args.bf16),
        "torch_compile": bool(args.torch_compile),
        "use_liger_kernel": bool(args.use_liger_kernel),
        "versions": {"trl": trl.__version__, "torch": torch.__version__, "transformers": transformers.__version__},
    }
    Path(cfg["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
