"""Tariff CSV loading, validation messages and tier arithmetic."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pipelines.analytics import TariffError, load_tariffs
from pipelines.analytics.tariffs import COLUMNS, parse_tiers, tier_cost

pytestmark = pytest.mark.fast

HEADER = ",".join(COLUMNS)


def test_default_file_loads() -> None:
    t = load_tariffs()
    assert t.height >= 10 and set(t["charge"]) == {"demurrage", "detention"}


@pytest.mark.parametrize(
    ("line", "column"),
    [
        ("demurrage,,,dry,x,working,1-5:220;6+:280,USD,s,2021-01-01", "free_days"),
        ("demurrage,,,dry,4,working,2-5:220;6+:280,USD,s,2021-01-01", "tiers"),
        ("demurrage,,,dry,4,weekly,1-5:220;6+:280,USD,s,2021-01-01", "free_basis"),
        ("demurrage,,,dry,4,working,1-5:220;6+:280,USD,s,2021-13-01", "as_of"),
    ],
)
def test_bad_csv_names_line_and_column(tmp_path: Path, line: str, column: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(
        f"{HEADER}\ndemurrage,,USLAX,dry,4,working,1-5:220;6+:280,USD,s,2021-01-01\n{line}\n"
    )
    with pytest.raises(TariffError, match=rf"t.csv:3: column {column}:"):
        load_tariffs(p)


def test_duplicate_key_is_rejected(tmp_path: Path) -> None:
    row = "demurrage,MAEU,,dry,4,working,1+:100,USD,s,2021-01-01"
    p = tmp_path / "t.csv"
    p.write_text(f"{HEADER}\n{row}\n{row}\n")
    with pytest.raises(TariffError, match="line 2"):
        load_tariffs(p)


def test_tier_cost_hand_computed() -> None:
    tiers = parse_tiers("1-4:235;5-9:285;10+:335")
    cols = {}
    for k, t in enumerate(tiers):
        cols |= {f"t{k}_start": [t["start"]], f"t{k}_end": [t["end"]], f"t{k}_rate": [t["rate"]]}
    df = pl.DataFrame(cols, schema_overrides={"t2_end": pl.Int32})
    # 12 days: 4x235 + 5x285 + 3x335 = 940 + 1425 + 1005 = 3370; 0 days: 0
    out = df.select(a=tier_cost(pl.lit(12), 3), b=tier_cost(pl.lit(0), 3))
    assert out.row(0) == (3370.0, 0.0)
