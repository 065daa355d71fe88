"""The TRL half of bench/backends.py: TRL's DPOTrainer on DeepSpeed ZeRO-3, one rank of a torchrun job.

Run by bench/backends.py with the TRL venv's interpreter (trl 1.16.0, deepspeed 0.19.8), never
imported by the project:

    bench/.venv-trl/bin/python -m torch.distributed.run --nproc_per_node 2 --master_port PORT \\
        bench/backendsbench/trl_dpo.py CONFIG.json

CONFIG holds model (a local save_pretrained directory), data (JSONL with prompt/chosen/rejected),
out, steps, micro_batch, accumulation, seq_len, lr, beta, zero_stage, threads and result (where
rank 0 writes the JSON answer). DeepSpeed comes in through `DPOConfig(deepspeed=dict)`: the HF
Trainer hands its own torch AdamW to DeepSpeed as the client optimizer (as rlplane's DeepSpeed
backend does), and TRL wraps the explicit reference model in a second, inference-only ZeRO-3
engine. On a CPU-only machine accelerate needs a hand to see the ranks as one DeepSpeed job (see
`deepspeed_state_on_cpu`). fp32, no gradient checkpointing, constant lr without warmup or weight decay, clip 1.0,
sequential data order, no eval, no saving, log every step. The answer: per-step seconds (end of
step to end of step), the logged loss per step (averaged over ranks by the Trainer), the engine,
ZeRO stage and optimizer as run, accelerate's process count and type, and the versions.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import datasets
import deepspeed
import torch
import transformers
import trl
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback


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


def ds_config(cfg: dict) -> dict:
    """ZeRO-3 without offload or mixed precision; the batch numbers are "auto" so the Trainer's own fill them."""
    return {
        "zero_optimization": {"stage": cfg["zero_stage"]},
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def deepspeed_state_on_cpu() -> None:
    """Make accelerate's process state a DeepSpeed one over torchrun's ranks on CPU.

    Left alone, accelerate 1.15 finds no device backend on a CPU-only machine (it looks for nccl,
    hccl, xccl, ...; gloo only on its `cpu=True` path, which is never DeepSpeed), so it reports
    one process while DeepSpeed's engine runs on two: the data is not sharded and TRL's first
    `gather_for_metrics` fails ("ProcessGroupGloo::allgather: invalid output tensor list at index 0
    (expected length 2, got 1)"). So: a `cpu=True` PartialState (gloo over the torchrun ranks)
    marked DEEPSPEED, which the Trainer then takes as it is (accelerator_config use_configured_state),
    and DeepSpeed's comm set up on that group before from_pretrained's zero.Init asks it the world size.
    """
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    state = PartialState(cpu=True)
    state.distributed_type = DistributedType.DEEPSPEED
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)  # wraps that group


def main(config_path: str) -> None:
    cfg = json.loads(Path(config_path).read_text())
    torch.set_num_threads(int(cfg["threads"]))
    rows = [json.loads(line) for line in Path(cfg["data"]).read_text().splitlines() if line.strip()]
    dataset = datasets.Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(cfg["model"])
    deepspeed_state_on_cpu()
    args = trl.DPOConfig(
        output_dir=cfg["out"],
        max_steps=cfg["steps"],
        per_device_train_batch_size=cfg["micro_batch"],
        gradient_accumulation_steps=cfg["accumulation"],
        learning_rate=cfg["lr"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        bf16=False,
        fp16=False,
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
        beta=cfg["beta"],
        loss_type=["sigmoid"],
        precompute_ref_log_probs=False,
        deepspeed=ds_config(cfg),
        accelerator_config={"use_configured_state": True},
    )
    # Loaded after the config: with ZeRO-3 set up, from_pretrained partitions the weights as it loads.
    model = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(cfg["model"], dtype=torch.float32)  # explicit: offline, no hub lookup
    clock = StepClock()
    trainer = trl.DPOTrainer(
        model=model, ref_model=ref, args=args, train_dataset=dataset, processing_class=tokenizer, callbacks=[clock]
    )
    trainer.train()
    if int(os.environ.get("RANK", "0")) != 0:
        return
    engine = trainer.model_wrapped
    step_s = [b - a for a, b in zip([clock.started, *clock.ends[:-1]], clock.ends, strict=True)]
    result = {
        "step_s": step_s,
        "losses": clock.losses,
        "engine": type(engine).__name__,
        "zero_stage": engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else None,
        "optimizer": type(getattr(engine, "optimizer", None)).__name__,
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "accelerate_processes": trainer.accelerator.num_processes,
        "accelerate_type": str(trainer.accelerator.distributed_type),
        "gradient_checkpointing": bool(getattr(trainer.model, "is_gradient_checkpointing", False)),
        "bf16": bool(args.bf16),
        "versions": {
            "trl": trl.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "deepspeed": deepspeed.__version__,
        },
    }
    Path(cfg["result"]).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
