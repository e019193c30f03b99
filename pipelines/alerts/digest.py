"""The morning digest: per destination, the at-risk table and what changed since its last one.

Email gets the whole table as HTML (Apprise adds the plain-text part), cut at
:data:`EMAIL_TABLE_BUDGET` bytes of rows, most urgent first, so that the message stays well
under 1 MB; chat channels get a summary: counts, changes and the most urgent boxes, under
:data:`CHAT_BUDGET` characters, pointing to the email digest and ``freetime risk`` for the rest.

A digest is due once per local day of the destination's zone, at or after its ``digest_time``;
what it showed is kept (``digests`` in the delivery state) for the next one's "changed since".
The warehouse is a DuckDB file or a PostgreSQL database: the same rows are read from either, and
on PostgreSQL a destination's digest is sent by one sender at a time across machines (the
destination's digest lock), so two digest runs at once send it once.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pipelines.alerts.config import AlertSettings, Destination, load_settings
from pipelines.alerts.messages import days_left, holds_text, money
from pipelines.alerts.outbox import WarehouseArg
from pipelines.alerts.rules import references_sql
from pipelines.alerts.sender import LOCK_WAIT_SECONDS, Deliver, deliver
from pipelines.alerts.state import open_state
from pipelines.analytics.publish import URGENCY_ORDER
from pipelines.analytics.risk import AT_RISK_LEVELS
from pipelines.config import ANALYTICS_SCHEMA as A
from pipelines.config import DATASET as T
from pipelines.config import resolve_warehouse
from pipelines.warehouse import WarehouseMissing, reading, table_names

EMAIL_TABLE_BUDGET = 350_000
CHAT_BUDGET = 3_500
CHAT_ROWS = 10
#: The risk columns a digest shows or filters on.
DIGEST_COLUMNS = (
    "container_id",
    "container_number",
    "risk_level",
    "lfd_date",
    "lfd_source",
    "days_to_lfd",
    "pod_terminal_name",
    "pod_terminal_firms_code",
    "port_of_discharge_locode",
    "shipping_line_scac",
    "bill_of_lading_number",
    "blocking_holds",
    "projected_demurrage",
    "currency",
    "risk_reason",
)
COLUMNS = ("container", "level", "LFD", "days", "terminal", "holds", "projected", "reason")


def _at_risk_sql(references: str) -> str:
    levels = ", ".join(f"'{lv}'" for lv in AT_RISK_LEVELS)
    cols = ", ".join(f"r.{c}" for c in DIGEST_COLUMNS)
    return (
        f"SELECT {cols}, refs.reference_numbers FROM {A}.demurrage_risk r "
        f"LEFT JOIN ({references}) refs USING (container_id) "
        f"WHERE risk_level IN ({levels}) {URGENCY_ORDER}"
    )


def pg_references_sql(containers: Sequence[str], shipments: Sequence[str]) -> str:
    """:func:`pipelines.alerts.rules.references_sql` in PostgreSQL's SQL (``containers`` and
    ``shipments``: the columns those tables have): the text of each JSON list element."""

    def refs(column: str) -> str:
        value = f"CAST({column} AS jsonb)"
        return (
            f"ARRAY(SELECT jsonb_array_elements_text(CASE WHEN jsonb_typeof({value}) = 'array' "
            f"THEN {value} ELSE '[]'::jsonb END))"
        )

    c_refs = refs("c.ref_numbers") if "ref_numbers" in containers else "ARRAY[]::text[]"
    s_refs, join = "ARRAY[]::text[]", ""
    if "ref_numbers" in shipments and "shipment_id" in containers:
        s_refs = refs("s.ref_numbers")
        join = f"LEFT JOIN {T}.shipments s ON s.id = c.shipment_id"
    return (
        f"SELECT c.id AS container_id, {c_refs} || {s_refs} AS reference_numbers "
        f"FROM {T}.containers c {join}"
    )


def read_at_risk(warehouse: WarehouseArg) -> list[dict[str, Any]]:
    """The published at-risk rows, most urgent first, with ``reference_numbers`` for the
    filters, from a DuckDB or PostgreSQL warehouse (the same rows from either). Raises
    WarehouseMissing when no risk was published yet."""
    wh = resolve_warehouse(warehouse)
    missing = f"no {A}.demurrage_risk in {wh.display}: run `freetime risk` first"
    if wh.is_postgres:
        from pipelines.pg.read import frame, has_table
        from pipelines.pg.read import reading as pg_reading
        from pipelines.pg.views import columns_of

        with pg_reading(wh) as cur:
            if not has_table(cur, A, "demurrage_risk"):
                raise WarehouseMissing(missing)
            refs = pg_references_sql(
                list(columns_of(cur, T, "containers")), list(columns_of(cur, T, "shipments"))
            )
            return frame(cur, _at_risk_sql(refs)).to_dicts()
    assert wh.path is not None
    with reading(wh.path) as con:
        if "demurrage_risk" not in table_names(con, A):
            raise WarehouseMissing(missing)
        con.execute("SET TimeZone = 'UTC'")
        cur = con.execute(_at_risk_sql(references_sql(con)))
        names = [d[0] for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@dataclass
class Changes:
    """What changed since the last digest (``first`` when there was none)."""

    first: bool = True
    new: list[dict[str, Any]] = field(default_factory=list)
    worse: list[dict[str, Any]] = field(default_factory=list)
    lfd_moved: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)  # container numbers no longer at risk

    def lines(self, limit: int) -> list[str]:
        if self.first:
            return ["First digest: every box below is new to it."]
        out = [
            f"{len(self.new)} newly at risk, {len(self.worse)} more urgent, "
            f"{len(self.lfd_moved)} LFD changed, {len(self.cleared)} no longer at risk"
        ]
        out += [f"new: {r['container_number']} {r['risk_level']}" for r in self.new[:limit]]
        out += [
            f"more urgent: {r['container_number']} {r['risk_level']}" for r in self.worse[:limit]
        ]
        out += [
            f"LFD {r['container_number']}: {was} -> {r['lfd_date']}"
            for r, was in self.lfd_moved[:limit]
        ]
        if self.cleared:
            shown = ", ".join(self.cleared[:limit])
            more = f" and {len(self.cleared) - limit} more" if len(self.cleared) > limit else ""
            out.append(f"no longer at risk: {shown}{more}")
        return out


def snapshot(rows: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(
        {
            r["container_id"]: [r["container_number"], r["risk_level"], str(r["lfd_date"] or "")]
            for r in rows
        },
        separators=(",", ":"),
    )


def changes_since(previous: str | None, rows: Sequence[Mapping[str, Any]]) -> Changes:
    if previous is None:
        return Changes()
    before: dict[str, list[str]] = json.loads(previous)
    out = Changes(first=False)
    rank: dict[str, int] = {lv: i for i, lv in enumerate(AT_RISK_LEVELS)}
    now_ids = set()
    for r in rows:
        now_ids.add(r["container_id"])
        was = before.get(r["container_id"])
        if was is None:
            out.new.append(dict(r))
            continue
        if rank.get(r["risk_level"], 9) < rank.get(was[1], 9):
            out.worse.append(dict(r))
        if was[2] != str(r["lfd_date"] or ""):
            out.lfd_moved.append((dict(r), was[2] or "none"))
    out.cleared = sorted(v[0] or k for k, v in before.items() if k not in now_ids)
    return out


@dataclass
class Digest:
    """One rendered digest: ``body_format`` is ``html`` (email) or ``markdown`` (chat)."""

    destination: str
    title: str
    body: str
    body_format: str
    rows: int
    shown: int
    local_date: str
    snapshot: str


def _cells(r: Mapping[str, Any]) -> tuple[str, ...]:
    lfd = f"{r['lfd_date']} {r['lfd_source'] or ''}".strip() if r.get("lfd_date") else "-"
    return (
        str(r["container_number"] or r["container_id"]),
        str(r["risk_level"]),
        lfd,
        days_left(r.get("days_to_lfd")),
        str(r.get("pod_terminal_name") or "-"),
        holds_text(r.get("blocking_holds")),
        money(r.get("projected_demurrage"), r.get("currency")),
        str(r.get("risk_reason") or ""),
    )


def _counts(rows: Sequence[Mapping[str, Any]]) -> str:
    n = {lv: 0 for lv in AT_RISK_LEVELS}
    for r in rows:
        n[r["risk_level"]] = n.get(r["risk_level"], 0) + 1
    return ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in n.items())


def render_email(
    rows: Sequence[Mapping[str, Any]], changes: Changes, title: str
) -> tuple[str, int]:
    """HTML body and how many rows it shows (stops at :data:`EMAIL_TABLE_BUDGET` bytes)."""
    e = html.escape
    head = "".join(f"<th>{c}</th>" for c in COLUMNS)
    body_rows: list[str] = []
    size = 0
    for r in rows:
        tr = "<tr>" + "".join(f"<td>{e(c)}</td>" for c in _cells(r)) + "</tr>"
        size += len(tr)
        if size > EMAIL_TABLE_BUDGET:
            break
        body_rows.append(tr)
    more = len(rows) - len(body_rows)
    tail = (
        f"<p>{more} more boxes at risk are not listed here: run <code>freetime risk</code> "
        "or open the report for the full table.</p>"
        if more
        else ""
    )
    changed = "".join(f"<li>{e(line)}</li>" for line in changes.lines(limit=50))
    doc = (
        f"<h2>{e(title)}</h2><h3>Changed since the last digest</h3><ul>{changed}</ul>"
        f"<h3>At risk ({len(rows)}: {e(_counts(rows))})</h3>"
        f"<table border=1 cellpadding=3 cellspacing=0><tr>{head}</tr>{''.join(body_rows)}"
        f"</table>{tail}"
    )
    return doc, len(body_rows)


def render_chat(rows: Sequence[Mapping[str, Any]], changes: Changes) -> tuple[str, int]:
    """Markdown summary under :data:`CHAT_BUDGET` characters, and how many rows it lists."""
    lines = [f"**{len(rows)} at risk**: {_counts(rows)}", ""]
    lines += [f"- {line}" for line in changes.lines(limit=5)]
    lines += ["", "**Most urgent**"]
    shown = 0
    for r in rows[:CHAT_ROWS]:
        c = _cells(r)
        line = f"- {c[0]} {c[1]}, LFD {c[2]}, {c[3]}, {c[4]}, holds {c[5]}, {c[6]}"
        if sum(len(x) + 1 for x in lines) + len(line) > CHAT_BUDGET - 200:
            break
        lines.append(line)
        shown += 1
    if len(rows) > shown:
        lines.append(
            f"\n{len(rows) - shown} more in the email digest, `freetime risk` or the report."
        )
    return "\n".join(lines), shown


def render_text(rows: Sequence[Mapping[str, Any]], changes: Changes) -> str:
    """Plain text, every row (``freetime alerts digest --dry-run``)."""
    cells = [COLUMNS, *(_cells(r) for r in rows)]
    widths = [min(max(len(c[i]) for c in cells), 40) for i in range(len(COLUMNS) - 1)]
    lines = [f"{len(rows)} at risk: {_counts(rows)}", *changes.lines(limit=20), ""]
    for c in cells:
        lines.append(
            "  ".join(x[:40].ljust(w) for x, w in zip(c, widths, strict=False)) + "  " + c[-1]
        )
    return "\n".join(lines)


def render_digest(
    dest: Destination | None,
    rows: Sequence[Mapping[str, Any]],
    previous_snapshot: str | None,
    now: datetime,
    fmt: str | None = None,
) -> Digest:
    """The digest for ``dest`` (None: every box). ``fmt``: ``email`` (HTML), ``chat``
    (Markdown summary) or ``text`` (every row); default by the destination's channel."""
    zone = ZoneInfo(dest.timezone if dest else "UTC")
    local = now.astimezone(zone)
    mine = [r for r in rows if dest is None or dest.filter.matches(r)]
    changes = changes_since(previous_snapshot, mine)
    title = f"freetime digest {local:%Y-%m-%d}: {len(mine)} at risk ({_counts(mine)})"
    fmt = fmt or ("email" if dest is None or dest.is_email else "chat")
    if fmt == "email":
        body, shown = render_email(mine, changes, title)
    elif fmt == "chat":
        body, shown = render_chat(mine, changes)
    else:
        body, shown = render_text(mine, changes), len(mine)
    return Digest(
        destination=dest.name if dest else "-",
        title=title,
        body=body,
        body_format={"email": "html", "chat": "markdown"}.get(fmt, "text"),
        rows=len(mine),
        shown=shown,
        local_date=local.date().isoformat(),
        snapshot=snapshot(mine),
    )


def due(dest: Destination, now: datetime, last_local_date: str | None) -> bool:
    """Whether ``dest``'s digest is due at ``now``: its local time has reached ``digest_time``
    and no digest went out this local day."""
    if dest.digest_time is None or dest.error:
        return False
    local = now.astimezone(ZoneInfo(dest.timezone))
    if local.time() < dest.digest_time:
        return False
    return last_local_date is None or date.fromisoformat(last_local_date) < local.date()


@dataclass
class DigestResult:
    destination: str
    label: str
    digest: Digest | None = None
    error: str | None = None

    def line(self) -> str:
        if self.error:
            return f"{self.label}: digest not delivered: {self.error}"
        assert self.digest is not None
        return f"{self.label}: digest sent ({self.digest.rows} at risk)"


def send_digests(
    warehouse: WarehouseArg = None,
    settings: AlertSettings | None = None,
    *,
    state_path: str | Path | None = None,
    now: datetime | None = None,
    force: bool = False,
    only: str | None = None,
    send: Deliver = deliver,
) -> list[DigestResult]:
    """Send each destination's digest that is due (``force``: now, whatever the hour; ``only``:
    that destination). A failed send is not recorded, so the next run retries it. A digest that
    another sender is sending, or sent meanwhile, is left to it (not in the result)."""
    settings = settings or load_settings()
    now = now or datetime.now(UTC)
    wh = resolve_warehouse(warehouse)
    state = Path(state_path) if state_path else None
    dests = [d for d in settings.destinations if only is None or d.name == only]
    if not dests:
        return []  # nothing to send: no state file or table is created
    out: list[DigestResult] = []
    todo: list[DigestResult] = []
    rows: list[dict[str, Any]] | None = None
    with open_state(wh, state) as st:
        for d in dests:
            last = st.last_digest(d.key)
            if d.error:
                out.append(DigestResult(d.name, d.label, error=d.error))
                continue
            if not force and not due(d, now, last["local_date"] if last else None):
                continue
            if rows is None:
                rows = read_at_risk(wh)
            dg = render_digest(d, rows, last["snapshot"] if last else None, now)
            todo.append(DigestResult(d.name, d.label, dg))
    by_name = {d.name: d for d in dests}

    def one(r: DigestResult) -> DigestResult | None:
        dest, dg = by_name[r.destination], r.digest
        assert dg is not None
        with (
            open_state(wh, state) as mine,
            mine.exclusive(f"digest {dest.key}", LOCK_WAIT_SECONDS) as held,
        ):
            last = mine.last_digest(dest.key) if held else None
            if not held or not (force or due(dest, now, last["local_date"] if last else None)):
                return None  # another sender has it, or sent it meanwhile
            r.error = send(dest, dg.title, dg.body, dg.body_format, None)
            if r.error is None:
                mine.digest_sent(dest.key, dg.local_date, now, dg.snapshot)
        return r

    # each destination on its own: a slow channel delays only its own digest
    with ThreadPoolExecutor(max_workers=max(len(todo), 1)) as pool:
        out += [r for r in pool.map(one, todo) if r is not None]
    return out
