"""Supervised fine-tuning with TRL's SFTTrainer, reported to rlplane by its Hugging Face callback.

    python sft.py --model builtin:tiny-llama --max-steps 200                  # alone: a run is created for it
    rlplane submit sft.yaml --code .                                          # or as a command run on a worker

Inside a worker the callback finds the run by itself; a cancel makes the trainer save a checkpoint and stop, and
a retried attempt resumes from the run's newest checkpoint.
"""

from __future__ import annotations

import argparse

import datasets
import torch
from tasks import MODEL_HELP, load_model, problems
from trl import SFTConfig, SFTTrainer

from rlplane.integrations.hf import RlplaneCallback


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--max-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--output-dir", default="out/sft")
    p.add_argument("--project", default="default", help="Outside a worker: the project of the run it creates")
    args = p.parse_args()

    rows = [{"prompt": r["prompt"], "completion": r["answer"]} for r in problems(512)]
    model, tokenizer = load_model(args.model)
    config = SFTConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_steps=args.save_steps,
        save_total_limit=2,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[RlplaneCallback(project=args.project)],
    )
    trainer.train(resume_from_checkpoint=RlplaneCallback.resume_from())


if __name__ == "__main__":
    main()
