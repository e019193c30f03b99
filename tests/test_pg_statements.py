"""How the SQL tool splits PostgreSQL text into statements (one per call: a second one could
lift the time limit or the read-only transaction)."""

from __future__ import annotations

import pytest

from pipelines.pg.cursor import postgres_sql
from pipelines.toolserver.pgread import split_statements

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("sql", "statements"),
    [
        ("SELECT 1", ["SELECT 1"]),
        ("SELECT 1;  ", ["SELECT 1"]),
        ("SELECT ';' AS x; -- a comment", ["SELECT ';' AS x"]),
        ("SELECT 1; DELETE FROM t", ["SELECT 1", "DELETE FROM t"]),
        (
            'SELECT $$a;b$$, $q$;$q$, "x;y" /* ; */ FROM t;',
            ['SELECT $$a;b$$, $q$;$q$, "x;y" /* ; */ FROM t'],
        ),
        ("SELECT E'a\\';b'", ["SELECT E'a\\';b'"]),
        # without E, a backslash is a character: the quote ends the string
        ("SELECT 'a\\'; SET statement_timeout = 0", ["SELECT 'a\\'", "SET statement_timeout = 0"]),
        ("  ;  -- only a comment", []),
    ],
)
def test_split_statements(sql: str, statements: list[str]) -> None:
    assert split_statements(sql) == statements


def test_placeholders_become_psycopg2s_outside_quotes() -> None:
    assert postgres_sql("SELECT '?', \"a?\", x FROM t WHERE y = ? AND z LIKE 'a%'") == (
        "SELECT '?', \"a?\", x FROM t WHERE y = %s AND z LIKE 'a%%'"
    )
    assert postgres_sql("SELECT x % 2 FROM t WHERE y = ?") == "SELECT x %% 2 FROM t WHERE y = %s"
