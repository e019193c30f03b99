"""JSON:API documents to typed Arrow tables, one call per table, a column at a time.

Contract: every function takes the resource objects of one page (``data`` or ``included``) and
returns a ``pyarrow.Table`` whose known columns have the types declared in :mod:`.settings`;
attributes not declared there are kept as extra columns (scalars by their values' type,
objects and arrays as JSON text), so nothing the API sends is dropped. Timestamps are UTC
``timestamp[us, tz=UTC]``; LFDs are ``date32`` local calendar dates (see :func:`_lfd_dates`).
A value that does not read as its column's type is kept as text in ``<column>__raw`` (NULL in
the column) rather than lost, and never fails a load.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import re
import zoneinfo
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from dlt.common.normalizers.naming import snake_case

from pipelines.terminal49 import settings

Resource = Mapping[str, Any]

_RESERVED = {"id", "type", "fetched_at"}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # what orjson cannot write (an integer beyond 64 bits): the stdlib can
        return json.dumps(value, separators=(",", ":"), default=str)


#: What a conversion to a declared type raises on a value it cannot take (an integer too large
#: for int64 raises OverflowError).
_UNCONVERTIBLE = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError)


def _fractional(values: Iterable[Any]) -> bool:
    """Whether a value has a fractional part: pyarrow would truncate it into an integer column
    (``pa.array([40.5], pa.int64())`` gives 40), so such a column takes the ``__raw`` path."""
    return any(isinstance(v, float) and not v.is_integer() for v in values)


def _typed_array(name: str, values: list[Any], kind: pa.DataType | str) -> dict[str, pa.Array]:
    """One column, plus ``<name>__raw`` when some values do not read as ``kind``."""
    if kind == settings.JSON:
        return {name: pa.array([_json_text(v) for v in values], pa.string())}
    assert isinstance(kind, pa.DataType)
    if pa.types.is_timestamp(kind):
        try:
            text = pa.array(values, pa.string())
        except _UNCONVERTIBLE:
            return _timestamps_one_by_one(name, values, kind)
        return _timestamp_column(name, text, kind)
    lossy = pa.types.is_integer(kind) and _fractional(values)
    if not lossy:
        try:
            return {name: pa.array(values, kind)}
        except _UNCONVERTIBLE:
            pass
    if not lossy and (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        # Production sends some numbers as strings (port latitude "32.83"): parse them.
        try:
            as_text = [_text(v) for v in values]
            return {name: pa.array(as_text, pa.string()).cast(kind)}
        except _UNCONVERTIBLE:
            pass
    return _values_one_by_one(name, values, kind)


def _one_value(v: Any, kind: pa.DataType) -> Any:
    """``v`` as ``kind`` (a Python value), or raise ValueError if it cannot be read losslessly."""
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind)
    if pa.types.is_integer(kind) and _fractional([v]):
        raise ValueError("fractional")
    try:
        return pa.array([v], kind)[0].as_py()
    except _UNCONVERTIBLE:
        if not (numeric and isinstance(v, str)):
            raise ValueError("unconvertible") from None
    try:  # a number sent as text
        return pa.array([v], pa.string()).cast(kind)[0].as_py()
    except _UNCONVERTIBLE:
        raise ValueError("unparseable") from None


def _values_one_by_one(name: str, values: list[Any], kind: pa.DataType) -> dict[str, pa.Array]:
    """The column value by value: what reads as ``kind`` lands typed; any other value is kept
    as text in ``<name>__raw`` (NULL in the typed column) rather than lost or truncated."""
    return _one_by_one(name, values, kind, lambda _, v: _one_value(v, kind), _json_text)


def _one_by_one(
    name: str,
    values: list[Any],
    kind: pa.DataType,
    read: Callable[[int, Any], Any],
    as_text: Callable[[Any], str | None],
) -> dict[str, pa.Array]:
    """``read(i, value)`` of each value that is not NULL (ValueError: it cannot be); the column,
    plus ``<name>__raw`` with ``as_text`` of the values that could not be read when there are
    any."""
    typed: list[Any] = [None] * len(values)
    raw: list[str | None] = [None] * len(values)
    for i, v in enumerate(values):
        if v is None:  # NULL reads as NULL; in most columns most values are
            continue
        try:
            typed[i] = read(i, v)
        except ValueError:
            raw[i] = as_text(v)
    cols = {name: pa.array(typed, kind)}
    if any(r is not None for r in raw):
        cols[f"{name}__raw"] = pa.array(raw, pa.string())
    return cols


def _instant(v: Any) -> dt.datetime | None:
    """An ISO 8601 instant with its offset (ValueError otherwise); empty stays NULL."""
    ts = dt.datetime.fromisoformat(str(v).replace("Z", "+00:00")) if v else None
    if ts is not None and ts.tzinfo is None:
        raise ValueError("no zone")
    return ts


def _timestamps_one_by_one(name: str, values: list[Any], kind: pa.DataType) -> dict[str, pa.Array]:
    return _one_by_one(name, values, kind, lambda _, v: _instant(v), _text)


def _infer_array(values: list[Any]) -> pa.Array | None:
    """An attribute we do not know: scalars keep their type, structures become JSON text."""
    if all(v is None for v in values):
        return None  # nothing to type it by yet; it lands once a value appears
    if any(isinstance(v, dict | list) for v in values):
        return pa.array([_json_text(v) for v in values], pa.string())
    try:
        return pa.array(values)
    except _UNCONVERTIBLE:
        return pa.array([_text(v) for v in values], pa.string())


#: Reads the values of one declared column into its column(s) (see :func:`_known_columns`).
Reader: TypeAlias = Callable[[list[Any]], dict[str, pa.Array]]


def _known_columns(
    attrs: Sequence[Mapping[str, Any]],
    known: Mapping[str, pa.DataType | str],
    readers: Mapping[str, Reader] | None = None,
) -> dict[str, pa.Array]:
    """The declared columns, in declaration order, each with its ``__raw`` column if it has
    one: by ``readers[name]`` when there is one, else by :func:`_typed_array`."""
    cols: dict[str, pa.Array] = {}
    for name, kind in known.items():
        values = [a.get(name) for a in attrs]
        read = (readers or {}).get(name)
        cols.update(read(values) if read is not None else _typed_array(name, values, kind))
    return cols


def _timestamp_column(name: str, text: pa.Array, kind: pa.DataType) -> dict[str, pa.Array]:
    """Text column ``name`` as ``kind``; if a value does not parse, the column value by value
    (:func:`_timestamps_one_by_one`: NULL there, its text in ``<name>__raw``)."""
    try:
        return {name: text.cast(kind)}
    except _UNCONVERTIBLE:
        return _timestamps_one_by_one(name, text.to_pylist(), kind)


def attribute_columns(
    records: Sequence[Resource],
    known: Mapping[str, pa.DataType | str],
    skip: Iterable[str] = (),
    derived: Iterable[str] = (),
    readers: Mapping[str, Reader] | None = None,
) -> dict[str, pa.Array]:
    """The declared attributes (see :func:`_known_columns`), then the others, except those in
    ``skip``. ``derived``: the columns the caller adds to the table (relationship ids and the
    like), which an undeclared attribute must not take."""
    attrs = [_attributes(r) for r in records]
    cols = _known_columns(attrs, known, readers)
    handled = set(known) | set(skip)
    cols.update(_extra_columns(attrs, handled, [*handled, *derived, *cols]))
    return cols


def _attributes(record: Resource) -> Mapping[str, Any]:
    return _object(record.get("attributes"))


def _object(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a missing or odd sub-object)."""
    return value if isinstance(value, dict) else {}


def _extra_columns(
    dicts: Sequence[Mapping[str, Any]], handled: Collection[str], taken: Iterable[str]
) -> dict[str, pa.Array]:
    """The keys of ``dicts`` not in ``handled``, as columns typed by their values, in first-seen
    order (so columns come out in a stable order) and named apart from ``taken``
    (:func:`_column_names`); a key that is NULL everywhere waits for a value."""
    extra = {k: None for d in dicts for k in d if k not in handled}
    arrays = {k: _infer_array([d.get(k) for d in dicts]) for k in extra}
    names = _column_names([k for k, arr in arrays.items() if arr is not None], taken)
    return {names[k]: arr for k, arr in arrays.items() if arr is not None}


_NAMING = snake_case.NamingConvention()


@functools.lru_cache(maxsize=4096)
def _normalized(name: str) -> str:
    """The column name dlt makes of ``name`` (its default naming: snake_case, lower case)."""
    return _NAMING.normalize_identifier(name)


def _column_names(keys: Sequence[str], taken: Iterable[str]) -> dict[str, str]:
    """A column name for each undeclared attribute that no other column has once dlt has
    normalised it: "Number" would become a second ``number``, and dlt fails the whole load on
    such a collision. Such an attribute gets the ``attr_`` prefix (and a number if needed), as
    ``id`` and ``type`` always do; attributes already in dlt's form keep their names first, so
    the names do not depend on the order the API sends them in."""
    used = {_normalized(n) for n in (*taken, *_RESERVED)}
    out: dict[str, str] = {}
    for key in sorted(keys, key=lambda k: (_normalized(k) != k, k)):
        name, tries = key, 0
        while _normalized(name) in used:
            tries += 1
            name = settings.RESERVED_PREFIX + key + (f"_{tries}" if tries > 1 else "")
        used.add(_normalized(name))
        out[key] = name
    return out


def resource_columns(
    records: Sequence[Resource],
    known: Mapping[str, pa.DataType | str],
    relationships: Sequence[str],
    derived: Iterable[str] = (),
) -> dict[str, pa.Array]:
    """The attributes (:func:`attribute_columns`), then ``<name>_id`` per relationship
    (:func:`relationship_ids`). No undeclared attribute takes a relationship id's name, nor one
    of ``derived``: the columns the caller adds after these."""
    cols = attribute_columns(
        records, known, derived=(*(f"{r}_id" for r in relationships), *derived)
    )
    cols.update(relationship_ids(records, relationships))
    return cols


def relationship_ids(records: Sequence[Resource], names: Iterable[str]) -> dict[str, pa.Array]:
    """``<name>_id`` per relationship: the related id of a to-one relationship, else NULL."""
    ids: dict[str, list[str | None]] = {name: [] for name in names}
    for r in records:  # one pass over the records, every relationship at once
        rels = r.get("relationships") or {}
        for name, out in ids.items():
            data = (rels.get(name) or {}).get("data")
            # JSON:API ids are strings; an integer id still lands (as text) instead of failing
            out.append(_text(data.get("id")) if isinstance(data, dict) else None)
    return {f"{name}_id": pa.array(out, pa.string()) for name, out in ids.items()}


#: One instant for every record, or one per record (a timestamp array, see ``settings.TS``).
Fetched: TypeAlias = "dt.datetime | pa.Array"
#: Columns :func:`_child_table` writes besides the items' fields.
_CHILD_OWN = ("_deleted", "fetched_at")


def _instants(fetched_at: Fetched, records_of_rows: Sequence[int]) -> pa.Array:
    """The ``fetched_at`` column of rows that belong to records ``records_of_rows``."""
    if isinstance(fetched_at, dt.datetime):
        return pa.repeat(pa.scalar(fetched_at, settings.TS), len(records_of_rows))
    return fetched_at.take(pa.array(records_of_rows, pa.int64()))


def resource_table(
    records: Sequence[Resource], cols: dict[str, pa.Array], fetched_at: dt.datetime
) -> pa.Table:
    """The table of ``records``: ``id`` (never NULL) and ``type``, then ``cols`` (from
    :func:`resource_columns`, say), then ``fetched_at``."""
    n = len(records)
    base = {
        "id": pa.array([str(r["id"]) for r in records], pa.string()),
        "type": pa.array([_text(r.get("type")) for r in records], pa.string()),
    }
    base.update(cols)
    base["fetched_at"] = _instants(fetched_at, range(n))
    fields = [pa.field("id", pa.string(), nullable=False)]
    fields += [pa.field(k, v.type) for k, v in base.items() if k != "id"]
    return pa.Table.from_arrays(list(base.values()), schema=pa.schema(fields))


_BARE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _local_date(value: Any, zone: dt.tzinfo | None) -> dt.date | None:
    """An LFD as the calendar date it names (ValueError if it names none); empty stays NULL.

    A bare date (``2026-09-24``) is that day, whatever the zone: read through UTC midnight it
    would slip a day west of UTC. An instant (``2025-11-05T05:00:00Z``: local midnight in UTC)
    is its date in ``zone``; with no zone (``None``: an unknown zone name) it names none."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError("not text")
    if _BARE_DATE.fullmatch(value):
        return dt.date.fromisoformat(value)
    instant = _instant(value)
    if instant is None or zone is None:
        raise ValueError("no zone to read the instant in")
    try:
        return instant.astimezone(zone).date()
    except OverflowError:  # an instant at the very edge of the calendar
        raise ValueError("out of range") from None


@functools.cache
def _zone(name: str) -> dt.tzinfo | None:
    """The IANA zone ``name``, None if there is no such zone."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):  # ValueError: not a zone key at all
        return None


def _record_zone(attrs: Mapping[str, Any], names: Sequence[str]) -> dt.tzinfo | None:
    """The zone of the first attribute of ``names`` that is set (UTC when none is; None when
    that one names no zone)."""
    for name in names:
        value = attrs.get(name)
        if value is not None:
            return _zone(value) if isinstance(value, str) else None
    return dt.UTC


def _lfd_dates(
    name: str, values: list[Any], attrs: Sequence[Mapping[str, Any]], zone_names: Sequence[str]
) -> dict[str, pa.Array]:
    """LFD column ``name`` as dates (:func:`_local_date` of each value, an instant in the zone
    its record names by ``zone_names``); a value that names no date is NULL there and kept
    in ``<name>__raw``."""

    def read(i: int, value: Any) -> dt.date | None:
        return _local_date(value, _record_zone(attrs[i], zone_names))

    return _one_by_one(name, values, settings.DATE, read, _wire_text)


def _wire_text(value: Any) -> str | None:
    """A value as sent: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else _json_text(value)


def _lfd_attribute(name: str, attrs: Sequence[Mapping[str, Any]]) -> Reader:
    """Reads LFD attribute ``name``: its date column, then ``<name>_wire`` (text as sent)."""

    def read(values: list[Any]) -> dict[str, pa.Array]:
        cols = _lfd_dates(name, values, attrs, settings.LFD_ATTRIBUTES[name])
        wire = [_wire_text(v) for v in values]
        cols[name + settings.WIRE_SUFFIX] = pa.array(wire, pa.string())
        return cols

    return read


def _import_deadlines(attrs: Sequence[Mapping[str, Any]]) -> Reader:
    """Reads ``import_deadlines``: the object whole (JSON), its LFDs (``settings.IMPORT_DEADLINES``)
    and its ``pod`` object (``settings.POD_DEADLINES``, after ``has_pod_deadlines``)."""

    def read(values: list[Any]) -> dict[str, pa.Array]:
        cols = _typed_array("import_deadlines", values, settings.JSON)
        deadlines = [_object(v) for v in values]
        for name, zone_names in settings.IMPORT_DEADLINES.items():
            cols.update(_lfd_dates(name, [d.get(name) for d in deadlines], attrs, zone_names))
        pods = [d.get("pod") for d in deadlines]
        cols[settings.HAS_POD_DEADLINES] = pa.array([isinstance(p, dict) for p in pods], pa.bool_())
        with_pod = [i for i, p in enumerate(pods) if isinstance(p, dict)]
        for name, (part, field, kind) in settings.POD_DEADLINES.items():
            pod_values: list[Any] = [None] * len(pods)
            for i in with_pod:  # most containers have no pod object yet
                pod_values[i] = _object(_object(pods[i]).get(part)).get(field)
            if kind == settings.DATE:
                cols.update(_lfd_dates(name, pod_values, attrs, settings.POD_ZONE))
            else:
                cols.update(_typed_array(name, pod_values, kind))
        return cols

    return read


#: The columns :func:`containers_table` makes of attributes besides their own.
_CONTAINER_DERIVED = (
    *(name + settings.WIRE_SUFFIX for name in settings.LFD_ATTRIBUTES),
    *settings.IMPORT_DEADLINES,
    settings.HAS_POD_DEADLINES,
    *settings.POD_DEADLINES,
    *(f"{a}_known" for a in settings.CONTAINER_CHILD_ARRAYS),
    *(f"{r}_id" for r in settings.CONTAINER_RELATIONSHIPS),
)


def containers_table(records: Sequence[Resource], fetched_at: dt.datetime) -> pa.Table:
    """One row per container: attributes, each LFD as its local date (with its wire value),
    ``import_deadlines`` whole and split (``pod`` included), relationship ids."""
    attrs = [_attributes(r) for r in records]
    readers = {name: _lfd_attribute(name, attrs) for name in settings.LFD_ATTRIBUTES}
    readers["import_deadlines"] = _import_deadlines(attrs)
    cols = attribute_columns(
        records,
        settings.CONTAINER_ATTRIBUTES,
        skip=settings.CONTAINER_CHILD_ARRAYS,
        derived=_CONTAINER_DERIVED,
        readers=readers,
    )
    for array_name in settings.CONTAINER_CHILD_ARRAYS:
        cols[f"{array_name}_known"] = pa.array(
            [a.get(array_name) is not None for a in attrs], pa.bool_()
        )
    cols.update(relationship_ids(records, settings.CONTAINER_RELATIONSHIPS))
    return resource_table(records, cols, fetched_at)


def _child_table(
    records: Sequence[Resource],
    array_name: str,
    columns: Sequence[str],
    types: Mapping[str, pa.DataType],
    fetched_at: Fetched,
) -> pa.Table:
    """Rows of an array attribute keyed by (container_id, position in the array).

    Items are kept as the API sends them, repeats included (two ``other`` holds may differ only
    in their description). A container whose array is empty or null gets one tombstone row
    (``_deleted`` true, position -1) so that the merge, which replaces all rows of every
    container it sees, removes its previous rows: a hold that clears upstream disappears here.
    Every row carries its container's ``fetched_at`` (one instant, or one per record), so that
    a load holding two fetches of a container keeps the rows of the newest only.
    """
    owners: list[str] = []
    records_of_rows: list[int] = []
    positions: list[int] = []
    kept: list[Mapping[str, Any]] = []  # the items, and {} for a tombstone
    for n, r in enumerate(records):
        items = [
            i for i in (r.get("attributes") or {}).get(array_name) or [] if isinstance(i, dict)
        ]
        for position, item in enumerate(items or [{}]):
            owners.append(str(r["id"]))
            records_of_rows.append(n)
            positions.append(position if items else -1)
            kept.append(item)
    cols: dict[str, pa.Array] = {
        "container_id": pa.array(owners, pa.string()),
        "position": pa.array(positions, pa.int64()),
    }
    # As for the parent tables: a number sent as text is parsed, and any other odd value lands
    # as text in <column>__raw, so the column keeps its type on every page (an amount of "12.50"
    # once turned the page's column into JSON text, which failed the whole load).
    for c in columns:
        cols.update(_typed_array(c, [i.get(c) for i in kept], types.get(c, pa.string())))
    # a field the API adds to the items lands as a column too, typed by its values
    cols.update(_extra_columns(kept, set(columns), [*cols, *columns, *_CHILD_OWN]))
    cols["_deleted"] = pa.array([p < 0 for p in positions], pa.bool_())
    cols["fetched_at"] = _instants(fetched_at, records_of_rows)
    fields = [
        pa.field(k, v.type, nullable=k not in ("container_id", "position", "fetched_at"))
        for k, v in cols.items()
    ]
    return pa.Table.from_arrays(list(cols.values()), schema=pa.schema(fields))


def holds_table(records: Sequence[Resource], fetched_at: Fetched) -> pa.Table:
    """``holds_at_pod_terminal`` as rows (container_id, position, name, status, description,
    fetched_at)."""
    return _child_table(records, "holds_at_pod_terminal", settings.HOLD_COLUMNS, {}, fetched_at)


def fees_table(records: Sequence[Resource], fetched_at: Fetched) -> pa.Table:
    """``fees_at_pod_terminal`` as rows (container_id, position, type, amount, currency_code,
    fetched_at)."""
    return _child_table(
        records,
        "fees_at_pod_terminal",
        settings.FEE_COLUMNS,
        {"amount": pa.float64()},
        fetched_at,
    )


def shipments_table(records: Sequence[Resource], fetched_at: dt.datetime) -> pa.Table:
    """One row per shipment: attributes and relationship ids (``<relationship>_id``)."""
    cols = resource_columns(
        records,
        settings.SHIPMENT_ATTRIBUTES,
        settings.SHIPMENT_RELATIONSHIPS,
        derived=["destination_type"],
    )
    cols["destination_type"] = pa.array(
        [
            (((r.get("relationships") or {}).get("destination") or {}).get("data") or {}).get(
                "type"
            )
            for r in records
        ],
        pa.string(),
    )
    return resource_table(records, cols, fetched_at)


def terminals_table(records: Sequence[Resource], fetched_at: dt.datetime) -> pa.Table:
    """Terminals and rail terminals from ``included``, with their port id."""
    cols = resource_columns(records, settings.TERMINAL_ATTRIBUTES, settings.TERMINAL_RELATIONSHIPS)
    return resource_table(records, cols, fetched_at)


def ports_table(records: Sequence[Resource], fetched_at: dt.datetime) -> pa.Table:
    """Ports and metro areas from ``included``."""
    cols = attribute_columns(records, settings.PORT_ATTRIBUTES)
    return resource_table(records, cols, fetched_at)


#: DuckDB column types the warehouse may hold, as the Arrow types a page's columns arrive in.
DUCKDB_TYPES: dict[str, pa.DataType] = {
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
    "VARCHAR": pa.string(),
    "JSON": pa.string(),
    "TIMESTAMP WITH TIME ZONE": settings.TS,
}


class ColumnTypes:
    """The type each undeclared column of each table already has: in the warehouse, or from the
    first page of this load that carried it. :meth:`conform` makes every later page agree.

    Undeclared attributes are typed by their values, so a new attribute that arrives as 12 and
    later as "A7" would give a BIGINT column and then a page it cannot store: the load would
    fail on every run from then on. Conformed, "A7" lands in ``<column>__raw`` instead.
    The columns ``settings.DECLARED_COLUMNS`` declares keep their declared type, whatever the
    warehouse has (the write migrates an older warehouse's column to it).
    """

    def __init__(
        self,
        known: Mapping[str, Mapping[str, pa.DataType]] | None = None,
        declared: Mapping[str, Collection[str]] = settings.DECLARED_COLUMNS,
    ) -> None:
        self._types = {table: dict(cols) for table, cols in (known or {}).items()}
        self._declared = declared

    @classmethod
    def from_duckdb(cls, rows: Iterable[tuple[str, str, str]]) -> ColumnTypes:
        """From ``(table_name, column_name, data_type)`` rows of ``duckdb_columns()``."""
        known: dict[str, dict[str, pa.DataType]] = {}
        for table, column, duck in rows:
            if duck in DUCKDB_TYPES:
                known.setdefault(table, {})[column] = DUCKDB_TYPES[duck]
        return cls(known)

    def conform(self, table_name: str, page: pa.Table) -> pa.Table:
        """``page`` with each undeclared column in the type the table already has for it (values
        that do not read as that type go to ``<column>__raw``); columns seen first are
        remembered. Declared columns are left as they are."""
        types = self._types.setdefault(table_name, {})
        declared = self._declared.get(table_name, ())
        for name in list(page.column_names):
            if name in declared:
                continue
            column = page.column(name)
            kind = types.get(name)
            if kind is None:
                if not pa.types.is_null(column.type):
                    types[name] = column.type
                continue
            if column.type == kind:
                continue
            page = _replace_column(page, name, _conformed(name, column, kind))
        return page


def _conformed(name: str, column: pa.ChunkedArray, kind: pa.DataType) -> dict[str, pa.Array]:
    if pa.types.is_null(column.type):
        return {name: pa.nulls(len(column), kind)}
    if pa.types.is_string(kind) and not pa.types.is_nested(column.type):
        with contextlib.suppress(*_UNCONVERTIBLE):  # numbers and booleans read as text
            return {name: column.cast(kind).combine_chunks()}
    return _typed_array(name, column.to_pylist(), kind)


def _replace_column(page: pa.Table, name: str, cols: dict[str, pa.Array]) -> pa.Table:
    """``page`` with column ``name`` replaced, and its ``__raw`` values added to any there."""
    page = page.set_column(page.schema.get_field_index(name), name, cols[name])
    raw = cols.get(f"{name}__raw")
    if raw is None:
        return page
    at = page.schema.get_field_index(f"{name}__raw")
    if at < 0:
        return page.append_column(f"{name}__raw", raw)
    merged = pc.coalesce(page.column(at).cast(pa.string()), raw)
    return page.set_column(at, f"{name}__raw", merged)


def of_types(
    resources: Iterable[Resource],
    types: Iterable[str],
    seen: set[tuple[str, str]] | None = None,
) -> list[Resource]:
    """The resources whose ``type`` is one of ``types``, first occurrence of each id kept.

    ``seen`` carries (type, id) pairs across calls; it is updated with what is returned.
    """
    wanted = set(types)
    seen = set() if seen is None else seen
    out: list[Resource] = []
    for r in resources:
        t = r.get("type")
        if t in wanted and r.get("id") is not None:
            k = (t, str(r["id"]))
            if k not in seen:
                seen.add(k)
                out.append(r)
    return out
