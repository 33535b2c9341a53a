"""Data layer: ``Interactions`` container, loaders, long-format tables (``from_pandas`` /
``from_parquet``, ``RatingSplitCV``), downloads, Parquet cache, splits, generators.

See CONTRIBUTING.md ("privrec.data.Interactions") and Krichene et al. (ICML 2023), Sec. 5 and App. D,
for the datasets and protocols.
"""

from privrec.data.frames import (
    ITEM_COL,
    RATING_COL,
    USER_COL,
    RatingSplitCV,
    ReaderOptions,
    from_pandas,
    from_parquet,
)
from privrec.data.interactions import DUPLICATE_POLICIES, Interactions
from privrec.data.loaders import (
    DatasetNotFoundError,
    load_lastfm_hetrec,
    load_movielens_100k,
    load_movielens_csv,
    load_movielens_dat,
    load_msd_taste_profile,
)
from privrec.data.registry import DATASETS, dataset_names, find_dataset_folder, load_dataset
from privrec.data.splits import (
    FoldIn,
    HeldOutSplit,
    RandomSplit,
    heldout_users_split,
    msd_heldout_users_split,
    random_split,
    temporal_split,
)
from privrec.data.stats import dataset_stats, top_share
from privrec.data.synthetic import PRESETS, generate_preset, low_rank_interactions, multitask_regression

__all__ = [
    "DUPLICATE_POLICIES",
    "Interactions",
    "DatasetNotFoundError",
    "load_lastfm_hetrec",
    "load_movielens_100k",
    "load_movielens_csv",
    "load_movielens_dat",
    "load_msd_taste_profile",
    "DATASETS",
    "dataset_names",
    "find_dataset_folder",
    "load_dataset",
    "PRESETS",
    "generate_preset",
    "low_rank_interactions",
    "multitask_regression",
    "FoldIn",
    "HeldOutSplit",
    "RandomSplit",
    "heldout_users_split",
    "msd_heldout_users_split",
    "random_split",
    "temporal_split",
    "dataset_stats",
    "top_share",
    "ReaderOptions",
    "from_pandas",
    "from_parquet",
    "RatingSplitCV",
    "USER_COL",
    "ITEM_COL",
    "RATING_COL",
]
