"""Two senders of one DuckDB warehouse at once (a receiver and the flow's step on one machine):
each alert is delivered once."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from alerts_servers import start_hooks, write_outbox  # noqa: E402

from pipelines.alerts import SendSummary, load_settings, send_pending  # noqa: E402


def _config(path: Path, *urls: tuple[str, str]) -> Path:
    lines = ["[alerts]"]
    for name, url in urls:
        lines += ["[[alerts.destinations]]", f'name = "{name}"', f'url = "{url}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _two_senders_at_once(wh: Path, cfg: Path, state: Path) -> list[SendSummary]:
    settings = load_settings(cfg, env={})
    start = threading.Barrier(2)
    results: list[SendSummary] = []

    def sender() -> None:
        start.wait()
        results.append(send_pending(wh, settings, state_path=state))

    threads = [threading.Thread(target=sender) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results


def test_two_senders_at_once_send_each_alert_once(tmp_path: Path) -> None:
    wh = tmp_path / "w.duckdb"
    write_outbox(wh, 4)
    hooks = start_hooks()
    hooks.answer = lambda path: (200, 0.3)  # the two senders overlap for the whole pass
    try:
        cfg = _config(tmp_path / "a.toml", ("hook", f"json://{hooks.netloc}/hook"))
        results = _two_senders_at_once(wh, cfg, tmp_path / "alerts.sqlite")
        received = [b["idempotency_key"] for b in hooks.bodies("/hook")]
        assert sorted(received) == [f"key-{i:04d}" for i in range(1, 5)], received
        assert sorted(s.sent for s in results) == [0, 4]
    finally:
        hooks.close()
