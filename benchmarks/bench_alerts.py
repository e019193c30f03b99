"""Benchmark: what freetime spends from an LFD change to the email, and the digest's render.

Run: ``uv run python benchmarks/bench_alerts.py [N] [--at-risk 3000]`` (default 100,000
containers, generated as ``bench_risk.py`` does and written to a DuckDB file). Prints:

- per round (the first in a fresh process, then a warm one): the write that moves one box's
  terminal LFD a day earlier (a stand-in for the webhook apply's write), the risk publish with
  its alert rules, the rules alone, and the send to a real SMTP server on loopback (aiosmtpd);
  guard: apply + risk + alert + send < 5 s;
- the morning digest of ``--at-risk`` boxes: reading them from the warehouse, rendering email
  (with the plain-text part Apprise adds) and chat; guard: < 2 s, email < 1 MB, chat < 3,500
  characters.

The end-to-end figure from a webhook received by ``freetime webhooks serve`` to the inbox is
not measured here: it depends on the receiver applying continuously (a separate change).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_risk import AS_OF, generate  # noqa: E402

from pipelines.alerts import AlertSettings, Destination, Filter, render_digest  # noqa: E402
from pipelines.alerts.digest import CHAT_BUDGET, read_at_risk  # noqa: E402
from pipelines.alerts.rules import raise_alerts  # noqa: E402
from pipelines.alerts.sender import send_pending  # noqa: E402
from pipelines.analytics import publish_risk  # noqa: E402
from pipelines.warehouse import writing  # noqa: E402

DIGEST_AS_OF = datetime(2025, 10, 29, 12, tzinfo=UTC)
TARGET_CHANGE_S = 5.0
TARGET_DIGEST_S = 2.0
EMAIL_LIMIT = 1_000_000


def write_warehouse(path: Path, n: int) -> None:
    frames = generate(n)
    with writing(path) as con:
        con.execute("CREATE SCHEMA IF NOT EXISTS terminal49")
        for name, lf in frames.items():
            con.register("_f", lf.collect().to_arrow())
            con.execute(f"CREATE TABLE terminal49.{name} AS SELECT * FROM _f")
            con.unregister("_f")


class Smtp:
    """A plain SMTP server on loopback counting what it receives."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.received = 0
        outer = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
                outer.received += 1
                return "250 OK"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)
        self.controller.start()
        self.url = f"mailto://127.0.0.1:{port}?to=desk@example.com&from=f@example.com"


def pick_box(path: Path) -> tuple[str, str]:
    """An imminent box whose binding LFD is the terminal's: (id, number)."""
    with writing(path) as con:
        row = con.execute(
            "SELECT container_id, container_number FROM analytics.demurrage_risk "
            "WHERE risk_level = 'imminent' AND lfd_source = 'terminal' "
            "AND lfd_date = lfd_terminal ORDER BY container_number LIMIT 1 OFFSET ?",
            [int(time.time()) % 50],
        ).fetchone()
    assert row is not None, "no imminent box with a terminal LFD"
    return str(row[0]), str(row[1])


def round_trip(path: Path, state: Path, smtp: Smtp, label: str) -> float:
    cid, number = pick_box(path)
    t0 = time.perf_counter()
    with writing(path) as con:  # the apply's write: the terminal moves the LFD a day earlier
        con.execute(
            "UPDATE terminal49.containers SET pickup_lfd_terminal = pickup_lfd_terminal - 1 "
            "WHERE id = ?",
            [cid],
        )
    t1 = time.perf_counter()
    summary = publish_risk(path, as_of=AS_OF)
    t2 = time.perf_counter()
    dest = Destination("desk", smtp.url, Filter(references=(number.lower(),)))
    before = smtp.received
    sent = send_pending(path, AlertSettings(destinations=(dest,)), state_path=state)
    t3 = time.perf_counter()
    with writing(path) as con:  # the rules alone (they find nothing new: same work)
        con.execute("BEGIN")
        r0 = time.perf_counter()
        raise_alerts(con, AS_OF, AlertSettings())
        rules = time.perf_counter() - r0
        con.execute("ROLLBACK")
    total = t3 - t0
    print(
        f"{label}: {number} LFD a day earlier -> {sent.sent} alert(s) sent, "
        f"{smtp.received - before} email(s) received; apply {t1 - t0:.2f} s, "
        f"risk + alert rules {t2 - t1:.2f} s (risk {summary.seconds:.2f} s as measured by "
        f"publish_risk; rules alone {rules:.2f} s), send {t3 - t2:.2f} s; total {total:.2f} s "
        f"(guard {TARGET_CHANGE_S:.0f} s: {'met' if total < TARGET_CHANGE_S else 'NOT met'})"
    )
    return total


def digest(path: Path, at_risk: int) -> None:
    from apprise.common import NotifyFormat
    from apprise.conversion import convert_between

    # two weeks before the rounds' instant, about 3% of the generated boxes are at risk
    publish_risk(path, as_of=DIGEST_AS_OF)
    t0 = time.perf_counter()
    rows = read_at_risk(path)
    t1 = time.perf_counter()
    have = len(rows)
    rows = rows[:at_risk]
    now = datetime.now(UTC)
    t2 = time.perf_counter()
    mail = render_digest(None, rows, None, now, "email")
    text = convert_between(NotifyFormat.HTML, NotifyFormat.TEXT, mail.body)
    msg = MIMEMultipart("alternative")
    msg.attach(MIMEText(text, "plain", "utf-8"))
    msg.attach(MIMEText(mail.body, "html", "utf-8"))
    size = len(msg.as_bytes())
    chat = render_digest(Destination("chat", "json://x/y"), rows, None, now)
    t3 = time.perf_counter()
    total = (t1 - t0) + (t3 - t2)
    ok = total < TARGET_DIGEST_S and size < EMAIL_LIMIT and len(chat.body) < CHAT_BUDGET
    print(
        f"digest: {have:,} at risk in the warehouse, {len(rows):,} rendered: read {t1 - t0:.2f} s, "
        f"render email + text part + chat {t3 - t2:.2f} s; email {size:,} bytes "
        f"({mail.shown:,} rows listed), chat {len(chat.body):,} characters "
        f"({chat.shown} rows); guard < {TARGET_DIGEST_S:.0f} s, < 1 MB, < {CHAT_BUDGET:,}: "
        f"{'met' if ok else 'NOT met'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("containers", nargs="?", type=int, default=100_000)
    ap.add_argument("--at-risk", type=int, default=3000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        t0 = time.perf_counter()
        write_warehouse(path, args.containers)
        first = publish_risk(path, as_of=AS_OF)  # the baseline: nothing to compare with
        print(
            f"{args.containers:,} containers written and risk published in "
            f"{time.perf_counter() - t0:.1f} s; levels: {first.levels}"
        )
        smtp = Smtp()
        try:
            round_trip(path, Path(tmp) / "alerts.sqlite", smtp, "first (cold: Apprise loads)")
            round_trip(path, Path(tmp) / "alerts.sqlite", smtp, "second (warm)")
        finally:
            smtp.controller.stop()
        digest(path, args.at_risk)
    print(f"load avg (1 min, {os.cpu_count()} cpus): {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
