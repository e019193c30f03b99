"""Which charging party of the charge engine an invoice line bills."""

from __future__ import annotations

#: (issuer_kind, charge_type) -> (party, charge) of :data:`pipelines.analytics.charges.PARTIES`.
#: A terminal's demurrage and its storage are the same charge (the engine's terminal
#: demurrage); detention is the line's whoever issues it; a rail ramp bills its storage.
PARTY_OF = {
    ("terminal", "demurrage"): ("terminal", "demurrage"),
    ("terminal", "storage"): ("terminal", "demurrage"),
    ("terminal", "detention"): ("line", "detention"),
    ("line", "demurrage"): ("line", "demurrage"),
    ("line", "storage"): ("line", "demurrage"),
    ("line", "detention"): ("line", "detention"),
    ("rail", "demurrage"): ("rail", "storage"),
    ("rail", "storage"): ("rail", "storage"),
    ("rail", "detention"): ("line", "detention"),
}


def party_of(issuer_kind: str, charge_type: str) -> tuple[str, str]:
    """The engine's ``(party, charge)`` a line of ``issuer_kind`` and ``charge_type`` bills."""
    return PARTY_OF[(issuer_kind, charge_type)]
