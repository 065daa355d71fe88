"""rlplane trainer core: recipes, backends, losses, data, models, reporting and checkpointing.

The run spec it reads is the contract's (`rlplane.spec`, torch-free); the submodules here import torch
themselves. Keep this file free of imports.
"""
