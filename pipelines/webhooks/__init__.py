"""Terminal49 webhooks, project side: verify and store deliveries, then apply them to DuckDB.

- :mod:`.signing`: the ``X-T49-Webhook-Signature`` HMAC (lowercase hex SHA-256 of the raw body).
- :mod:`.inbox`: a durable local SQLite inbox (WAL, ``synchronous=FULL``), one row per
  notification id however often it is delivered.
- :mod:`.receiver`: the Starlette app that checks signatures, rejects malformed bodies and
  commits each valid notification to the inbox before answering 2xx. It never opens DuckDB.
- :mod:`.apply`: inbox to the warehouse (dataset ``terminal49``), idempotent, plus
  reconciliation from ``GET /webhook_notifications``.
"""

from pipelines.webhooks.inbox import Inbox, default_inbox_path
from pipelines.webhooks.signing import sign, verify

__all__ = ["Inbox", "default_inbox_path", "sign", "verify"]
