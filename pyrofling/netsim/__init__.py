"""Network simulation: seeded impairment models (pure) and a UDP/TCP relay (asyncio shell)."""

from pyrofling.netsim.models import (
    GilbertElliottLoss,
    IidLoss,
    Impairment,
    ImpairmentConfig,
    LossModel,
    NoLoss,
    TraceLoss,
)

__all__ = ["GilbertElliottLoss", "IidLoss", "Impairment", "ImpairmentConfig", "LossModel", "NoLoss", "TraceLoss"]
