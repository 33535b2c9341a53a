"""The only way data leaves a silo: noisy clipped-gradient messages recorded in the silo's ledger.

Spec: ../shared/spec/002-isrl-dp-federated.md, "Setting" (ISRL-DP: the full transcript of silo i's
messages is (eps_i, delta_i)-DP w.r.t. its own records) and A1 (each message is a noisy mean of
K clipped per-example gradients).

A :class:`SiloChannel` is built for a planned number of messages (``max_messages``); its noise
multiplier is calibrated by the accountant for that many messages, so however many the silo
actually sends (it may be unavailable in some rounds) its epsilon stays within budget. Each
message is released with :func:`privrec.privacy.gaussian_mechanism` on the clipped gradient
sum (sensitivity enforced by clipping here, not assumed); ``close()`` records the composition of
the messages actually sent in the silo's :class:`~privrec.privacy.PrivacyLedger` (one entry per
fit, labelled, with the message count in its metadata).
"""

from __future__ import annotations


import dp_accounting
import numpy as np

from ...privacy import PrivacyLedger
from ...privacy import gaussian_mechanism, make_rng
from ..losses import clip_gradients
from .calibration import NEIGHBORING, accountant_multiplier, message_event, sensitivity_factor
from .silos import Silo


class SiloChannel:
    """Noisy gradient messages of one silo.

    Parameters
    ----------
    silo : the silo (its records and budget).
    loss : a privrec convex loss (``per_example_gradients``, ``l2``).
    clip : per-example gradient L2 clip norm (the Lipschitz bound L the noise is scaled to);
        ``None`` only for non-private silos (no clipping).
    batch_size : K_i, the (expected) batch size of one message.
    max_messages : how many messages the silo may send (what the noise is calibrated for).
    sampling : ``"poisson"``, ``"without_replacement"`` or ``"disjoint"`` (see ``calibration``).
    paper_sigma : optional std of the paper's closed-form noise on the *mean* message; the noise
        used is then ``max(paper, accountant)``.
    rng : numpy Generator (OS entropy by default; a known seed voids the guarantee).
    noise_multiplier : optional fixed multiplier (the shuffle model calibrates its own); the
        ledger then records the true event, whatever epsilon it gives.
    """

    def __init__(self, silo: Silo, loss, clip, batch_size: int, max_messages: int, sampling: str = "poisson",
                 paper_sigma: float | None = None, rng=None, noise_multiplier: float | None = None):
        self.silo = silo
        self.loss = loss
        self.batch_size = int(min(max(1, batch_size), silo.n))
        self.max_messages = int(max_messages)
        self.sampling = sampling
        self.rng = make_rng(rng)
        self.ledger = PrivacyLedger(neighboring=NEIGHBORING[sampling])
        self.sent = 0
        self.private = silo.private
        if self.private:
            if clip is None:
                raise ValueError(f"{silo.name}: a private silo needs a gradient clip norm")
            self.clip = float(clip)
            self.sensitivity = sensitivity_factor(sampling) * self.clip
            if sampling == "disjoint" and self.batch_size * self.max_messages > silo.n:
                raise ValueError(
                    f"{silo.name}: one pass over {silo.n} records allows at most {silo.n // self.batch_size} "
                    f"batches of {self.batch_size}, asked for {self.max_messages}"
                )
            if noise_multiplier is not None:  # set by a caller with its own (documented) analysis
                z = float(noise_multiplier)
            else:
                z = accountant_multiplier(silo.epsilon, silo.delta, sampling, silo.n, self.batch_size,
                                          self.max_messages)
            self.accountant_multiplier = z
            if paper_sigma is not None:
                z = max(z, paper_sigma * self.batch_size / self.sensitivity)
            self.noise_multiplier = z
        else:
            self.clip = None if clip is None else float(clip)
            self.sensitivity = 0.0
            self.noise_multiplier = 0.0
            self.accountant_multiplier = 0.0
        self._perm = self.rng.permutation(silo.n) if sampling == "disjoint" else None

    @property
    def noise_std(self) -> float:
        """Std of the Gaussian noise on the *mean* gradient message."""
        return self.noise_multiplier * self.sensitivity / self.batch_size

    def _batch(self) -> np.ndarray:
        n, K = self.silo.n, self.batch_size
        if self.sampling == "disjoint":
            i = self.sent
            if (i + 1) * K > n:
                raise ValueError(f"{self.silo.name}: one-pass data exhausted after {i} batches")
            return self._perm[i * K:(i + 1) * K]
        if self.sampling == "poisson" and self.private and K < n:
            return np.flatnonzero(self.rng.random(n) < K / n)
        if K >= n:
            return np.arange(n)
        return self.rng.choice(n, size=K, replace=False)

    def _check_budget(self):
        if self.sent >= self.max_messages:
            raise ValueError(f"{self.silo.name}: planned {self.max_messages} messages; no budget for more")

    def gradient(self, theta) -> np.ndarray:
        """One message: noisy mean of clipped per-example gradients at ``theta`` (ridge term excluded)."""
        self._check_budget()
        idx = self._batch()
        self.sent += 1
        return self.clipped_mean(theta, idx)

    def clipped_mean(self, theta, idx) -> np.ndarray:
        """Noisy clipped gradient sum over records ``idx`` divided by the (expected) batch size."""
        X, y = self.silo.X[idx], self.silo.y[idx]
        if len(idx):
            G = self.loss.per_example_gradients(theta, X, y)
            if self.clip is not None:
                G = clip_gradients(G, self.clip)
            s = G.sum(axis=0)
        else:
            s = np.zeros_like(theta)
        if self.private:
            s = gaussian_mechanism(s, self.sensitivity, self.noise_multiplier, self.rng).value
        denom = self.batch_size if (self.private or self.sampling == "disjoint") else max(len(idx), 1)
        return s / denom

    def count_message(self):
        """Count one message released through :meth:`clipped_mean` by an algorithm doing its own batching."""
        self._check_budget()
        self.sent += 1

    def event(self) -> dp_accounting.DpEvent:
        if not self.private:
            return dp_accounting.NonPrivateDpEvent()
        if self.sent == 0:
            return dp_accounting.NoOpDpEvent()
        return message_event(self.sampling, self.silo.n, self.batch_size, self.noise_multiplier, self.sent)

    def close(self, label: str) -> dict:
        """Record the messages sent in the silo's ledger; return its JSON report."""
        self.ledger.record(label, self.event(), messages=self.sent, sampling=self.sampling,
                           batch_size=self.batch_size, clip=self.clip, noise_multiplier=self.noise_multiplier,
                           n_records=self.silo.n)
        return self.ledger.report(self.silo.delta, include_pld=False)

    def epsilon(self) -> float:
        return self.ledger.epsilon(self.silo.delta)
