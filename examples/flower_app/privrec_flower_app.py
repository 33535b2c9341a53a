"""The app's components: privrec's DP-ALS ServerApp and ClientApp (privrec.federated.flower.app)."""

from privrec.federated.flower.app import clientapp, serverapp

__all__ = ["clientapp", "serverapp"]
