"""privrec's fits over a real federation runtime.

* :mod:`privrec.federated.flower` -- DP-ALS and ISRL-DP MB-SGD as Flower apps (optional extra:
  ``pip install "privrec[flower]"``): clients compute on their own data and send only the
  statistics of the method; every noisy release, its seed and its ledger are those of the local
  fit (:meth:`privrec.models.DPALS.fit`, :func:`privrec.convex.federated.mb_sgd`).

Importing this package does not import Flower.
"""
