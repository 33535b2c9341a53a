"""Compatibility: the public names of the former ``privrec.commands.models``.

``fit``, ``evaluate``, ``recommend`` and ``similar`` used to live in this one module; each now has
its own (:mod:`.fit`, :mod:`.evaluate`, :mod:`.recommend`), with the data loading in
:mod:`._data`, the yardsticks in :mod:`._yardsticks` and the printed and written results in
:mod:`.report`. This module only re-exports their public names, so that existing imports
(e.g. ``from privrec.commands.models import load_ratings_file``) keep working. It is not a
command module of the CLI (:data:`privrec.commands.COMMAND_MODULES`), and replacing a name here
(e.g. with a test's ``monkeypatch``) does not change what the commands call: patch the module
that uses it.
"""

from __future__ import annotations

from ._data import load_ratings_file, ratings_id_kinds, read_id_list
from ._running import EXIT_REFUSED, CommandError, cli_wording
from ._yardsticks import ALS_COMPARISON_MAX_NNZ, RELEVANCE_QUANTILE, TOP_K, ranking_metrics_of, relevance_threshold
from .evaluate import EVALUATE_DESCRIPTION, cmd_evaluate
from .evaluate import register as _register_evaluate
from .fit import DEFAULT_EPSILON, FIT_DESCRIPTION, cmd_fit
from .fit import register as _register_fit
from .recommend import RECOMMEND_DESCRIPTION, SIMILAR_DESCRIPTION, cmd_recommend, cmd_similar
from .recommend import register as _register_recommend
from .report import (
    MARK,
    NON_PRIVATE_KEYS,
    NON_PRIVATE_NOTE,
    privacy_paragraph,
    save_bucket_plot,
    separate_non_private,
    write_model_card,
)

__all__ = [
    "ALS_COMPARISON_MAX_NNZ",
    "DEFAULT_EPSILON",
    "EVALUATE_DESCRIPTION",
    "EXIT_REFUSED",
    "FIT_DESCRIPTION",
    "MARK",
    "NON_PRIVATE_KEYS",
    "NON_PRIVATE_NOTE",
    "RECOMMEND_DESCRIPTION",
    "RELEVANCE_QUANTILE",
    "SIMILAR_DESCRIPTION",
    "TOP_K",
    "CommandError",
    "cli_wording",
    "cmd_evaluate",
    "cmd_fit",
    "cmd_recommend",
    "cmd_similar",
    "load_ratings_file",
    "privacy_paragraph",
    "ranking_metrics_of",
    "ratings_id_kinds",
    "read_id_list",
    "register",
    "relevance_threshold",
    "save_bucket_plot",
    "separate_non_private",
    "write_model_card",
]


def register(subparsers) -> None:
    """Add ``fit``, ``evaluate``, ``recommend`` and ``similar``, as this module used to (the CLI
    registers them from their own modules)."""
    _register_fit(subparsers)
    _register_evaluate(subparsers)
    _register_recommend(subparsers)
