"""The alerts table: destinations, filters, masking of secrets, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.alerts.config import (
    AlertConfigError,
    Destination,
    Filter,
    load_settings,
    mask,
    scrub,
)

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "url, secret",
    [
        ("mailtos://desk:pa55-word-x@smtp.example.com:587?to=a@example.com", "pa55-word-x"),
        ("slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7", "TIiajkdnlazkcOXrIdevi7"),
        ("json://user:hook-pass-1@127.0.0.1:8080/hook", "hook-pass-1"),
        ("workflows://host.example.com/abcdef0123456789/sig0123456789abc", "sig0123456789abc"),
        ("jsn://user:hunter2-secret@example.com/x", "hunter2-secret"),
        ("nope://host/averyveryverylongtoken123?token=zzz-top-secret", "zzz-top-secret"),
    ],
)
def test_secrets_never_show(url: str, secret: str) -> None:
    assert secret not in mask(url)
    assert secret not in scrub(f"failed to reach {url} with {secret}", url)


def test_env_urls_and_the_table_make_destinations(tmp_path: Path) -> None:
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        "[alerts]\n"
        'digest_time = "07:15"\n'
        'timezone = "America/New_York"\n'
        "[[alerts.destinations]]\n"
        'name = "nyc"\n'
        'url = "json://example.com/hook"\n'
        'ports = ["USNYC"]\n'
        'levels = ["overdue", "due_today"]\n'
        'timezone = "America/Chicago"\n'
    )
    s = load_settings(cfg, env={"FREETIME_ALERT_URLS": " json://a.example/x  json://b.example/y "})
    names = [d.name for d in s.destinations]
    assert names[0] == "nyc" and len(names) == 3 and all(n.startswith("url-") for n in names[1:])
    nyc = s.destinations[0]
    assert nyc.error is None and nyc.timezone == "America/Chicago"
    assert nyc.digest_time is not None and nyc.digest_time.hour == 7
    assert s.destinations[1].timezone == "America/New_York"
    # the same URL keeps its name across restarts (its progress is kept under that name)
    again = load_settings(cfg, env={"FREETIME_ALERT_URLS": "json://a.example/x"})
    assert again.destinations[1].name == s.destinations[1].name


@pytest.mark.parametrize(
    "entry, words",
    [
        ('url = "nope"', "not a URL"),
        ('url = "zzz://x/y"', "Apprise cannot send"),
        ('url = "json://h/x"\nlevels = ["overdu"]', "unknown level(s) overdu"),
        ('url = "json://h/x"\nports = [1]', "ports: must be a list of texts"),
        ('url = "json://h/x"\ntimezone = "Mars/Base"', "not an IANA time zone"),
        ('url = "json://h/x"\ndigest_time = "25h"', "not a local time HH:MM"),
        ('url = "json://h/x"\ncolour = "red"', "unknown key(s) colour"),
    ],
)
def test_a_bad_destination_is_kept_with_one_line(tmp_path: Path, entry: str, words: str) -> None:
    cfg = tmp_path / "a.toml"
    cfg.write_text(f'[alerts]\n[[alerts.destinations]]\nname = "d"\n{entry}\n')
    (d,) = load_settings(cfg, env={}).destinations
    assert d.error is not None and words in d.error and "\n" not in d.error


@pytest.mark.parametrize(
    "text, words",
    [
        ("[alerts\n", "is not valid TOML"),
        ("[alerts]\ncost_thresholds = [-1]\n", "cost_thresholds: must be a list of positive"),
        ("[alerts]\nretry_seconds = 0\n", "retry_seconds: must be a positive number"),
        ("[alerts]\nsurprise = 1\n", "unknown key(s) in [alerts]: surprise"),
    ],
)
def test_a_bad_table_is_one_error(tmp_path: Path, text: str, words: str) -> None:
    cfg = tmp_path / "a.toml"
    cfg.write_text(text)
    with pytest.raises(AlertConfigError) as err:
        load_settings(cfg, env={})
    assert words in str(err.value) and str(cfg) in str(err.value)


def test_filters() -> None:
    row = {
        "risk_level": "overdue",
        "port_of_discharge_locode": "USLAX",
        "pod_terminal_name": "Pier 400",
        "pod_terminal_firms_code": "W185",
        "shipping_line_scac": "MAEU",
        "container_number": "MSCU1234567",
        "bill_of_lading_number": "MAEU99",
        "reference_numbers": ["PO-1"],
    }
    assert Filter().matches(row)
    assert Filter(levels=("overdue",), ports=("uslax",), carriers=("maeu",)).matches(row)
    assert Filter(terminals=("w185",)).matches(row) and Filter(terminals=("pier 400",)).matches(row)
    assert Filter(references=("po-1",)).matches(row)
    assert Filter(references=("maeu99",)).matches(row)
    assert not Filter(ports=("usnyc",)).matches(row)
    assert not Filter(levels=("imminent",)).matches(row)
    assert Destination("x", "json://h/p").send_url() == "json://h/p?rto=30"
    assert Destination("x", "json://h/p?rto=2").send_url() == "json://h/p?rto=2"
