"""prefect.yaml is valid and is what `freetime serve` serves (schedules, limit, not paused)."""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from flows.deployments import PREFECT_YAML, DeploymentConfigError, read_deployments

REPO = Path(__file__).resolve().parents[1]
# deployment -> (flow, cron, parameters): one `sync` flow, hourly, and nightly with full=True
EXPECTED = {
    "freetime-sync": ("sync", "0 * * * *", {}),
    "freetime-reconcile": ("sync", "30 2 * * *", {"full": True}),
    "freetime-digest": ("digest", "*/15 * * * *", {}),
}


def test_prefect_yaml_passes_prefects_own_validation() -> None:
    import yaml
    from prefect.cli.deploy._models import PrefectYamlModel  # what `prefect deploy` uses

    model = PrefectYamlModel.model_validate(yaml.safe_load(PREFECT_YAML.read_text()))
    assert {d.name for d in model.deployments} == set(EXPECTED)
    assert all(d.concurrency_limit == 1 for d in model.deployments)


def test_deployments_load_with_schedules_and_limit() -> None:
    specs = {s.name: s for s in read_deployments()}
    assert set(specs) == set(EXPECTED)
    for name, (flow_name, cron, parameters) in EXPECTED.items():
        spec = specs[name]
        assert spec.load_flow().name == flow_name and spec.parameters == parameters
        assert [s.cron for s in spec.schedules] == [cron]
        assert spec.concurrency_limit == 1
        deployment = spec.to_runner_deployment()
        assert deployment.name == name and deployment.concurrency_limit == 1
        assert deployment.parameters == parameters
        assert [s.schedule.cron for s in deployment.schedules] == [cron]  # type: ignore[union-attr]
        assert all(s.active for s in deployment.schedules)
        assert not {"api_key", "key"} & set(inspect.signature(spec.load_flow().fn).parameters)


def test_one_setting_makes_the_reconciliation_weekly(tmp_path: Path) -> None:
    nightly = PREFECT_YAML.read_text()
    assert nightly.count('cron: "30 2 * * *"') == 1  # the one setting, in `definitions`
    weekly = tmp_path / "prefect.yaml"
    weekly.write_text(nightly.replace('cron: "30 2 * * *"', 'cron: "30 2 * * 0"'))
    specs = {s.name: s for s in read_deployments(weekly)}
    assert [s.cron for s in specs["freetime-reconcile"].schedules] == ["30 2 * * 0"]
    assert [s.cron for s in specs["freetime-sync"].schedules] == ["0 * * * *"]
    assert [s.timezone for s in specs["freetime-reconcile"].schedules] == ["UTC"]


@pytest.mark.fast
@pytest.mark.parametrize(
    "body, message",
    [
        ("deployments: []", "declares no deployments"),
        ("deployments:\n  - name: x\n", "needs a name and an entrypoint"),
        ("deployments:\n  - {name: x, entrypoint: 'flows/sync.py:sync', foo: 1}", "unsupported"),
        (
            "deployments:\n  - {name: x, entrypoint: 'flows/sync.py:sync', schedules: [{}]}",
            "exactly one of cron",
        ),
        (
            "deployments:\n  - {name: x, entrypoint: 'flows/sync.py:sync', concurrency_limit: 0}",
            "positive integer",
        ),
        ("deployments: [", "not valid YAML"),
    ],
)
def test_bad_deployment_files_are_refused_plainly(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "prefect.yaml"
    path.write_text(body)
    with pytest.raises(DeploymentConfigError, match=message):
        read_deployments(path)


@pytest.mark.fast
@pytest.mark.parametrize(
    "where",
    ["parameters: {fulll: true}", "schedules: [{cron: '0 * * * *', parameters: {base: 1}}]"],
)
def test_a_parameter_the_flow_does_not_take_is_refused(tmp_path: Path, where: str) -> None:
    path = tmp_path / "prefect.yaml"
    path.write_text(f"deployments:\n  - {{name: x, entrypoint: 'flows/sync.py:sync', {where}}}\n")
    (spec,) = read_deployments(path)
    with pytest.raises(DeploymentConfigError, match="takes no parameter"):
        spec.to_runner_deployment()


def _deployments(client: Any) -> dict[str, Any]:
    """The expected deployments that exist, by name (``flow/deployment`` lookups)."""
    from prefect.exceptions import ObjectNotFound

    found = {}
    for name, (flow_name, _, _) in EXPECTED.items():
        with contextlib.suppress(ObjectNotFound):
            found[name] = client.read_deployment_by_name(f"{flow_name}/{name}")
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_freetime_serve_registers_the_deployments_and_stops_cleanly_on_a_signal(
    prefect_harness: None, tmp_path: Path, sig: signal.Signals
) -> None:
    """Served against the session's Prefect server: the deployments are registered with their
    schedules and limit; SIGINT or SIGTERM stops the process promptly (exit 0, no traceback,
    no warning) and leaves every schedule active."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERMINAL49_", "FREETIME_"))}
    env["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    env["PREFECT_HOME"] = str(tmp_path / ".prefect")
    proc = subprocess.Popen(
        [sys.executable, "-m", "freetime_cli.main", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    serving = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            # printed once the runner serves (and its signal handlers are in place)
            if line.startswith("Ctrl+C stops serving"):
                serving.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        while not serving.wait(0.5):
            assert proc.poll() is None, "".join(lines)
        with get_client(sync_client=True) as client:
            found = _deployments(client)
        assert set(found) == set(EXPECTED)
        for name, (_, cron, parameters) in EXPECTED.items():
            d = found[name]
            assert [s.schedule.cron for s in d.schedules] == [cron]
            assert d.parameters == parameters
            assert all(s.active for s in d.schedules) and not d.paused
            limit = d.global_concurrency_limit
            assert limit is not None and limit.limit == 1, d
        proc.send_signal(sig)
        proc.wait(timeout=20)  # promptly: Prefect's own handling could take 30 s or more
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
    err = "".join(lines)
    assert proc.returncode == 0, err
    assert "Prefect UI: " in err and "pause_on_shutdown=False" in err
    assert f"stopped serving ({sig.name}); the schedules stay active" in err
    assert "Traceback" not in err and "Warning" not in err and "never awaited" not in err, err
    with get_client(sync_client=True) as client:
        after = _deployments(client)
    for d in after.values():  # stopping did not pause anything
        assert not d.paused and all(s.active for s in d.schedules)
