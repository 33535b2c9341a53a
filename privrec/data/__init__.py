"""Data layer: ``Interactions`` container, loaders, downloads, Parquet cache, splits, generators.

See CONTRIBUTING.md ("privrec.data.Interactions") and spec 004 §7 for the datasets and protocols.
"""

from privrec.data.interactions import DUPLICATE_POLICIES, Interactions

__all__ = ["DUPLICATE_POLICIES", "Interactions"]
