"""rlplane trainer core.

The run-spec schema (`trainer_core.spec`) is torch-free so the API, the CLI and the worker can
import it; recipes, backends and losses live in submodules that import torch themselves. Keep
this file free of imports so `import trainer_core.spec` stays light.
"""
