"""Project configuration: where the warehouse lives and how to reach the API.

Precedence for every setting: explicit argument > environment variable > dlt config/secrets
(``.dlt/config.toml``, ``.dlt/secrets.toml``) > built-in default.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import SplitResult, unquote, urlsplit

DEFAULT_BASE_URL = "https://api.terminal49.com/v2"
DEFAULT_DUCKDB_PATH = Path("data") / "freetime.duckdb"
DEFAULT_RATE_LIMIT_PER_MINUTE = 100
#: the API counts a key's requests in a rolling window of this many seconds
DEFAULT_RATE_WINDOW_SECONDS = 60.0
#: Seconds an API that accepts connections may stay wholly silent before a load gives up.
DEFAULT_STALL_SECONDS = 120.0
DATASET = "terminal49"
ANALYTICS_SCHEMA = "analytics"


class ConfigError(Exception):
    """A setting is missing or invalid; the message is meant for the user as is."""


def _dlt_value(key: str) -> object | None:
    """Read ``key`` (e.g. ``sources.terminal49.api_key``) from dlt config/secrets, or None."""
    try:
        import dlt

        return dlt.config.get(key) if "api_key" not in key else dlt.secrets.get(key)
    except Exception:  # dlt raises on missing/unreadable providers; absence is fine here
        return None


def default_duckdb_path() -> Path:
    """The warehouse file: env ``FREETIME_WAREHOUSE`` (when it is not a PostgreSQL URL), else
    ``FREETIME_DUCKDB``, else ``data/freetime.duckdb``."""
    chosen = os.environ.get("FREETIME_WAREHOUSE", "").strip()
    if chosen and not is_postgres_url(chosen):
        return Path(chosen)
    env = os.environ.get("FREETIME_DUCKDB")
    return Path(env) if env else DEFAULT_DUCKDB_PATH


def resolve_duckdb_path(path: str | os.PathLike[str] | None) -> Path:
    """An explicit path wins over the default. Nothing is created here: a writer creates the
    folders (:func:`working_folder`), a reader of a path that does not exist is told so.

    ConfigError when the path is a folder, or when the warehouse chosen (``path`` or
    ``FREETIME_WAREHOUSE``) is a PostgreSQL URL: a command that calls this one reads or writes
    a DuckDB file only (see :func:`resolve_warehouse` for the commands that run on both).
    """
    chosen = str(path) if path else os.environ.get("FREETIME_WAREHOUSE", "").strip()
    if is_postgres_url(chosen) or (path and _MANGLED_URL.match(str(path))):
        raise ConfigError(
            "this command runs on a DuckDB warehouse only for now; the warehouse chosen "
            f"({Warehouse.parse(chosen).display if is_postgres_url(chosen) else 'a PostgreSQL URL'}"
            ") is PostgreSQL. Give --duckdb PATH, or see docs/postgres.md for what runs there"
        )
    p = Path(path) if path else default_duckdb_path()
    if p.is_dir():
        raise ConfigError(
            f"the warehouse path {p} is a folder; give a DuckDB file, e.g. {p / 'freetime.duckdb'}"
        )
    return p


#: ``Path("postgresql://...")`` collapses the double slash: a URL given where a path is typed
_MANGLED_URL = re.compile(r"^postgres(ql)?:/[^/]")
_SCHEMES = ("postgresql", "postgres")


def is_postgres_url(text: str) -> bool:
    """Whether ``text`` names a PostgreSQL warehouse (``postgresql://`` or ``postgres://``)."""
    return text.strip().lower().startswith(tuple(f"{s}://" for s in _SCHEMES))


@dataclass(frozen=True)
class Warehouse:
    """Where the warehouse lives: a DuckDB file (``path``) or a PostgreSQL database (``dsn``,
    a ``postgresql://`` URL that may hold a password).

    ``display`` (and ``str``/``repr``) is the form to show: the URL with its password masked.
    The DSN itself must never be printed or logged.
    """

    kind: Literal["duckdb", "postgres"]
    path: Path | None = None
    dsn: str | None = field(default=None, repr=False)

    @property
    def is_postgres(self) -> bool:
        return self.kind == "postgres"

    @property
    def display(self) -> str:
        if self.dsn is None:
            return str(self.path)
        return mask_url(self.dsn)

    def __str__(self) -> str:
        return self.display

    def __repr__(self) -> str:
        return f"Warehouse({self.kind}, {self.display})"

    @property
    def password(self) -> str | None:
        """The password the URL holds (None when it holds none)."""
        parts = urlsplit(self.dsn or "")
        return unquote(parts.password) if parts.password is not None else None

    def working_folder(self) -> Path:
        """The local folder of the writers' dlt packages and state: beside a DuckDB file; for
        PostgreSQL, ``FREETIME_WORKDIR`` (default ``data``)``/.dlt-pipelines/pg-<host>-<port>-
        <database>``. ConfigError when it cannot be created or written."""
        if self.path is not None:
            return working_folder(self.path)
        parts = urlsplit(self.dsn or "")
        base = Path(os.environ.get("FREETIME_WORKDIR") or DEFAULT_DUCKDB_PATH.parent)
        name = f"pg-{parts.hostname or 'local'}-{parts.port or 5432}-{parts.path.lstrip('/')}"
        return working_folder(base / re.sub(r"[^A-Za-z0-9_-]", "_", name))

    @classmethod
    def parse(cls, text: str | os.PathLike[str]) -> Warehouse:
        """A DuckDB path or a ``postgresql://user[:password]@host[:port]/database`` URL.
        ConfigError (without the password) for a URL that is not one."""
        raw = str(text).strip()
        if _MANGLED_URL.match(raw):
            raw = raw.replace(":/", "://", 1)
        if not is_postgres_url(raw):
            return cls("duckdb", path=resolve_duckdb_path(raw))
        try:
            parts: SplitResult | None = urlsplit(raw)
            assert parts is not None
            parts.port  # noqa: B018 (a port that is not a number raises here)
        except ValueError:
            parts = None
        shown = mask_url(raw)
        if parts is None or not parts.hostname or not parts.path.strip("/"):
            raise ConfigError(
                f"the warehouse URL {shown} is not a PostgreSQL URL such as "
                "postgresql://user@host:5432/database (FREETIME_WAREHOUSE or --warehouse)"
            )
        if parts.password == MASK:
            return cls("postgres", dsn=_unmasked(parts))
        return cls("postgres", dsn=raw)


MASK = "***"


def _unmasked(parts: SplitResult) -> str:
    """A URL whose password was masked (a summary, a flow parameter): the same server, user
    and database in ``FREETIME_WAREHOUSE`` with its password, else the URL without one (the
    password then comes from ``PGPASSWORD``, ``~/.pgpass`` or the dlt secret)."""
    host = parts.netloc.rsplit("@", 1)[-1]
    bare = parts._replace(netloc=f"{parts.username or ''}@{host}").geturl()
    configured = os.environ.get("FREETIME_WAREHOUSE", "").strip()
    if is_postgres_url(configured) and mask_url(configured) == parts.geturl():
        return configured
    return bare


def mask_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: the form to print."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:{MASK}@{parts.netloc.rsplit('@', 1)[-1]}"
    return SplitResult(parts.scheme, netloc, parts.path, parts.query, parts.fragment).geturl()


def resolve_warehouse(value: str | os.PathLike[str] | Warehouse | None = None) -> Warehouse:
    """The warehouse to use: ``value`` (``--warehouse`` or ``--duckdb``), else env
    ``FREETIME_WAREHOUSE``, else ``FREETIME_DUCKDB``, else ``data/freetime.duckdb``.
    ConfigError for a bad URL or a folder."""
    if isinstance(value, Warehouse):
        return value
    if value:
        return Warehouse.parse(value)
    env = os.environ.get("FREETIME_WAREHOUSE", "").strip()
    if env:
        return Warehouse.parse(env)
    return Warehouse("duckdb", path=resolve_duckdb_path(None))


DEFAULT_WRITER_WAIT_S = 3600.0


def resolve_writer_wait(value: float | None = None) -> float:
    """Seconds a writer waits for another writer of the warehouse: ``value`` >
    ``FREETIME_WRITER_WAIT`` > one hour. ConfigError for a value that is not a number >= 0."""
    if value is None:
        raw = os.environ.get("FREETIME_WRITER_WAIT")
        if raw is None or not raw.strip():
            return DEFAULT_WRITER_WAIT_S
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(
                f"FREETIME_WRITER_WAIT must be a number of seconds: {raw!r}"
            ) from None
    if not value >= 0:
        raise ConfigError(f"the writer wait must be a number of seconds >= 0: {value!r}")
    return float(value)


def incoming_dataset(slot: str) -> str:
    """The dataset (on PostgreSQL: the schema) a writer's staging slot loads into before its
    rows are published into :data:`DATASET`."""
    return f"_incoming_{slot}"


def pipelines_dir_for(duckdb_path: Path) -> Path:
    """dlt's working folder (load packages, local state) sits beside the warehouse file."""
    return duckdb_path.parent / ".dlt-pipelines" / duckdb_path.stem


def working_folder(duckdb_path: Path) -> Path:
    """:func:`pipelines_dir_for` the warehouse, created if missing: every writer of the
    warehouse (the load, webhook apply, documents) keeps its dlt packages and state there.

    ConfigError when it cannot be created or written (a read-only folder, a file in its way):
    dlt would otherwise fail with a bare ``OSError`` half way into setting up.
    """
    try:
        duckdb_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the folder {duckdb_path.parent} for the warehouse: "
            f"{exc.strerror or exc}"
        ) from exc
    folder = pipelines_dir_for(duckdb_path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        problem = exc.strerror or str(exc)
    else:
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
        problem = "not writable"
    raise ConfigError(
        f"cannot use {folder} for the working files of loads into {duckdb_path} (dlt's "
        f"packages and state, kept beside the warehouse): {problem}. Give --duckdb (or "
        "FREETIME_DUCKDB) a path in a folder you can write"
    )


@dataclass(frozen=True)
class ApiSettings:
    """How to reach the API. ``api_key`` is never printed: see ``__repr__``.

    ``stall_seconds``: how long the API may accept connections without answering anything
    before a load gives up (the clock restarts on every answer). ``rate_window_seconds``: the
    rolling window in which at most ``rate_limit_per_minute`` requests go (60 s, the API's; a
    shorter one only for a test sandbox started with the same window).
    """

    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    rate_limit_per_minute: float = DEFAULT_RATE_LIMIT_PER_MINUTE
    stall_seconds: float = DEFAULT_STALL_SECONDS
    rate_window_seconds: float = DEFAULT_RATE_WINDOW_SECONDS

    def __repr__(self) -> str:  # the key must never reach logs or Prefect parameters
        key = "set" if self.api_key else "missing"
        return (
            f"ApiSettings(base_url={self.base_url!r}, api_key=<{key}>, "
            f"rate_limit_per_minute={self.rate_limit_per_minute}, "
            f"stall_seconds={self.stall_seconds}, "
            f"rate_window_seconds={self.rate_window_seconds})"
        )

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        api_key: str | None = None,
        rate_limit_per_minute: float | None = None,
        stall_seconds: float | None = None,
    ) -> ApiSettings:
        """Fill each unset value from env, then dlt config, then the default."""
        key = (
            api_key
            or os.environ.get("TERMINAL49_API_KEY")
            or _str_or_none(_dlt_value("sources.terminal49.api_key"))
        )
        url = (
            base_url
            or os.environ.get("TERMINAL49_BASE_URL")
            or _str_or_none(_dlt_value("sources.terminal49.base_url"))
            or DEFAULT_BASE_URL
        )
        rate = resolve_rate_limit(rate_limit_per_minute)
        return cls(
            base_url=_checked_url(url),
            api_key=key,
            rate_limit_per_minute=rate,
            stall_seconds=resolve_stall_seconds(stall_seconds),
            rate_window_seconds=resolve_rate_window(),
        )


def resolve_rate_limit(rate: float | None = None) -> float:
    """Requests per minute: ``rate``, else env ``TERMINAL49_RATE_LIMIT``, else dlt config, else
    the default. ConfigError when it is not a positive number."""
    if rate is None:
        env_rate = os.environ.get("TERMINAL49_RATE_LIMIT")
        cfg_rate = _dlt_value("sources.terminal49.rate_limit_per_minute")
        raw = env_rate if env_rate else cfg_rate
        try:
            rate = float(str(raw)) if raw not in (None, "") else DEFAULT_RATE_LIMIT_PER_MINUTE
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"rate limit must be a number of requests per minute: {raw!r}"
            ) from exc
    if rate <= 0:
        raise ConfigError(f"rate limit must be positive, got {rate}")
    return rate


def resolve_rate_window() -> float:
    """The rate window in seconds: env ``TERMINAL49_RATE_WINDOW_SECONDS``, else the API's 60.
    ConfigError unless a positive number. A test setting: the limit then counts per window."""
    raw = os.environ.get("TERMINAL49_RATE_WINDOW_SECONDS")
    if not raw:
        return DEFAULT_RATE_WINDOW_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"TERMINAL49_RATE_WINDOW_SECONDS must be positive seconds, got {raw!r}")
    return seconds


def resolve_stall_seconds(seconds: float | None = None) -> float:
    """The stall bound: ``seconds``, else env ``TERMINAL49_STALL_SECONDS``, else dlt config
    ``sources.terminal49.stall_seconds``, else the default. ConfigError unless positive."""
    if seconds is None:
        env = os.environ.get("TERMINAL49_STALL_SECONDS")
        raw = env if env else _dlt_value("sources.terminal49.stall_seconds")
        try:
            seconds = float(str(raw)) if raw not in (None, "") else DEFAULT_STALL_SECONDS
        except (TypeError, ValueError):
            raise ConfigError(
                f"TERMINAL49_STALL_SECONDS must be a number of seconds, got {raw!r}"
            ) from None
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"TERMINAL49_STALL_SECONDS must be a positive number, got {seconds}")
    return seconds


def _checked_url(url: str) -> str:
    """The base URL without a trailing slash; ConfigError unless it is an http(s) URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"the API base URL must be an http(s) URL such as {DEFAULT_BASE_URL}, got {url!r} "
            "(TERMINAL49_BASE_URL or --base-url)"
        )
    return url.strip().rstrip("/")


def _str_or_none(value: object | None) -> str | None:
    return str(value) if value not in (None, "") else None
