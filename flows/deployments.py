"""Deployments as declared in the top-level ``prefect.yaml``: the one definition.

``freetime serve`` builds its served deployments from that file (:func:`read_deployments`),
and ``prefect deploy --all`` reads the same file, so the schedules and limits cannot drift
between the two ways of running. Only the fields this project uses are interpreted: name,
description, entrypoint, tags, parameters, schedules (cron, interval or rrule, with timezone,
active, parameters, slug), concurrency_limit, paused. Anything else is refused loudly rather
than silently ignored.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment
    from prefect.flows import Flow
    from prefect.schedules import Schedule

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"

_KNOWN = {
    "name",
    "description",
    "entrypoint",
    "tags",
    "parameters",
    "schedules",
    "schedule",
    "concurrency_limit",
    "paused",
    "work_pool",
    "version",
}
_SCHEDULE_KEYS = {
    "cron",
    "interval",
    "rrule",
    "timezone",
    "active",
    "parameters",
    "slug",
    "anchor_date",
    "day_or",
}


class DeploymentConfigError(Exception):
    """prefect.yaml is missing or declares something this project cannot serve."""


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule entry of a deployment."""

    cron: str | None = None
    interval_seconds: float | None = None
    rrule: str | None = None
    timezone: str | None = None
    active: bool = True
    parameters: dict[str, Any] = field(default_factory=dict)
    slug: str | None = None

    def to_prefect(self) -> Schedule:
        from prefect.schedules import Cron, Interval, RRule

        common: dict[str, Any] = {
            "timezone": self.timezone,
            "active": self.active,
            "parameters": dict(self.parameters),
            "slug": self.slug,
        }
        if self.cron is not None:
            return Cron(self.cron, **common)
        if self.interval_seconds is not None:
            return Interval(dt.timedelta(seconds=self.interval_seconds), **common)
        assert self.rrule is not None
        return RRule(self.rrule, **common)


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment of prefect.yaml, as this project reads it."""

    name: str
    entrypoint: str  # "flows/sync.py:sync"
    description: str | None = None
    tags: tuple[str, ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    schedules: tuple[ScheduleSpec, ...] = ()
    concurrency_limit: int | None = None
    paused: bool | None = None

    def load_flow(self) -> Flow[..., Any]:
        """Import the entrypoint's flow object (``path/to/module.py:attr`` or ``pkg.mod:attr``)."""
        module_part, _, attr = self.entrypoint.partition(":")
        module_name = module_part.removesuffix(".py").replace("/", ".").replace("\\", ".")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise DeploymentConfigError(
                f"deployment {self.name!r}: cannot load entrypoint {self.entrypoint!r}: {exc}"
            ) from exc
        return obj  # type: ignore[no-any-return]

    def to_runner_deployment(self) -> RunnerDeployment:
        """A deployment for ``prefect.serve`` with this spec's schedules and limit.

        Raises DeploymentConfigError when a parameter (of the deployment or of a schedule) is
        not one the flow takes: Prefect would only refuse it when a run starts.
        """
        flow = self.load_flow()
        accepted = set(inspect.signature(flow.fn).parameters)
        given = set(self.parameters).union(*(s.parameters for s in self.schedules))
        if given - accepted:
            raise DeploymentConfigError(
                f"deployment {self.name!r}: {self.entrypoint} takes no parameter "
                f"{sorted(given - accepted)} (it takes {sorted(accepted)})"
            )
        # to_deployment is async-dispatched: called from sync code it returns the deployment.
        deployment = flow.to_deployment(
            name=self.name,
            description=self.description,
            tags=list(self.tags),
            parameters=dict(self.parameters),
            schedules=[s.to_prefect() for s in self.schedules],
            concurrency_limit=self.concurrency_limit,
            paused=self.paused,
        )
        return cast("RunnerDeployment", deployment)


def _schedule(raw: Any, where: str) -> ScheduleSpec:
    if not isinstance(raw, dict):
        raise DeploymentConfigError(f"{where}: a schedule must be a mapping, got {raw!r}")
    unknown = set(raw) - _SCHEDULE_KEYS
    if unknown:
        raise DeploymentConfigError(f"{where}: unsupported schedule keys {sorted(unknown)}")
    kinds = [k for k in ("cron", "interval", "rrule") if raw.get(k) is not None]
    if len(kinds) != 1:
        raise DeploymentConfigError(f"{where}: exactly one of cron, interval or rrule is needed")
    if raw.get("anchor_date") is not None or raw.get("day_or") is not None:
        raise DeploymentConfigError(f"{where}: anchor_date and day_or are not supported here")
    interval = raw.get("interval")
    if interval is not None and not isinstance(interval, int | float):
        raise DeploymentConfigError(f"{where}: interval must be a number of seconds")
    return ScheduleSpec(
        cron=raw.get("cron"),
        interval_seconds=float(interval) if interval is not None else None,
        rrule=raw.get("rrule"),
        timezone=raw.get("timezone"),
        active=bool(raw.get("active", True)),
        parameters=dict(raw.get("parameters") or {}),
        slug=raw.get("slug"),
    )


def _concurrency_limit(raw: Any, where: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, dict):  # {limit: 1, collision_strategy: ...}: only the limit is used
        raw = raw.get("limit")
    if not isinstance(raw, int) or raw < 1:
        raise DeploymentConfigError(f"{where}: concurrency_limit must be a positive integer")
    return raw


def read_deployments(path: Path = PREFECT_YAML) -> list[DeploymentSpec]:
    """The deployments of ``prefect.yaml``; raises DeploymentConfigError on anything odd."""
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise DeploymentConfigError(f"no deployment file at {path}") from exc
    except yaml.YAMLError as exc:
        raise DeploymentConfigError(f"{path} is not valid YAML: {exc}") from exc
    raw_list = (doc or {}).get("deployments") if isinstance(doc, dict) else None
    if not isinstance(raw_list, list) or not raw_list:
        raise DeploymentConfigError(f"{path} declares no deployments")
    specs: list[DeploymentSpec] = []
    for i, raw in enumerate(raw_list):
        if not isinstance(raw, dict) or not raw.get("name") or not raw.get("entrypoint"):
            raise DeploymentConfigError(f"{path}: deployment #{i} needs a name and an entrypoint")
        where = f"{path.name}: deployment {raw['name']!r}"
        unknown = set(raw) - _KNOWN
        if unknown:
            raise DeploymentConfigError(f"{where}: unsupported keys {sorted(unknown)}")
        schedules = list(raw.get("schedules") or [])
        if raw.get("schedule"):
            schedules.append(raw["schedule"])
        specs.append(
            DeploymentSpec(
                name=str(raw["name"]),
                entrypoint=str(raw["entrypoint"]),
                description=raw.get("description"),
                tags=tuple(str(t) for t in raw.get("tags") or ()),
                parameters=dict(raw.get("parameters") or {}),
                schedules=tuple(_schedule(s, where) for s in schedules),
                concurrency_limit=_concurrency_limit(raw.get("concurrency_limit"), where),
                paused=raw.get("paused"),
            )
        )
    return specs
