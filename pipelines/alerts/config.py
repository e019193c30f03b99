"""The alerts' settings: thresholds, destinations and their filters, the digest's hour.

One table, ``[alerts]`` in ``data/alerts.toml`` (env ``FREETIME_ALERTS_CONFIG`` names another
file); destinations also come from ``FREETIME_ALERT_URLS`` (Apprise URLs separated by spaces,
no filter). Every key is documented in ``docs/alerts.md``; the defaults are the ones a drayage
desk would pick. A destination's URL or filter that cannot be used is not an error for the
whole file: it is reported by :func:`Destination.problem` (one line, secrets masked) and that
destination alone waits, so a typo never stops the load, the risk or the other destinations.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipelines.config import ConfigError

DEFAULT_ALERTS_PATH = Path(__file__).resolve().parents[2] / "data" / "alerts.toml"
CONFIG_ENV = "FREETIME_ALERTS_CONFIG"
URLS_ENV = "FREETIME_ALERT_URLS"

#: Projected demurrage (tariff currency) whose crossing raises an alert, lowest first.
DEFAULT_COST_THRESHOLDS = (500.0, 1000.0, 2500.0, 5000.0)
#: Levels (besides the at-risk ones) for which an earlier binding LFD is news.
DEFAULT_LFD_LEVELS = ("overdue", "due_today", "imminent", "watch")
DEFAULT_DIGEST_TIME = time(6, 30)
DEFAULT_TIMEZONE = "UTC"
#: Seconds before the first retry of a destination that failed; doubled per failure, capped.
DEFAULT_RETRY_SECONDS = 30.0
DEFAULT_RETRY_MAX_SECONDS = 3600.0
#: An Apprise read timeout long enough for a slow but working server (Apprise's own is 4 s).
DEFAULT_READ_TIMEOUT = "30"

FILTER_KEYS = ("levels", "ports", "terminals", "carriers", "references")
_DEST_KEYS = {"name", "url", *FILTER_KEYS, "digest_time", "timezone", "digest"}
_ALERT_KEYS = {
    "cost_thresholds",
    "lfd_levels",
    "digest_time",
    "timezone",
    "retry_seconds",
    "retry_max_seconds",
    "destinations",
}


class AlertConfigError(ConfigError):
    """``alerts.toml`` cannot be read, or one of its values is invalid (message says which)."""


_SECRET_QUERY = re.compile(r"(pass|pwd|token|key|secret|sig|auth|webhook)", re.I)


def mask(url: str) -> str:
    """``url`` with its secrets hidden: Apprise's own privacy form when Apprise understands the
    URL, else the password, long path segments and secret-looking query values starred."""
    import apprise

    try:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    except Exception:  # a URL Apprise chokes on is masked by hand below
        plugin = None
    if plugin is not None:
        return str(plugin.url(privacy=True))  # type: ignore[no-untyped-call]
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unreadable URL>"
    host = parts.hostname or ""
    user = (
        f"{parts.username}:****@"
        if parts.password
        else (f"{parts.username}@" if parts.username else "")
    )
    port = f":{parts.port}" if _port(parts) else ""
    path = "/".join(s if len(s) < 12 else f"{s[:2]}...{s[-1]}" for s in parts.path.split("/"))
    query = "&".join(
        f"{k}={'****' if _SECRET_QUERY.search(k) else v}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    return f"{parts.scheme}://{user}{host}{port}{path}" + (f"?{query}" if query else "")


def _port(parts: Any) -> int | None:
    try:
        return int(parts.port) if parts.port else None
    except ValueError:
        return None


def secrets_of(url: str) -> list[str]:
    """The parts of ``url`` that must never be printed: password, tokens in the path and the
    values of secret-looking query keys (longest first, for replacing)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [parts.password or ""]
    found += [s for s in parts.path.split("/") if len(s) >= 12]
    found += [v for k, v in parse_qsl(parts.query) if _SECRET_QUERY.search(k)]
    if parts.scheme in ("slack", "workflow", "workflows", "msteams") and parts.hostname:
        found.append(parts.hostname)  # the first token of these URLs sits in the host place
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` with every secret of ``url`` replaced by ``****``."""
    for s in secrets_of(url):
        text = text.replace(s, "****")
    return text


@dataclass(frozen=True)
class Filter:
    """Which alerts a destination wants; an empty tuple lets everything through.

    Ports match the port of discharge (UN/LOCODE), terminals the terminal's name or FIRMS code,
    carriers the line's SCAC, references the container number, the bill of lading or a
    shipment/container reference number. Text compares case-insensitively.
    """

    levels: tuple[str, ...] = ()
    ports: tuple[str, ...] = ()
    terminals: tuple[str, ...] = ()
    carriers: tuple[str, ...] = ()
    references: tuple[str, ...] = ()

    def matches(self, row: Mapping[str, Any]) -> bool:
        """``row``: an outbox or risk row (``risk_level``, ``port_of_discharge_locode``,
        ``pod_terminal_name``, ``pod_terminal_firms_code``, ``shipping_line_scac``,
        ``container_number``, ``bill_of_lading_number``, ``reference_numbers``)."""

        def low(*values: Any) -> set[str]:
            out: set[str] = set()
            for v in values:
                if isinstance(v, list | tuple):
                    out |= {str(x).lower() for x in v if x}
                elif v:
                    out.add(str(v).lower())
            return out

        checks = (
            (self.levels, low(row.get("risk_level"))),
            (self.ports, low(row.get("port_of_discharge_locode"))),
            (self.terminals, low(row.get("pod_terminal_name"), row.get("pod_terminal_firms_code"))),
            (self.carriers, low(row.get("shipping_line_scac"))),
            (
                self.references,
                low(
                    row.get("container_number"),
                    row.get("bill_of_lading_number"),
                    row.get("reference_numbers"),
                ),
            ),
        )
        return all(not want or bool(set(want) & have) for want, have in checks)

    def describe(self) -> str:
        parts = [f"{k}={','.join(getattr(self, k))}" for k in FILTER_KEYS if getattr(self, k)]
        return " ".join(parts) or "everything"


@dataclass(frozen=True)
class Destination:
    """One place alerts go: an Apprise URL, a filter, and when its morning digest is due.

    ``key`` names it in the delivery state: the configured name, else a hash of the URL (so a
    URL from the environment keeps its progress across restarts). ``error`` is set when the URL
    or the filter cannot be used; such a destination is listed and skipped, never fatal.
    """

    name: str
    url: str
    filter: Filter = field(default_factory=Filter)
    digest_time: time | None = DEFAULT_DIGEST_TIME
    timezone: str = DEFAULT_TIMEZONE
    error: str | None = None

    @property
    def key(self) -> str:
        return self.name

    @property
    def masked(self) -> str:
        return mask(self.url)

    @property
    def label(self) -> str:
        """How a line names the destination: its name and masked URL."""
        return f"{self.name} ({self.masked})"

    @property
    def scheme(self) -> str:
        return self.url.split("://", 1)[0].lower() if "://" in self.url else ""

    @property
    def is_email(self) -> bool:
        return self.scheme in ("mailto", "mailtos")

    @property
    def is_json(self) -> bool:
        return self.scheme in ("json", "jsons")

    def send_url(self) -> str:
        """The URL given to Apprise: the configured one, with a read timeout that lets a slow
        server answer (``rto``) unless the URL sets one."""
        if re.search(r"[?&]rto=", self.url):
            return self.url
        return self.url + ("&" if "?" in self.url else "?") + f"rto={DEFAULT_READ_TIMEOUT}"


@dataclass(frozen=True)
class AlertSettings:
    """Everything the rules, the sender and the digest read; see ``docs/alerts.md``."""

    cost_thresholds: tuple[float, ...] = DEFAULT_COST_THRESHOLDS
    lfd_levels: tuple[str, ...] = DEFAULT_LFD_LEVELS
    retry_seconds: float = DEFAULT_RETRY_SECONDS
    retry_max_seconds: float = DEFAULT_RETRY_MAX_SECONDS
    destinations: tuple[Destination, ...] = ()
    source: str = "defaults"

    def destination(self, name: str) -> Destination | None:
        return next((d for d in self.destinations if d.name == name), None)


def _url_name(url: str) -> str:
    return "url-" + hashlib.sha256(url.encode()).hexdigest()[:10]


def _texts(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(x, str) and x.strip() for x in raw):
        raise AlertConfigError(f"{where}: must be a list of texts")
    return tuple(x.strip().lower() for x in raw)


def _clock(raw: Any, where: str) -> time:
    try:
        hour, minute = (int(x) for x in str(raw).split(":"))
        return time(hour, minute)
    except ValueError:
        raise AlertConfigError(f"{where}: {raw!r} is not a local time HH:MM") from None


def _zone(raw: Any, where: str) -> str:
    try:
        ZoneInfo(str(raw))
    except (ZoneInfoNotFoundError, ValueError):
        raise AlertConfigError(f"{where}: {raw!r} is not an IANA time zone") from None
    return str(raw)


def check_url(url: str) -> str | None:
    """Why Apprise cannot send to ``url`` (one line, masked), or None when it can."""
    import apprise

    if "://" not in url:
        return "not a URL (expected e.g. mailtos://user:pass@host?to=..., json://host/path)"
    try:
        plugin = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    except Exception as exc:
        return scrub(f"Apprise cannot read it: {exc}", url)
    if plugin is None:
        return f"Apprise cannot send to a {url.split('://', 1)[0]!r} URL written this way"
    return None


def _levels() -> tuple[str, ...]:
    """The risk levels, from the risk engine: imported only for a table that names levels (it
    brings polars), so reading the settings stays light."""
    from pipelines.analytics.risk import LEVELS

    return LEVELS


def destination_from(
    raw: Mapping[str, Any], where: str, default_time: time | None, default_zone: str
) -> Destination:
    """One ``[[alerts.destinations]]`` entry. A bad URL or filter gives a Destination with
    ``error`` set rather than an exception (only that destination waits)."""
    url = str(raw.get("url") or "").strip()
    name = str(raw.get("name") or "").strip() or (_url_name(url) if url else where)
    problems = []
    unknown = set(raw) - _DEST_KEYS
    if unknown:
        problems.append(f"unknown key(s) {', '.join(sorted(unknown))}")
    flt = Filter()
    digest_time: time | None = default_time
    zone = default_zone
    try:
        kwargs = {k: _texts(raw.get(k), f"{k}") for k in FILTER_KEYS}
        bad = [lv for lv in kwargs["levels"] if lv not in _levels()]
        if bad:
            raise AlertConfigError(
                f"levels: unknown level(s) {', '.join(bad)}; use {', '.join(_levels())}"
            )
        flt = Filter(**kwargs)
        if raw.get("digest") is False:
            digest_time = None
        elif raw.get("digest_time") is not None:
            digest_time = _clock(raw["digest_time"], "digest_time")
        if raw.get("timezone") is not None:
            zone = _zone(raw["timezone"], "timezone")
    except AlertConfigError as exc:
        problems.append(str(exc))
    if not url:
        problems.append("no url")
    elif (why := check_url(url)) is not None:
        problems.append(why)
    return Destination(
        name=name,
        url=url,
        filter=flt,
        digest_time=digest_time,
        timezone=zone,
        error="; ".join(problems) or None,
    )


def _numbers(raw: Any, where: str) -> tuple[float, ...]:
    if not isinstance(raw, list) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) and x > 0 for x in raw
    ):
        raise AlertConfigError(f"{where}: must be a list of positive numbers")
    return tuple(sorted(float(x) for x in raw))


def load_settings(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    *,
    destinations: bool = True,
) -> AlertSettings:
    """Read the ``[alerts]`` table of ``path`` (default env ``FREETIME_ALERTS_CONFIG``, else
    ``data/alerts.toml``; a missing default file means defaults) and ``FREETIME_ALERT_URLS``.

    Raises :class:`AlertConfigError` for a file that is not TOML or a global value that is
    invalid; a bad destination is kept with its ``error`` (see :class:`Destination`).
    ``destinations=False`` (the rules) skips reading them.
    """
    env = os.environ if env is None else env
    explicit = path or env.get(CONFIG_ENV)
    p = Path(explicit) if explicit else DEFAULT_ALERTS_PATH
    doc: dict[str, Any] = {}
    if p.exists() or explicit:
        try:
            doc = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AlertConfigError(f"cannot read {p}: {exc.strerror or exc}") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise AlertConfigError(f"{p} is not valid TOML: {exc}") from exc
    table = doc.get("alerts", {})
    if not isinstance(table, dict):
        raise AlertConfigError(f"{p}: [alerts] must be a table")
    unknown = set(table) - _ALERT_KEYS
    if unknown:
        raise AlertConfigError(f"{p}: unknown key(s) in [alerts]: {', '.join(sorted(unknown))}")
    where = f"{p}: alerts."
    kwargs: dict[str, Any] = {"source": str(p) if doc else "defaults"}
    if "cost_thresholds" in table:
        kwargs["cost_thresholds"] = _numbers(table["cost_thresholds"], where + "cost_thresholds")
    if "lfd_levels" in table:
        levels = _texts(table["lfd_levels"], where + "lfd_levels")
        bad = [lv for lv in levels if lv not in _levels()]
        if bad:
            raise AlertConfigError(f"{where}lfd_levels: unknown level(s) {', '.join(bad)}")
        kwargs["lfd_levels"] = levels
    for key in ("retry_seconds", "retry_max_seconds"):
        if key in table:
            v = table[key]
            if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
                raise AlertConfigError(f"{where}{key}: must be a positive number of seconds")
            kwargs[key] = float(v)
    default_time = (
        _clock(table["digest_time"], where + "digest_time")
        if "digest_time" in table
        else DEFAULT_DIGEST_TIME
    )
    default_zone = (
        _zone(table["timezone"], where + "timezone") if "timezone" in table else DEFAULT_TIMEZONE
    )
    if not destinations:
        return AlertSettings(**kwargs)
    raw_dests = table.get("destinations", [])
    if not isinstance(raw_dests, list) or not all(isinstance(d, dict) for d in raw_dests):
        raise AlertConfigError(f"{where}destinations: must be [[alerts.destinations]] tables")
    dests = [
        destination_from(d, f"destination #{i + 1}", default_time, default_zone)
        for i, d in enumerate(raw_dests)
    ]
    dests += [
        destination_from({"url": u}, u, default_time, default_zone)
        for u in env.get(URLS_ENV, "").split()
    ]
    kwargs["destinations"] = tuple(_unique(dests))
    return AlertSettings(**kwargs)


def _unique(dests: Iterable[Destination]) -> list[Destination]:
    """Destinations with distinct names (a repeated name gets the error, not the first)."""
    seen: set[str] = set()
    out = []
    for d in dests:
        if d.name in seen:
            d = Destination(d.name + "-dup", d.url, error=f"the name {d.name!r} is used twice")
        seen.add(d.name)
        out.append(d)
    return out
