"""One recipe per algorithm, each a readable top-to-bottom setup / train / save_checkpoint.

Only sft exists so far (`trainer_core.recipes.sft`); `common` holds the pieces recipes share and
`tokenize` turns sft rows into token ids and labels. Imports torch.
"""

RECIPES = ("sft",)
