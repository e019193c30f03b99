"""Demurrage, storage and detention invoices: intake, audit against the charge engine, and
the dispute package (``docs/invoices.md``).

- :mod:`.schema`: the file format (CSV or JSON) and its reading, pure;
- :mod:`.store`: ``terminal49.invoices`` / ``invoice_lines``, versions kept;
- :mod:`.audit`: ``analytics.invoice_audit``, one row per line with its findings;
- :mod:`.dispute`: the printable HTML and CSV of one invoice's findings with their proof.
"""
