"""The user-editable tariff table (``data/tariffs.csv``): loading, validation, matching.

CSV columns (one row per tariff; header required, order free):

``charge``         ``demurrage`` or ``detention``.
``carrier_scac``   shipping line SCAC; blank = any carrier.
``port_locode``    UN/LOCODE of the port (inland moves: the destination); blank = any port.
``equipment``      ``dry`` (everything not reefer), ``reefer``; blank = any equipment.
``free_days``      free days (integer >= 0); blank = not published: the tariff then only prices
                   a posted LFD and never estimates one.
``free_basis``     ``working`` (weekends and US federal holidays excluded) or ``calendar``.
``tiers``          charges per container per calendar day, counted from the first chargeable
                   day (the day after the LFD): ``1-5:220;6+:280``. Contiguous from 1, last open.
``currency``       ISO 4217 code. ``source`` free text. ``as_of`` ISO date of the source.

Matching (most specific wins): carrier+port > carrier > port > default; at equal rank a row
naming the equipment beats a blank one. Two rows with the same charge, carrier, port and
equipment are an error. A container no row matches is *uncosted*, never priced at zero.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable
from datetime import date
from pathlib import Path

import polars as pl

DEFAULT_TARIFFS_PATH = Path(__file__).resolve().parents[2] / "data" / "tariffs.csv"
COLUMNS = (
    "charge",
    "carrier_scac",
    "port_locode",
    "equipment",
    "free_days",
    "free_basis",
    "tiers",
    "currency",
    "source",
    "as_of",
)
CHARGES = ("demurrage", "detention")
EQUIPMENT = ("dry", "reefer")
BASES = ("working", "calendar")
_TIER = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)|(\+))\s*:\s*(\d+(?:\.\d+)?)\s*$")

TARIFF_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "tariff_line": pl.Int32,
    "charge": pl.String,
    "carrier_scac": pl.String,
    "port_locode": pl.String,
    "equipment": pl.String,
    "free_days": pl.Int32,
    "free_basis": pl.String,
    "tiers": pl.List(pl.Struct({"start": pl.Int32, "end": pl.Int32, "rate": pl.Float64})),
    "currency": pl.String,
    "source": pl.String,
    "as_of": pl.Date,
}


class TariffError(ValueError):
    """The tariff CSV is unusable; the message names the file, line and column."""


def parse_tiers(text: str) -> list[dict[str, float | int | None]]:
    """Parse ``1-5:220;6+:280`` into tiers; raise ValueError with the reason."""
    parts = [p for p in text.split(";") if p.strip()]
    if not parts:
        raise ValueError("no tiers given (expected e.g. 1-5:220;6+:280)")
    tiers: list[dict[str, float | int | None]] = []
    expect = 1
    for i, part in enumerate(parts):
        m = _TIER.match(part)
        if not m:
            raise ValueError(f"tier {part.strip()!r} is not 'FROM-TO:RATE' or 'FROM+:RATE'")
        start, end = int(m.group(1)), (int(m.group(2)) if m.group(2) else None)
        if start != expect:
            raise ValueError(f"tier {part.strip()!r} should start at day {expect}")
        if end is None and i != len(parts) - 1:
            raise ValueError(f"open tier {part.strip()!r} must be the last one")
        if end is not None and end < start:
            raise ValueError(f"tier {part.strip()!r} ends before it starts")
        tiers.append({"start": start, "end": end, "rate": float(m.group(4))})
        expect = (end or 0) + 1
    if tiers[-1]["end"] is not None:
        raise ValueError("the last tier must be open-ended (e.g. 10+:335)")
    return tiers


def load_tariffs(path: str | Path | None = None) -> pl.DataFrame:
    """Read and validate the tariff CSV (default ``data/tariffs.csv``) into ``TARIFF_SCHEMA``.

    Raises :class:`TariffError` with ``file:line: column: reason`` on the first bad value.
    """
    p = Path(path) if path else DEFAULT_TARIFFS_PATH
    try:
        text = p.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise TariffError(f"cannot read tariff file {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise TariffError(
            f"{p} is not a UTF-8 text CSV (byte {exc.start}: {exc.object[exc.start]:#04x}); "
            "save the tariff table as CSV (UTF-8)"
        ) from exc
    reader = csv.DictReader(text.splitlines())
    header = reader.fieldnames or []
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise TariffError(f"{p}:1: missing column(s) {', '.join(missing)}")
    rows: list[dict[str, object]] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    for rec in reader:
        line = reader.line_num

        def bad(col: str, why: str, _line: int = line) -> TariffError:
            return TariffError(f"{p}:{_line}: column {col}: {why}")

        v = {k: (rec.get(k) or "").strip() for k in COLUMNS}
        if not any(v.values()):
            continue
        if v["charge"] not in CHARGES:
            raise bad("charge", f"{v['charge']!r} is not one of {', '.join(CHARGES)}")
        if v["equipment"] and v["equipment"] not in EQUIPMENT:
            raise bad("equipment", f"{v['equipment']!r} is not blank or one of dry, reefer")
        if v["free_basis"] not in BASES:
            raise bad("free_basis", f"{v['free_basis']!r} is not one of working, calendar")
        free: int | None = None
        if v["free_days"]:
            if not v["free_days"].isdigit():
                raise bad("free_days", f"{v['free_days']!r} is not a whole number >= 0")
            free = int(v["free_days"])
        try:
            tiers = parse_tiers(v["tiers"])
        except ValueError as exc:
            raise bad("tiers", str(exc)) from None
        if not re.fullmatch(r"[A-Z]{3}", v["currency"]):
            raise bad("currency", f"{v['currency']!r} is not an ISO 4217 code like USD")
        try:
            as_of = date.fromisoformat(v["as_of"])
        except ValueError:
            raise bad("as_of", f"{v['as_of']!r} is not an ISO date (YYYY-MM-DD)") from None
        key = (v["charge"], v["carrier_scac"].upper(), v["port_locode"].upper(), v["equipment"])
        if key in seen:
            raise bad("carrier_scac", f"same charge/carrier/port/equipment as line {seen[key]}")
        seen[key] = line
        rows.append(
            {
                "tariff_line": line,
                "charge": v["charge"],
                "carrier_scac": key[1] or None,
                "port_locode": key[2] or None,
                "equipment": v["equipment"] or None,
                "free_days": free,
                "free_basis": v["free_basis"],
                "tiers": tiers,
                "currency": v["currency"],
                "source": v["source"] or None,
                "as_of": as_of,
            }
        )
    return pl.DataFrame(rows, schema=TARIFF_SCHEMA)


def match_tariffs(keys: pl.LazyFrame, tariffs: pl.DataFrame, charge: str) -> pl.LazyFrame:
    """Best tariff row for each distinct ``(scac, port, equip)`` key of ``keys``.

    Returns the key columns plus ``tariff_line``, ``free_days``, ``free_basis``, ``currency`` and
    tier columns ``t{k}_start``/``t{k}_end``/``t{k}_rate``; keys with no match are absent.
    """
    t = tariffs.filter(pl.col("charge") == charge)
    lens = t["tiers"].list.len().to_list()
    max_tiers = max([1, *[n for n in lens if n is not None]])
    tier_cols = []
    for k in range(max_tiers):
        item = pl.col("tiers").list.get(k, null_on_oob=True)
        tier_cols += [
            item.struct.field("start").alias(f"t{k}_start"),
            item.struct.field("end").alias(f"t{k}_end"),
            item.struct.field("rate").alias(f"t{k}_rate"),
        ]
    rank = (
        pl.col("carrier_scac").is_not_null().cast(pl.Int32) * 4
        + pl.col("port_locode").is_not_null().cast(pl.Int32) * 2
        + pl.col("equipment").is_not_null().cast(pl.Int32)
    )
    tl = t.lazy().with_columns(*tier_cols, _rank=rank).drop("tiers", "charge")
    cand = keys.join(tl, how="cross").filter(
        (pl.col("carrier_scac").is_null() | (pl.col("carrier_scac") == pl.col("scac")))
        & (pl.col("port_locode").is_null() | (pl.col("port_locode") == pl.col("port")))
        & (pl.col("equipment").is_null() | (pl.col("equipment") == pl.col("equip")))
    )
    return (
        cand.sort("_rank", descending=True)
        .group_by("scac", "port", "equip", maintain_order=True)
        .first()
        .drop("_rank", "carrier_scac", "port_locode", "equipment", "source", "as_of")
    )


def least(values: Iterable[pl.Expr]) -> pl.Expr:
    """The smallest of integer expressions (Int32 range), NULLs skipped (NULL when all are)."""
    return _extreme(pl.min_horizontal, values, 2**31 - 1)


def greatest(values: Iterable[pl.Expr]) -> pl.Expr:
    """The largest of integer expressions (Int32 range), NULLs skipped (NULL when all are)."""
    return _extreme(pl.max_horizontal, values, -(2**31))


def _extreme(horizontal: Callable[..., pl.Expr], values: Iterable[pl.Expr], beyond: int) -> pl.Expr:
    # polars' min_horizontal and max_horizontal take a much slower path on columns holding
    # NULLs: they get NULL-free columns instead, NULL as a value none reaches (``beyond``: above
    # every value for the smallest, below every one for the largest), mapped back to NULL
    picked = horizontal(v.fill_null(beyond) for v in values)
    return pl.when(picked != beyond).then(picked)


def tier_cost(days: pl.Expr, n_tiers: int, prefix: str = "") -> pl.Expr:
    """Charges for ``days`` chargeable calendar days under the tier columns (0 when days <= 0)."""
    total = pl.lit(0.0)
    for k in range(n_tiers):
        start = pl.col(f"{prefix}t{k}_start")
        last = least([days, pl.col(f"{prefix}t{k}_end")])  # an open tier has no end
        covered = (last - start + 1).clip(lower_bound=0)
        total = total + (covered * pl.col(f"{prefix}t{k}_rate")).fill_null(0.0)
    return total
