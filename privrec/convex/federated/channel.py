"""The only way data leaves a silo: noisy clipped-gradient messages recorded in the silo's ledger.

Lowy & Razaviyayn (ICLR 2023), Definition 2 (ISRL-DP: the full transcript of silo i's messages is
(eps_i, delta_i)-DP w.r.t. its own records) and Algorithm 2 (each message is a noisy mean of K
clipped per-example gradients).

A :class:`SiloChannel` is built for a planned number of messages (``max_messages``); its noise
multiplier is calibrated by the accountant for that many messages, so however many the silo
actually sends (it may be unavailable in some rounds) its epsilon stays within budget. Each
message is released with :func:`privrec.privacy.gaussian_mechanism` on the clipped gradient
sum (sensitivity enforced by clipping here, not assumed); ``close()`` records the composition of
the messages actually sent in the silo's :class:`~privrec.privacy.PrivacyLedger` (one entry per
fit, labelled, with the message count in its metadata).

Every ledger is declared ``neighboring="replace_one"`` (ISRL-DP replaces one record of the silo,
Lowy & Razaviyayn, Definition 2) and every report names the accountant that produced its epsilon
(``report["accountant"]``: ``"rdp"`` for the fixed-size schemes, ``"pld"`` for Poisson sampling,
which dp_accounting's RDP accountant cannot compose under replace-one); recompute a report with
:func:`report_epsilon`.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np

from ..._io import json_safe
from ...privacy import PrivacyLedger, epsilon_from_report, event_from_dict, event_to_dict, gaussian_mechanism, make_rng
from ...privacy.ledger import _is_non_private
from ..losses import clip_gradients
from .calibration import (
    ACCOUNTANT,
    NEIGHBORING,
    PLD_INTERVAL,
    accountant_multiplier,
    message_event,
    pld_replace_one_epsilon,
    sensitivity_factor,
)
from .silos import Silo


def ledger_epsilon(ledger: PrivacyLedger, delta: float, accountant: str = "rdp") -> float:
    """epsilon(delta) of everything in ``ledger`` with ``accountant`` (PLD: replace-one, direct)."""
    if accountant == "rdp":
        return ledger.epsilon(delta)
    if accountant != "pld":
        raise ValueError(f"accountant must be 'rdp' or 'pld', got {accountant!r}")
    if ledger.neighboring != "replace_one":
        raise ValueError("privrec's federated PLD reports are replace-one only")
    if not ledger.entries:
        return 0.0
    if any(_is_non_private(e) for e in ledger.events):
        return math.inf
    return pld_replace_one_epsilon(ledger.composed_event(), delta)


def ledger_report(ledger: PrivacyLedger, delta: float, accountant: str = "rdp") -> dict:
    """The ledger's JSON report with epsilon from ``accountant``, which the report names.

    ``"rdp"`` is :meth:`PrivacyLedger.report` (without its PLD cross-check, which dp_accounting
    scales differently under replace-one). ``"pld"`` builds the same schema with
    ``epsilon = epsilon_pld`` (replace-one PLD accountant, grid ``pld_discretization``) and
    ``epsilon_rdp = None`` (RDP cannot compose Poisson sampling under replace-one); recompute
    either with :func:`report_epsilon`.
    """
    if accountant == "rdp":
        out = ledger.report(delta, include_pld=False)
        out["accountant"] = "rdp"
        return out
    eps = ledger_epsilon(ledger, delta, accountant)
    out = {
        "delta": float(delta),
        "neighboring": ledger.neighboring,
        "accountant": "pld",
        "pld_discretization": PLD_INTERVAL,
        "rdp_orders": list(ledger.orders),
        "events": [
            {"label": e.label, "event": event_to_dict(e.event), **({"meta": dict(e.meta)} if e.meta else {})}
            for e in ledger.entries
        ],
        "epsilon_rdp": None,
        "epsilon_rdp_error": f"dp_accounting's RDP accountant does not compose these events under {ledger.neighboring}",
        "epsilon_pld": eps,
        "epsilon": eps,
    }
    return json_safe(out)


def report_epsilon(report: dict) -> float:
    """Recompute a federated report's epsilon with plain dp_accounting and the accountant it names."""
    if report.get("accountant", "rdp") == "rdp":
        return epsilon_from_report(report, "rdp")
    events = [event_from_dict(e["event"]) for e in report["events"]]
    if not events:
        return 0.0
    if report["neighboring"] != "replace_one":
        raise ValueError("privrec's federated PLD reports are replace-one only")
    if any(_is_non_private(e) for e in events):
        return math.inf
    return pld_replace_one_epsilon(
        dp_accounting.ComposedDpEvent(events), report["delta"], report.get("pld_discretization", PLD_INTERVAL)
    )


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
    sampling : ``"poisson"``, ``"without_replacement"`` or ``"disjoint"`` (see ``calibration``);
        all are accounted under replace-one, Poisson with the PLD accountant, the others with RDP.
    paper_sigma : optional std of the paper's closed-form noise on the *mean* message; the noise
        used is then ``max(paper, accountant)``.
    rng : numpy Generator (OS entropy by default; a known seed voids the guarantee).
    noise_multiplier : optional fixed multiplier (the shuffle model calibrates its own); the
        ledger then records the true event, whatever epsilon it gives.
    """

    def __init__(
        self,
        silo: Silo,
        loss,
        clip,
        batch_size: int,
        max_messages: int,
        sampling: str = "poisson",
        paper_sigma: float | None = None,
        rng=None,
        noise_multiplier: float | None = None,
    ):
        self.silo = silo
        self.loss = loss
        self.batch_size = int(min(max(1, batch_size), silo.n))
        self.max_messages = int(max_messages)
        self.sampling = sampling
        self.rng = make_rng(rng)
        self.ledger = PrivacyLedger(neighboring=NEIGHBORING[sampling])
        self.accountant = ACCOUNTANT[sampling]
        self.sent = 0
        self.private = silo.private
        if self.private:
            if clip is None:
                raise ValueError(f"{silo.name}: a private silo needs a gradient clip norm")
            self.clip: float | None = float(clip)
            self.sensitivity = sensitivity_factor(sampling) * self.clip
            if sampling == "disjoint" and self.batch_size * self.max_messages > silo.n:
                raise ValueError(
                    f"{silo.name}: one pass over {silo.n} records allows at most {silo.n // self.batch_size} "
                    f"batches of {self.batch_size}, asked for {self.max_messages}"
                )
            # calibrated here: the recorded events must stay within the silo's target (checked in close)
            self._planned_epsilon = None if noise_multiplier is not None else float(silo.epsilon)
            if noise_multiplier is not None:  # set by a caller with its own (documented) analysis
                z = float(noise_multiplier)
            else:
                z = accountant_multiplier(
                    silo.epsilon, silo.delta, sampling, silo.n, self.batch_size, self.max_messages
                )
            self.accountant_multiplier = z
            if paper_sigma is not None:
                z = max(z, paper_sigma * self.batch_size / self.sensitivity)
            self.noise_multiplier = z
        else:
            self._planned_epsilon = None
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
            assert self._perm is not None  # drawn in __init__ for disjoint sampling
            return self._perm[i * K : (i + 1) * K]
        if self.sampling == "poisson" and self.private and n > K:
            return np.flatnonzero(self.rng.random(n) < K / n)
        if n <= K:
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

    def close(self, label: str, **meta) -> dict:
        """Record the messages sent in the silo's ledger; return its JSON report.

        ``meta`` adds context to the ledger entry (e.g. the shuffle model's separate guarantee).
        """
        unit = (
            "clip (PLD REPLACE_ONE convention)" if self.accountant == "pld" else "2 clip (replace-one L2 sensitivity)"
        )
        self.ledger.record(
            label,
            self.event(),
            messages=self.sent,
            sampling=self.sampling,
            batch_size=self.batch_size,
            clip=self.clip,
            noise_multiplier=self.noise_multiplier,
            noise_multiplier_unit=unit,
            accountant=self.accountant,
            n_records=self.silo.n,
            **meta,
        )
        report = ledger_report(self.ledger, self._delta(), self.accountant)
        planned = self._planned_epsilon
        if planned is not None and report_epsilon(report) > planned * (1 + 1e-6):  # calibration and ledger agree
            raise RuntimeError(
                f"internal error: {self.silo.name}'s recorded events give epsilon {report_epsilon(report):.6g} above "
                f"the {planned:.6g} its noise was calibrated for ({self.sent} of {self.max_messages} planned messages)"
            )
        return report

    def _delta(self) -> float:
        """The silo's delta_i (``Silo.__post_init__`` sets it, ``1 / n_i^2`` by default)."""
        if self.silo.delta is None:
            raise ValueError(f"{self.silo.name}: delta is None (a Silo sets it when constructed)")
        return self.silo.delta

    def epsilon(self) -> float:
        return ledger_epsilon(self.ledger, self._delta(), self.accountant)
