"""privrec: recommender systems and multi-task learning under user-level differential privacy.

Data flows one way: load -> split -> sanitise (counts, allocation) -> fit (ALS loop calling a
private solver) -> release (item factors + privacy report) -> evaluate / recommend.
"""

__version__ = "0.1.0"
