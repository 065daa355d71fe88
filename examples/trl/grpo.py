"""GRPO with TRL's GRPOTrainer, reported to rlplane by its Hugging Face callback: metrics, the completion groups
of each step (log_completions=True) with their rewards and advantages, and checkpoints.

    python grpo.py --model builtin:tiny-llama --max-steps 100                 # alone: a run is created for it
    rlplane submit grpo.yaml --code .                                         # or as a command run on a worker
"""

from __future__ import annotations

import datasets
import torch
from tasks import correct, load_model, problems, rl_arguments
from trl import GRPOConfig, GRPOTrainer

from rlplane.integrations.hf import RlplaneCallback


def main() -> None:
    args = rl_arguments(__doc__.splitlines()[0], "out/grpo")

    model, tokenizer = load_model(args.model)
    config = GRPOConfig(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.prompts_per_step * args.group,
        num_generations=args.group,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.lr,
        beta=0.0,
        logging_steps=1,
        log_completions=True,
        save_steps=args.save_steps,
        save_total_limit=2,
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=correct,
        args=config,
        train_dataset=datasets.Dataset.from_list(problems(256)),
        processing_class=tokenizer,
        callbacks=[RlplaneCallback(project=args.project)],
    )
    trainer.train(resume_from_checkpoint=RlplaneCallback.resume_from())


if __name__ == "__main__":
    main()
