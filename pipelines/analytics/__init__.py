"""Demurrage risk analytics: pure polars logic plus publishing to the ``analytics`` schema.

Public API: :func:`compute_risk`, :func:`compute_charges`, :func:`read_warehouse`,
:func:`load_tariffs`, :func:`publish_risk`, :func:`publish_risk_of`, :func:`at_risk`,
:func:`risk_changes`, :class:`WarehouseFrames`.
"""

from pipelines.analytics.changes import risk_changes
from pipelines.analytics.charges import Charges, compute_charges
from pipelines.analytics.publish import (
    RiskSummary,
    at_risk,
    publish_risk,
    publish_risk_of,
    read_warehouse,
)
from pipelines.analytics.risk import AT_RISK_LEVELS, LEVELS, WarehouseFrames, compute_risk
from pipelines.analytics.tariffs import TariffError, load_tariffs

__all__ = [
    "AT_RISK_LEVELS",
    "Charges",
    "LEVELS",
    "RiskSummary",
    "TariffError",
    "WarehouseFrames",
    "at_risk",
    "compute_charges",
    "compute_risk",
    "load_tariffs",
    "publish_risk",
    "publish_risk_of",
    "read_warehouse",
    "risk_changes",
]
