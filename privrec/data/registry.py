"""One entry point for every dataset name: :func:`load_dataset`.

Real datasets are read from a local folder (``data_dir``), from the data root
(``$PRIVREC_DATA`` or ``./datasets``), or downloaded there on request; parsed results go through
the Parquet cache (``$PRIVREC_CACHE`` or the user cache directory, never the working directory:
see :mod:`privrec.data.cache`). Synthetic names are generated in memory (seeded, no network).

Each :class:`DatasetInfo` declares its valid values: ``rating_range`` (a
:class:`~privrec.data.loaders.RatingRange`, enforced by the loaders) and ``feedback``
(``"explicit"`` ratings or ``"implicit"`` counts), for model defaults.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from privrec._validation import check_positive, check_random_state_seed
from privrec.data import loaders
from privrec.data.cache import cached_load
from privrec.data.download import SOURCES, default_data_root, download_dataset
from privrec.data.interactions import Interactions
from privrec.data.synthetic import PRESETS, generate_preset


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    kind: str  # "real" or "synthetic"
    description: str
    main_file: str | None = None
    companions: tuple[str, ...] = ()
    loader: Callable | None = None
    folders: tuple[str, ...] = ()  # folder names searched under a data root
    rating_range: loaders.RatingRange | None = None  # declared valid values (enforced when loading)

    @property
    def feedback(self) -> str | None:
        """``"explicit"`` (star ratings) or ``"implicit"`` (play counts); ``None`` if unknown."""
        return None if self.rating_range is None else self.rating_range.feedback


def _real(name, description, main_file, companions, loader, *extra_folders) -> DatasetInfo:
    folders = tuple(dict.fromkeys(((SOURCES[name].folder,) if name in SOURCES else ()) + (name,) + extra_folders))
    return DatasetInfo(name, "real", description, main_file, companions, loader, folders, loaders.RATING_RANGES[name])


DATASETS: dict[str, DatasetInfo] = {
    d.name: d
    for d in [
        _real(
            "ml-100k",
            "MovieLens 100K: 100,000 ratings 1-5, 943 users, 1,682 movies",
            "u.data",
            ("u.item", "u.genre"),
            loaders.load_movielens_100k,
        ),
        _real(
            "ml-1m",
            "MovieLens 1M: ~1M ratings 1-5, 6,040 users, ~3,700 movies",
            "ratings.dat",
            ("movies.dat",),
            loaders.load_movielens_dat,
        ),
        _real(
            "ml-10m",
            "MovieLens 10M: 10M ratings 0.5-5, 69,878 users, 10,677 movies",
            "ratings.dat",
            ("movies.dat",),
            loaders.load_movielens_dat,
            "ml-10m100k",
        ),
        _real(
            "ml-20m",
            "MovieLens 20M: 20M ratings 0.5-5, 138,493 users, 26,744 movies",
            "ratings.csv",
            ("movies.csv",),
            loaders.load_movielens_csv,
        ),
        _real(
            "ml-25m",
            "MovieLens 25M: 25M ratings 0.5-5, 162,541 users, 59,047 movies",
            "ratings.csv",
            ("movies.csv",),
            loaders.load_movielens_csv,
        ),
        _real(
            "ml-latest",
            "MovieLens latest (full; changes over time)",
            "ratings.csv",
            ("movies.csv",),
            loaders.load_movielens_csv,
        ),
        _real(
            "ml-latest-small",
            "MovieLens latest-small (~100K ratings; changes over time)",
            "ratings.csv",
            ("movies.csv",),
            loaders.load_movielens_csv,
        ),
        _real(
            "msd",
            "Million Song Dataset, Echo Nest Taste Profile: 48,373,586 play counts, string ids",
            "train_triplets.txt",
            (),
            loaders.load_msd_taste_profile,
        ),
        _real(
            "lastfm-2k",
            "Last.fm HetRec 2011: 92,834 user-artist play counts, 1,892 users, 17,632 artists",
            "user_artists.dat",
            ("artists.dat",),
            loaders.load_lastfm_hetrec,
            "lastfm",
        ),
    ]
}
for _name, _preset in PRESETS.items():
    DATASETS[_name] = DatasetInfo(
        _name,
        "synthetic",
        _preset.description + f" ({_preset.n_users:,} x {_preset.n_items:,}, {_preset.n_interactions:,})",
        rating_range={"ratings": loaders.HALF_STARS, "stars": loaders.STARS_1_TO_5}.get(
            _preset.values, loaders.POSITIVE_COUNTS
        ),
    )
ALIASES = {
    "hetrec2011-lastfm-2k": "lastfm-2k",
    "lastfm": "lastfm-2k",
    "ml-10m100k": "ml-10m",
    "msd-taste-profile": "msd",
}


def dataset_names() -> list[str]:
    return list(DATASETS)


def resolve_name(name: str) -> DatasetInfo:
    if not isinstance(name, str):
        raise ValueError(f"dataset name must be a string, got {type(name).__name__}")
    key = ALIASES.get(name.lower(), name.lower())
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[key]


def _as_path(value, name: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    return Path(value).expanduser()


def _file_and_loader(d: DatasetInfo) -> tuple[str, Callable]:
    """The main file name and loader of a real dataset (synthetic ones have neither)."""
    if d.main_file is None or d.loader is None:
        raise ValueError(f"dataset {d.name!r} is generated in memory ({d.kind}): it has no files")
    return d.main_file, d.loader


def find_dataset_folder(name: str, data_dir=None) -> Path | None:
    """Folder holding the main file of real dataset ``name``: ``data_dir`` itself or one of the
    dataset's folder names under it (or under the data root when ``data_dir`` is None)."""
    d = resolve_name(name)
    main_file, _ = _file_and_loader(d)
    roots = [_as_path(data_dir, "data_dir")] if data_dir is not None else [default_data_root()]
    for root in roots:
        if (root / main_file).is_file():
            return root
        for f in d.folders:
            for cand in (root / f, root / f.lower()):
                if (cand / main_file).is_file():
                    return cand
    return None


def load_dataset(
    name: str,
    data_dir=None,
    download: bool = False,
    cache: bool = True,
    cache_dir=None,
    scale: float = 1.0,
    random_state=0,
) -> Interactions:
    """Load any dataset by name as :class:`~privrec.data.Interactions`.

    Real datasets: looked up in ``data_dir`` (the dataset folder or a parent of it), else in the
    data root; with ``download=True`` a missing dataset is fetched into ``data_dir`` (or the data
    root). A missing dataset raises an error naming the expected file and how to get it.
    Synthetic presets take ``scale`` and ``random_state`` (see :func:`generate_preset`). Parsed
    real data is cached under ``cache_dir`` (default: ``$PRIVREC_CACHE`` or the user cache dir).
    """
    d = resolve_name(name)
    if d.kind == "synthetic":
        scale = check_positive(scale, "scale")
        if scale > 1:
            raise ValueError(f"scale must be in (0, 1], got {scale}")
        random_state = check_random_state_seed(random_state, "random_state")
        return generate_preset(d.name, scale=scale, random_state=random_state).interactions
    if cache_dir is not None:
        cache_dir = _as_path(cache_dir, "cache_dir")
    main_file, loader = _file_and_loader(d)
    found = find_dataset_folder(d.name, data_dir)
    if found is None:
        if not download:
            where = Path(data_dir) if data_dir is not None else default_data_root()
            raise loaders.missing_file_error(where / d.folders[0] / main_file, d.name)
        found = download_dataset(d.name, data_dir)
    folder: Path = found
    sources = [folder / main_file] + [folder / c for c in d.companions]
    return cached_load(lambda: loader(folder, name=d.name), sources, d.name, cache_dir=cache_dir, use_cache=cache)
