"""Training data, torch-free: builtin tasks with their rewards, and the loader that turns a run spec's `data`
section into train and eval rows, by the row rules of each dataset kind (`rlplane.dataset_rows`, which the API's
upload check reads too).

Tokenization and collation happen in the recipes; everything here is plain Python and pyarrow.
"""

from rlplane.dataset_rows import (
    ALGORITHM_KINDS,
    KINDS,
    DataError,
    Problem,
    apply_columns,
    check_row,
    column_map,
    kind_for_algorithm,
    row_problems,
)
from trainer_core.data.sources import DatasetResolver, DirectoryDatasetResolver, load_examples, problem_key
from trainer_core.data.split import Split
from trainer_core.data.tasks import BUILTIN_REWARDS, BUILTIN_SOURCES, builtin_examples, builtin_reward

__all__ = [
    "ALGORITHM_KINDS",
    "BUILTIN_REWARDS",
    "BUILTIN_SOURCES",
    "KINDS",
    "DataError",
    "DatasetResolver",
    "DirectoryDatasetResolver",
    "Problem",
    "Split",
    "apply_columns",
    "builtin_examples",
    "builtin_reward",
    "check_row",
    "column_map",
    "kind_for_algorithm",
    "load_examples",
    "problem_key",
    "row_problems",
]
