"""Helpers of bench/rl.py. `trl_side.py` runs only under the TRL venv (bench/.venv-trl), never the project's."""
