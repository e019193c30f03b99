"""The MCP server (official SDK, :class:`mcp.server.mcpserver.MCPServer`): tools, resources
and prompts over a :class:`~pipelines.toolserver.snapshot.SnapshotReader` (a DuckDB file) or
a :class:`~pipelines.toolserver.pgread.PgReader` (the live PostgreSQL warehouse, read-only).

Every tool answers with structured content (its output schema is below) plus one short line
of text. A refused or failing call is a tool error with a plain message.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from pipelines.analytics import risk as risk_module
from pipelines.analytics.risk import AT_RISK_LEVELS, Level
from pipelines.analytics.tariffs import load_tariffs
from pipelines.config import Warehouse
from pipelines.history import evidence
from pipelines.invoices.access import evidence_connection
from pipelines.toolserver import queries
from pipelines.toolserver.pgread import PgReader
from pipelines.toolserver.queries import View
from pipelines.toolserver.snapshot import Snapshot, SnapshotReader
from pipelines.toolserver.sqlsafe import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_SECONDS,
    SqlRefused,
    run_query,
)
from pipelines.warehouse import WarehouseError

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
INSTRUCTIONS = (
    "freetime's warehouse of ocean containers: demurrage risk from local LFDs, holds and "
    "fees, with costs from the tariff table. Start with containers_at_risk or "
    "summarize_containers; get_container explains one box; warehouse_freshness says how "
    "current the data is; query_warehouse runs read-only SQL (see the schema resource)."
)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class AtRiskOut(_Out):
    as_of: str | None
    levels: list[str]
    matching: int
    returned: int
    projected_demurrage: float
    accrued_demurrage: float
    containers: list[dict[str, Any]]


class ContainerOut(_Out):
    container_id: str
    container_number: str | None
    risk_level: str | None
    risk_reason: str | None
    lfd_date: str | None
    lfd_source: str | None
    days_to_lfd: int | None
    lfds: dict[str, Any]
    holds: list[dict[str, Any]]
    fees: list[dict[str, Any]]
    more: str


class SummaryOut(_Out):
    as_of: str | None
    group_by: str
    groups_total: int
    groups: list[dict[str, Any]]
    totals: dict[str, float]


class CalendarOut(_Out):
    as_of: str | None
    days: list[dict[str, Any]]
    overdue_before_today: int


class SearchOut(_Out):
    query: str
    returned: int
    more: bool
    containers: list[dict[str, Any]]


class EvidenceOut(_Out):
    container: str
    facts: dict[str, str]
    csv: str


class InvoiceAuditOut(_Out):
    invoice_number: str
    issuer_name: str | None
    currency: str | None
    billed_amount: float
    disputed_amount: float
    dispute_by: str | None
    lines: list[dict[str, Any]]


class FreshnessOut(_Out):
    source: str
    risk_as_of: str | None


class SqlOut(_Out):
    columns: list[str]
    types: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool
    max_rows: int


def _result(text: str, data: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


Reader = SnapshotReader | PgReader


def _answer(
    rd: Reader, key: Hashable | None, fn: Callable[[View], dict[str, Any]]
) -> dict[str, Any]:
    """``fn`` on the latest snapshot, remembered there under ``key`` (unless None); every
    expected failure (the warehouse busy or missing, nothing found, a bad argument, refused
    SQL) becomes a tool error with a plain message."""
    try:
        with rd.snapshot() as snap:
            if key is None:
                return fn(snap)
            out: dict[str, Any] = snap.cached(key, lambda: fn(snap))
            return out
    except (WarehouseError, queries.NotFound, SqlRefused, ValueError) as exc:
        raise ToolError(str(exc)) from None


def risk_rules_text() -> str:
    """The risk rules as the risk engine's module docstring states them: its paragraphs up to
    and including the list of rules (what follows says how they are computed)."""
    paragraphs = (risk_module.__doc__ or "").strip().split("\n\n")
    rules = next((i for i, p in enumerate(paragraphs) if p.startswith("* ")), len(paragraphs))
    return "\n\n".join(paragraphs[: rules + 1]) + "\n"


def open_reader(
    warehouse: Path | Warehouse, sql_timeout: float = DEFAULT_TIMEOUT_SECONDS
) -> Reader:
    """The reader of a warehouse: snapshot copies of a DuckDB file, or read-only transactions
    on the live PostgreSQL database (whose role must only read, every statement stopped after
    ``sql_timeout`` seconds). WarehouseError when a PostgreSQL role can write, or its server
    does not answer."""
    # --- WAREHOUSE DISPATCH (issue 30): PostgreSQL is read live, DuckDB through copies ---
    if isinstance(warehouse, Warehouse):
        if warehouse.is_postgres:
            return PgReader(warehouse, timeout_seconds=sql_timeout)
        assert warehouse.path is not None
        warehouse = warehouse.path
    # --- end of the warehouse dispatch ---
    return SnapshotReader(warehouse, prepare=queries.prepare)


def build_server(
    duckdb_path: Path | Warehouse,
    *,
    row_cap: int = DEFAULT_MAX_ROWS,
    sql_timeout: float = DEFAULT_TIMEOUT_SECONDS,
    reader: Reader | None = None,
) -> tuple[MCPServer, Reader]:
    """The MCP server over the warehouse (a DuckDB path, or a :class:`Warehouse` of either
    kind) and the reader it answers from (close it when done). The SQL tool returns at most
    ``row_cap`` rows and stops a query after ``sql_timeout`` seconds."""
    rd = reader or open_reader(duckdb_path, sql_timeout)
    mcp: MCPServer = MCPServer(
        "freetime", instructions=INSTRUCTIONS, version="1", log_level="WARNING"
    )

    @mcp.tool(annotations=READ_ONLY)
    def containers_at_risk(
        level: Annotated[
            list[Level] | None,
            Field(description=f"Risk levels (default {', '.join(AT_RISK_LEVELS)})."),
        ] = None,
        terminal: Annotated[
            str | None, Field(description="Terminal name (part of it, any case) or firms code.")
        ] = None,
        port: Annotated[
            str | None,
            Field(description="UN/LOCODE of the port of discharge or destination (USLGB)."),
        ] = None,
        carrier: Annotated[str | None, Field(description="Shipping line SCAC.")] = None,
        customer: Annotated[str | None, Field(description="Customer name (part of it).")] = None,
        limit: Annotated[int, Field(ge=1, le=500)] = 25,
    ) -> Annotated[CallToolResult, AtRiskOut]:
        """Containers at risk of demurrage, most urgent first (overdue, due today, then by days
        to the binding LFD), with the reason, holds and projected cost."""
        args = (tuple(level or ()), terminal, port, carrier, customer, limit)
        out = _answer(
            rd,
            ("containers_at_risk", args),
            lambda snap: queries.containers_at_risk(
                snap, level, terminal, port, carrier, customer, limit
            ),
        )
        text = (
            f"{out['matching']} containers at {', '.join(out['levels'])} (risk as of "
            f"{out['as_of']}); showing {out['returned']}; projected demurrage "
            f"{out['projected_demurrage']:,.0f}"
        )
        return _result(text, out)

    @mcp.tool(annotations=READ_ONLY)
    def get_container(
        container: Annotated[
            str,
            Field(description="Container number (e.g. MSCU1234567) or Terminal49 container id."),
        ],
    ) -> Annotated[CallToolResult, ContainerOut]:
        """One container as the at-risk list shows it: level, reason, binding LFD with its
        source, days left, holds, appointment, costs, port, terminal, carrier; its LFD by
        source, holds and fees. Every other attribute: query_warehouse (see ``more``)."""
        out = _answer(
            rd, ("get_container", container), lambda snap: queries.get_container(snap, container)
        )
        text = (
            f"{out['container_number']}: {out.get('risk_level') or 'no risk row'}, binding "
            f"LFD {out.get('lfd_date')} ({out.get('lfd_source')}); "
            f"{out.get('risk_reason') or ''}"
        ).strip()
        return _result(text, out)

    @mcp.tool(annotations=READ_ONLY)
    def summarize_containers(
        group_by: Annotated[
            queries.GroupBy,
            Field(description="terminal, port, carrier, customer, risk_level or lfd_date."),
        ] = "terminal",
        level: Annotated[
            list[Level] | None, Field(description="Only these risk levels (default all).")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    ) -> Annotated[CallToolResult, SummaryOut]:
        """Active containers grouped by terminal, port, carrier, customer, risk level or LFD
        date: counts per level, accrued and projected demurrage, uncosted boxes."""
        out = _answer(
            rd,
            ("summarize_containers", group_by, tuple(level or ()), limit),
            lambda snap: queries.summarize_containers(snap, group_by, level, limit),
        )
        t = out["totals"]
        text = (
            f"{out['groups_total']} groups by {group_by}: {t['containers']:.0f} active, "
            f"{t['overdue']:.0f} overdue, projected demurrage "
            f"{t['projected_demurrage']:,.0f}"
        )
        return _result(text, out)

    @mcp.tool(annotations=READ_ONLY)
    def lfd_calendar(
        days: Annotated[int, Field(ge=1, le=120, description="Days from today.")] = 14,
    ) -> Annotated[CallToolResult, CalendarOut]:
        """The LFD calendar: per day from today, the active boxes whose binding LFD falls
        then, how many are ready, on hold, booked, and their projected cost."""
        out = _answer(rd, ("lfd_calendar", days), lambda snap: queries.lfd_calendar(snap, days))
        boxes = sum(int(d["boxes"]) for d in out["days"])
        text = (
            f"{boxes} boxes reach their LFD in the next {days} days; "
            f"{out['overdue_before_today']} already overdue"
        )
        return _result(text, out)

    @mcp.tool(annotations=READ_ONLY)
    def search_container(
        query: Annotated[
            str,
            Field(description=("Start of a container number, bill of lading or reference number.")),
        ],
        limit: Annotated[int, Field(ge=1, le=200)] = 25,
    ) -> Annotated[CallToolResult, SearchOut]:
        """Find containers by the start of their number, bill of lading or a reference
        number (case-insensitive)."""
        out = _answer(
            rd,
            ("search_container", query, limit),
            lambda snap: queries.search_container(snap, query, limit),
        )
        more = " (more: narrow the query)" if out["more"] else ""
        return _result(f"{out['returned']} containers match {query!r}{more}", out)

    @mcp.tool(annotations=READ_ONLY)
    def container_evidence(
        container: Annotated[str, Field(description="Container number or id.")],
    ) -> Annotated[CallToolResult, EvidenceOut]:
        """The evidence for a demurrage dispute of one container, as `freetime evidence`
        writes it: per charging party its free time, LFD and source, end of chargeable time,
        each charged day with its tier and rate, the timeline (in the CSV), and what
        freetime cannot know."""

        def gather(snap: View) -> dict[str, Any]:
            if isinstance(snap, Snapshot):
                ev = evidence.gather(snap.con, container, load_tariffs())
            else:  # PostgreSQL: the box's rows, copied in the call's snapshot
                assert isinstance(rd, PgReader)
                with (
                    snap.con.cursor() as cur,
                    evidence_connection(
                        rd.warehouse, [container], rd.timeout_seconds, within=cur
                    ) as con,
                ):
                    ev = evidence.gather(con, container, load_tariffs())
            return {
                "container": container,
                "facts": dict(evidence.key_facts(ev)),
                "csv": evidence.render_csv(ev),
            }

        out = _answer(rd, ("container_evidence", container), gather)
        facts = out["facts"]
        binding = facts.get("Pick up before (binding LFD)")
        return _result(f"{container}: pick up before {binding}", out)

    @mcp.tool(annotations=READ_ONLY)
    def audit_invoice(
        invoice: Annotated[str, Field(description="Invoice number, as imported.")],
        issuer: Annotated[
            str | None, Field(description="Issuer name, when several issuers use the number.")
        ] = None,
    ) -> Annotated[CallToolResult, InvoiceAuditOut]:
        """The audit of one imported demurrage, storage or detention invoice against the
        charge engine and history (docs/invoices.md): per line the billed and computed
        amounts, the amount in dispute, each finding as a code and a sentence, and the
        deadline to dispute."""
        out = _answer(
            rd,
            ("audit_invoice", invoice, issuer),
            lambda snap: queries.audit_invoice(snap, invoice, issuer),
        )
        return _result(
            f"invoice {invoice}: {out['disputed_amount']:,.2f} {out['currency']} in dispute of "
            f"{out['billed_amount']:,.2f}; dispute by {out['dispute_by']}",
            out,
        )

    @mcp.tool(annotations=READ_ONLY)
    def warehouse_freshness() -> Annotated[CallToolResult, FreshnessOut]:
        """When the warehouse was last loaded (full or incremental), when webhooks were last
        applied, and the instant the published risk is computed at."""
        out = _answer(rd, ("warehouse_freshness",), queries.freshness)
        return _result(f"risk as of {out.get('risk_as_of')}; data from {out['source']}", out)

    @mcp.tool(annotations=READ_ONLY)
    def query_warehouse(
        sql: Annotated[
            str,
            Field(
                description=(
                    "One read-only query (SELECT/WITH/DESCRIBE/SHOW) over the schemas "
                    "terminal49 and analytics, in the warehouse's SQL (DuckDB's, or "
                    "PostgreSQL's on a PostgreSQL warehouse)."
                )
            ),
        ],
        max_rows: Annotated[
            int,
            Field(
                ge=1,
                description=(
                    "Rows to return at most (the server's cap, 1,000 by default, bounds it)."
                ),
            ),
        ] = DEFAULT_MAX_ROWS,
    ) -> Annotated[CallToolResult, SqlOut]:
        """Run one read-only SQL query on the warehouse (a snapshot; no file or network
        access). At most max_rows rows; long queries are stopped."""
        cap = min(max_rows, row_cap)

        def run(snap: View) -> dict[str, Any]:
            if isinstance(snap, Snapshot):
                res = run_query(snap.path, sql, max_rows=cap, timeout_seconds=sql_timeout)
            else:  # the live database, in this call's read-only transaction
                res = snap.run_query(sql, max_rows=cap)
            return {
                "columns": res.columns,
                "types": res.types,
                "rows": [[queries.jsonable(v) for v in r] for r in res.rows],
                "row_count": len(res.rows),
                "truncated": res.truncated,
                "max_rows": cap,
            }

        out = _answer(rd, None, run)
        cut = f" (cut at {cap})" if out["truncated"] else ""
        return _result(f"{out['row_count']} rows{cut}", out)

    @mcp.resource(
        "freetime://rules/risk",
        name="risk_rules",
        mime_type="text/markdown",
        description="How freetime computes demurrage risk from LFDs, holds and fees.",
    )
    def risk_rules() -> str:
        return risk_rules_text()

    @mcp.resource(
        "freetime://schema",
        name="warehouse_schema",
        mime_type="text/markdown",
        description="Tables and columns of the warehouse with their comments.",
    )
    def warehouse_schema() -> str:
        try:
            with rd.snapshot() as snap:
                text: str = snap.cached(("schema",), lambda: queries.schema_text(snap))
                return text
        except WarehouseError as exc:
            return f"The warehouse cannot be read now: {exc}\n"

    @mcp.prompt(description="Check demurrage exposure and what to do about it.")
    def check_demurrage(terminal: str = "") -> str:
        where = f" at terminal {terminal}" if terminal else ""
        return (
            f"Check demurrage{where}. Call warehouse_freshness first and say how current the "
            "data is. Then summarize_containers grouped by terminal (and by customer), and "
            f"containers_at_risk{' with terminal=' + repr(terminal) if terminal else ''} "
            "for the overdue and due-today boxes. For each of the five most costly, call "
            "get_container and explain the binding LFD (and its source), the holds that block "
            "pickup and the projected cost. End with the total exposure and what to act on."
        )

    @mcp.prompt(description="Plan today's pickups: what must move today and what blocks it.")
    def plan_pickups_today(terminal: str = "", port: str = "") -> str:
        scope = (
            " ".join(
                x
                for x in (
                    f"terminal {terminal}" if terminal else "",
                    f"port {port}" if port else "",
                )
                if x
            )
            or "all terminals"
        )
        return (
            f"Plan today's pickups for {scope}. Call containers_at_risk with level overdue and "
            "due_today (and the terminal/port filter), then lfd_calendar for the next 3 days. "
            "List the boxes that must move today, ready ones first; for each blocked one name "
            "the hold (get_container) and who can clear it. Note boxes without an appointment."
        )

    return mcp, rd
