"""One recipe per algorithm, each a readable top-to-bottom setup / train / save_checkpoint.

`sft`, `reward` and `dpo` exist so far; `common` holds the pieces recipes share, `tokenize` turns
sft rows into token ids and labels, and `pairs` does the same for preference pairs. Imports torch.
"""
