"""Shared fixtures. Vendor reference data the tests use is copied into ``tests/fixtures``.

Test tiers (markers, registered in pyproject.toml). ``uv run pytest -m fast`` is the quick loop
(under a minute); ``python3 quickstart.py test`` runs everything, tiers included. Both run on
pytest-xdist workers (``-n auto --dist loadgroup`` in pyproject; ``-n 0`` for one process): see
:func:`pytest_xdist_auto_num_workers` and :func:`_xdist_group`.

- ``fast``: pure logic. No server process, no subprocess, no Prefect; an in-process
  ``loopback`` server, a DuckDB file under ``tmp_path`` and an in-process dlt load are fine.
  Mark a test ``@pytest.mark.fast``, a whole module ``pytestmark = pytest.mark.fast``. A fast
  test that starts a process (the sandbox, the CLI, a browser) fails, saying so.
- ``sandbox``: starts the sandbox server (set here for the fixtures in
  :data:`SERVER_FIXTURES`; mark tests that start a ``SandboxThread`` or ``SandboxProcess``
  themselves).
- ``prefect``: runs flows on the one Prefect test server (set here for ``prefect_harness``).
- ``browser``: opens a page in headless chromium. ``postgres``: needs a PostgreSQL server.
- Everything else (CLI subprocesses, the tool server process, notebooks) carries no marker
  and runs with the whole suite: ``-m "not fast"`` selects it with the slow tiers.

Share what tests only read: a session- or module-scoped sandbox or warehouse
(``published_warehouse``, ``sb``) instead of a new one per test, and ``prefect_harness``, never a
second Prefect server.

This conftest also keeps the suite self-contained: an audit hook records every file the test
process opens or lists in a folder that sat beside the repository when the session started
(a sibling folder of reference data, say), and the test, collector or session that did it
fails, naming the file. A plain clone with nothing beside it must collect and pass.
"""

from __future__ import annotations

import fcntl
import gc
import json
import logging
import os
import pickle
import site
import sys
import tempfile
import threading
from collections.abc import Callable, Generator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from xdist.scheduler import LoadGroupScheduling

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
T49 = FIXTURES / "terminal49"
T = TypeVar("T")


def reference_json(relative: str) -> Any:
    """A JSON fixture under ``tests/fixtures/terminal49`` (e.g. ``responses/....json``)."""
    return json.loads((T49 / relative).read_text())


# ---- the repository reads only itself ---------------------------------------------------------
class OutsideReads:
    """Paths opened or listed in a sibling folder of the repository (``REPO.parent / name``).

    Siblings are the entries beside the repository when the session starts, less dot-folders
    (``~/.cache`` when the clone sits in a home folder) and the folders that hold Python itself
    or the temporary files (the clone may sit in ``/tmp`` or beside a virtualenv). Paths are
    compared as written (made absolute, not resolved), so a virtualenv whose files link to a
    cache elsewhere does not count. Nothing is recorded for a clone at the filesystem's root
    or directly in the temporary folder (its siblings are other programs' temporary files,
    pytest's own among them).
    """

    EVENTS = frozenset({"open", "os.listdir", "os.scandir"})

    def __init__(self, repo: Path) -> None:
        self.outside = str(repo.parent)
        self.lock = threading.Lock()
        self.pending: list[str] = []
        names: set[str] = set()
        in_temp = os.path.abspath(tempfile.gettempdir()) == os.path.abspath(self.outside)
        if repo.parent != repo.parent.parent and not in_temp:
            names = {n for n in os.listdir(self.outside) if not n.startswith(".")} - {repo.name}
        self.siblings = frozenset(names)
        for root in (
            sys.prefix,
            sys.base_prefix,
            sys.exec_prefix,
            tempfile.gettempdir(),
            site.getusersitepackages(),
            *site.getsitepackages(),
        ):
            self.exempt(root)

    def exempt(self, root: str | Path) -> None:
        """Stop recording in the sibling that holds ``root``."""
        self.siblings = self.siblings - {self._sibling(os.path.abspath(root))}

    def _sibling(self, path: str) -> str:
        return os.path.relpath(path, self.outside).split(os.sep)[0]

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in self.EVENTS or not args or args[0] is None or isinstance(args[0], int):
            return
        try:
            path = os.path.abspath(os.fsdecode(args[0]))
        except (TypeError, ValueError):
            return
        if self._sibling(path) in self.siblings:
            with self.lock:
                self.pending.append(path)

    def take(self) -> list[str]:
        """The paths recorded since the last call, each once, in order."""
        with self.lock:
            out, self.pending = self.pending, []
        return list(dict.fromkeys(out))


_READS: OutsideReads | None = None


def _message(paths: list[str]) -> str:
    return "opened outside the repository (copy it into tests/fixtures): " + ", ".join(paths)


class ProcessStarts:
    """Processes started while a ``fast`` test runs (its setup included)."""

    EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.posix_spawn", "os.exec", "os.system"})

    def __init__(self) -> None:
        self.watching = False
        self.started: list[str] = []

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.watching and event in self.EVENTS:
            what = args[1] if event == "subprocess.Popen" and len(args) > 1 else args[:1]
            self.started.append(f"{event} {what!r}"[:200])


_STARTS = ProcessStarts()
#: Fixtures that start a server (a process or a thread), and the tier marker each implies.
SERVER_FIXTURES = {
    "prefect_harness": "prefect",
    "sb": "sandbox",
    "http": "sandbox",
    "truth": "sandbox",
    "published_warehouse": "sandbox",
    "walked": "sandbox",  # tests/history_walk.py
    "sandbox": "sandbox",
}
SLOW_TIERS = frozenset({"sandbox", "prefect", "browser", "postgres"})


def share_bytecode() -> Path | None:
    """With ``PYTHONDONTWRITEBYTECODE`` set (as in many containers), let this process and every
    process it starts (xdist workers, sandboxes, CLI commands: hundreds a run) keep compiled
    bytecode in one folder of the temporary directory (``PYTHONPYCACHEPREFIX``), never in the
    source tree or the virtualenv. Without it each process compiles its ~1,000 modules from
    source again: some 1.5 CPU-seconds a process. A ``PYTHONPYCACHEPREFIX`` already set is
    kept. Returns the folder, or None when bytecode is written as usual (or the folder is not
    this user's)."""
    if not (os.environ.get("PYTHONDONTWRITEBYTECODE") or sys.dont_write_bytecode):
        return None
    chosen = os.environ.get("PYTHONPYCACHEPREFIX")
    folder = Path(chosen or Path(tempfile.gettempdir()) / f"freetime-pycache-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_uid != os.getuid():  # another user's: its files are not trusted
            return None
    except OSError:
        return None
    os.environ["PYTHONPYCACHEPREFIX"] = str(folder)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = str(folder)  # this process's later imports (the test modules)
    sys.dont_write_bytecode = False
    return folder


def bytecode_env() -> dict[str, str]:
    """The variables a subprocess given a bare environment needs to use the compiled modules
    :func:`share_bytecode` keeps (else it compiles every module it imports again)."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    return {"PYTHONPYCACHEPREFIX": prefix} if prefix else {"PYTHONDONTWRITEBYTECODE": "1"}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """The one audit hook: passes the guards' events on. Python calls every hook on every
    audited event, millions in a worker (each ``id()`` call is one), so it is a plain
    function that returns at once on the others."""
    if event in OutsideReads.EVENTS:
        if _READS is not None:
            _READS.audit(event, args)
    elif event in ProcessStarts.EVENTS:
        _STARTS.audit(event, args)


def pytest_configure(config: pytest.Config) -> None:
    global _READS
    share_bytecode()
    if _READS is None:  # audit hooks cannot be removed: one per process
        _READS = OutsideReads(REPO)
        sys.addaudithook(_audit)
        if os.environ.get("PYTHONPYCACHEPREFIX"):  # compiled modules, not data (a clone in /tmp)
            _READS.exempt(os.environ["PYTHONPYCACHEPREFIX"])


#: xdist workers for ``-n auto`` (pyproject's addopts): many slow tests wait on a sandbox's
#: pace, a subprocess or a server starting, so more workers than cores keep the cores busy
#: (on 2 cores, 5 did a little better than 4 or 6: benchmarks/README.md).
WORKERS = 5


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: env ``PYTEST_XDIST_AUTO_NUM_WORKERS`` if set; one per core for ``-m fast``
    (pure computation: a worker per core is all it can use); else :data:`WORKERS`."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    if config.getoption("markexpr", "") == "fast":
        return os.cpu_count() or 1
    return WORKERS


#: Fixture scopes shared by the tests of one module (or class): such tests run on one worker.
SHARED_SCOPES = frozenset({"module", "class", "package"})


#: Session fixtures whose tests all run on one worker (a group of that name), so that one
#: instance serves them all: a Prefect test server costs some 15 s of CPU to start.
ONE_WORKER_FIXTURES = ("prefect_harness",)


def _xdist_group(item: pytest.Item) -> str | None:
    """The group of ``item``: the fixture's name for a fixture in :data:`ONE_WORKER_FIXTURES`;
    the module's path when it uses a module- (or class-) scoped fixture; else None.

    Under ``--dist loadgroup`` (``quickstart.py test``) the tests of a group run on one worker
    and share the fixture's one instance (a sandbox, a loaded warehouse, the Prefect server);
    every other test goes to whichever worker is free. Other session fixtures are built once
    per worker that needs them.
    """
    for name in ONE_WORKER_FIXTURES:
        if name in getattr(item, "fixturenames", ()):
            return name
    info = getattr(item, "_fixtureinfo", None)
    defs = getattr(info, "name2fixturedefs", {})
    if any(d.scope in SHARED_SCOPES for ds in defs.values() for d in ds):
        return item.nodeid.split("::")[0]
    return None


#: Seconds each slow test took (setup, call and teardown) in a recent whole run, for
#: :class:`LongestFirst`; refresh it with ``pytest --store-durations`` (tests under a second
#: are left out: an unknown test counts :data:`UNKNOWN_SECONDS`).
DURATIONS = REPO / "tests" / "durations.json"
UNKNOWN_SECONDS = 0.5


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write each test's seconds (those over one) to tests/durations.json at the end",
    )


def _expected_seconds() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _test_id(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` suffix xdist adds to a grouped test's id."""
    return nodeid.split("@")[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


class LongestFirst(LoadGroupScheduling):  # type: ignore[misc]
    """xdist's loadgroup with the work units (a group, or one ungrouped test) handed out
    longest first by :data:`DURATIONS`, and a worker given its next unit only when it is
    down to the test it holds (xdist's own keeps up to three queued): a long test then never
    waits behind another on a busy worker while the others sit idle at the end."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.seconds = _expected_seconds()
        self.ordered = False

    def _cost(self, unit: dict[str, bool]) -> float:
        return sum(self.seconds.get(_test_id(n), UNKNOWN_SECONDS) for n in unit)

    def _assign_work_unit(self, node: Any) -> None:
        if not self.ordered:  # the queue is complete when the first unit is handed out
            units = sorted(self.workqueue.items(), key=lambda kv: -self._cost(kv[1]))
            self.workqueue.clear()
            self.workqueue.update(units)
            self.ordered = True
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        # A worker runs a test only once it knows the next one (for fixture teardown): with
        # one pending it waits, so that is when it gets more.
        if self._pending_of(self.assigned_work[node]) > 1:
            return
        self._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LongestFirst | None:
    """``--dist loadgroup`` (pyproject's default) as :class:`LongestFirst`."""
    return LongestFirst(config, log) if config.getoption("dist") == "loadgroup" else None


_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``--store-durations``: add up each test's phases (in the controller under xdist)."""
    nodeid = _test_id(report.nodeid)
    _SECONDS[nodeid] = _SECONDS.get(nodeid, 0.0) + report.duration


def _store_durations(config: pytest.Config) -> None:
    if not config.getoption("store_durations", False) or hasattr(config, "workerinput"):
        return
    slow = {k: round(v, 1) for k, v in sorted(_SECONDS.items()) if v >= 1.0}
    DURATIONS.write_text(json.dumps(slow, indent=0) + "\n")


def _name_group(item: pytest.Item, group: str) -> None:
    """Give ``item`` the id ``id@group`` by which xdist's controller groups it.

    xdist's worker hook does this by setting ``item._nodeid``, which pytest 9 no longer reads
    (a node's id is ``item._id``): without this every test of a group went to any worker,
    each building the module's fixtures again."""
    grouped = f"{item.nodeid}@{group}"
    if hasattr(item, "_id"):
        from _pytest.nodes import NodeId

        item._id = NodeId.parse(grouped)
    else:
        item._nodeid = grouped
    assert item.nodeid == grouped, "pytest names tests in a way this conftest does not know"


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its hook in each worker)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark tests by the server fixtures they use; a fast test in a slow tier is an error.
    Group the tests that share a fixture's one instance (:func:`_xdist_group`); run the fast
    tier last."""
    for item in items:
        marks = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        }
        group = "_".join(sorted(marks)) if marks else _xdist_group(item)
        for name in ONE_WORKER_FIXTURES:
            if group != name and name in getattr(item, "fixturenames", ()):
                raise pytest.UsageError(
                    f"{item.nodeid} uses {name} but is in the xdist group {group!r}: its worker "
                    f"would build a second one; mark it xdist_group({name!r})"
                )
        if group and not marks:
            item.add_marker(pytest.mark.xdist_group(group))
        loadgroup = getattr(config.option, "loadgroup", False)
        if group and loadgroup and not item.nodeid.endswith(f"@{group}"):
            _name_group(item, group)
        for name in getattr(item, "fixturenames", ()):
            if name in SERVER_FIXTURES:
                item.add_marker(SERVER_FIXTURES[name])
        slow = SLOW_TIERS & {m.name for m in item.iter_markers()}
        if item.get_closest_marker("fast") and slow:
            raise pytest.UsageError(
                f"{item.nodeid} is marked fast but is in the {', '.join(sorted(slow))} tier"
            )
    # The slow tiers first, in file order (LongestFirst keeps this order among the tests
    # tests/durations.json does not know): the workers then end on short tests.
    items.sort(key=lambda item: item.get_closest_marker("fast") is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection imported (dlt, Prefect, polars...) lives until the run ends: frozen, it
    # is left out of every later full garbage collection instead of being walked each time.
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    _STARTS.watching = item.get_closest_marker("fast") is not None
    _STARTS.started = []
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        _STARTS.watching = False


def pytest_sessionstart(session: pytest.Session) -> None:
    # The fixture ``tmp_path_factory`` returns this object; a hook has no public way to it.
    factory = getattr(session.config, "_tmp_path_factory", None)
    if _READS is not None and factory is not None:
        _READS.exempt(factory.getbasetemp())  # --basetemp may name a sibling
        _READS.exempt(factory.getbasetemp().parent)


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    paths = _READS.take() if _READS is not None else []
    if not paths:
        return
    if report.outcome == "failed":
        report.sections.append(("outside the repository", _message(paths)))
    else:
        report.outcome, report.longrepr = "failed", _message(paths)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail(report)
    if report.when == "call" and _STARTS.started and report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = (
            "a fast test started a process (mark it sandbox, prefect or browser, or leave "
            "it unmarked): " + "; ".join(_STARTS.started)
        )
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    _store_durations(session.config)
    paths = _READS.take() if _READS is not None else []
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: its controller reports them
        workeroutput["outside_reads"] = paths
        return
    paths += _WORKER_READS
    if paths:
        sys.stderr.write(_message(list(dict.fromkeys(paths))) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: Paths the xdist workers recorded outside any test (session fixtures' teardown, say).
_WORKER_READS: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist's controller: gather what a finished worker recorded outside its tests."""
    _WORKER_READS.extend(getattr(node, "workeroutput", {}).get("outside_reads", []))


@pytest.fixture(autouse=True)
def _no_dlt_noise() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("dlt").setLevel(logging.WARNING)


Handler = Callable[[str, dict[str, str], dict[str, str]], tuple[int, dict[str, str], bytes]]


class LoopbackServer:
    """A tiny real HTTP server on 127.0.0.1 whose answers come from a Python function."""

    def __init__(self, handler: Handler) -> None:
        outer = self

        class _H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                from urllib.parse import parse_qsl, urlsplit

                parts = urlsplit(self.path)
                outer.requests.append(self.path)
                status, headers, body = handler(
                    parts.path, dict(parse_qsl(parts.query)), dict(self.headers.items())
                )
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.requests: list[str] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v2"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def loopback() -> Iterator[Callable[[Handler], LoopbackServer]]:
    servers: list[LoopbackServer] = []

    def start(handler: Handler) -> LoopbackServer:
        server = LoopbackServer(handler).__enter__()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.__exit__(None, None, None)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One temporary Prefect server for the whole test session (it takes ~10 s to start)."""
    import os

    from prefect.testing.utilities import prefect_test_harness

    # Prefect's telemetry writes to the harness database from another thread and prints
    # "database is locked" tracebacks; nothing here needs it.
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    with prefect_test_harness(server_startup_timeout=120):
        yield


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]
) -> T:
    """``build(folder)``, done once for the whole test run: under xdist the first worker that
    needs it builds it (under a file lock, in the run's temporary folder that every worker
    shares) and the others wait for it and get the same result (pickled). What it builds is
    shared by processes: read it; to write, copy it first. Without workers: built here."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build(tmp_path_factory.mktemp(name))
    root = tmp_path_factory.getbasetemp().parent  # the run's folder: popen-gw0, popen-gw1...
    folder, result = root / f"shared-{name}", root / f"shared-{name}.pickle"
    with (root / f"shared-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its process ends
        if not result.exists():  # a worker whose build failed leaves none: the next one tries
            folder.mkdir(exist_ok=True)
            built = build(folder)
            partial = result.with_suffix(".partial")
            partial.write_bytes(pickle.dumps(built))
            partial.replace(result)
        loaded: T = pickle.loads(result.read_bytes())
        return loaded


PUBLISHED_AS_OF = "2026-11-20T12:00:00Z"


def _publish(folder: Path) -> Path:
    from datetime import datetime

    from pipelines.analytics import publish_risk
    from pipelines.config import ApiSettings
    from pipelines.load import run_load
    from sandbox.thread import SandboxThread

    path = folder / "freetime.duckdb"
    with SandboxThread(containers=500, seed=49, clock=PUBLISHED_AS_OF) as sb:
        run_load(
            path,
            ApiSettings(base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000),
        )
    publish_risk(path, as_of=datetime.fromisoformat(PUBLISHED_AS_OF.replace("Z", "+00:00")))
    return path


@pytest.fixture(scope="session")
def published_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse loaded from a 500-container sandbox with risk published as of
    ``PUBLISHED_AS_OF``, built once per run (:func:`once_per_run`). Shared by the notebook,
    report, tool server and alerts tests: treat it as read-only (copy it to write)."""
    return once_per_run(tmp_path_factory, "published", _publish)


@pytest.fixture(scope="session")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The container's life of ``tests/history_walk.py`` (a :class:`history_walk.Walk`), walked
    once per run (:func:`once_per_run`) for the history, evidence, invoices and alerts tests,
    with risk published and the container's alerts sent after each of its first steps
    (``Walk.alerts``): read it; to write, copy the file."""
    sys.path.insert(0, str(REPO / "tests"))
    from history_walk import walk

    return once_per_run(tmp_path_factory, "walk", walk)


# The sandbox tests' book: 500 containers of seed 49 at a fixed clock, one per test module.
SANDBOX_CLOCK = "2026-11-20T12:00:00Z"


@pytest.fixture(scope="module")
def sb() -> Iterator[Any]:
    from sandbox.thread import SandboxThread

    with SandboxThread(containers=500, seed=49, clock=SANDBOX_CLOCK) as server:
        yield server


@pytest.fixture(scope="module")
def http(sb: Any) -> Iterator[Any]:
    import httpx

    with httpx.Client(
        base_url=sb.base_url, headers={"Authorization": f"Token {sb.api_key}"}, timeout=60
    ) as c:
        yield c


@pytest.fixture(scope="module")
def truth(sb: Any) -> dict[str, Any]:
    """Ground truth at the start (before any test moves the world)."""
    return dict(sb.ground_truth())


# ---- a real PostgreSQL server (tests marked ``postgres``) -------------------------------------
@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One PostgreSQL server for the session (tests/pg.py), started here and stopped at the end.

    No server installed: under CI (``CI=true``) the test FAILS (``quickstart.py test`` installs
    one); elsewhere it skips, saying how to install one.
    """
    from tests.pg import running_server, server_bin_dir

    bin_dir = server_bin_dir()
    if bin_dir is None:
        message = (
            "no PostgreSQL server on this machine (initdb, pg_ctl): `python3 quickstart.py test` "
            "installs Debian's postgresql as root, or set FREETIME_PG_BIN"
        )
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(message)
        pytest.skip(message)
    with running_server(bin_dir) as server:
        yield server


@pytest.fixture
def pg_database(postgres_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The URL of a new empty database on the session's server (its superuser's password in
    it); the writers' local working folder is under ``tmp_path``."""
    monkeypatch.setenv("FREETIME_WORKDIR", str(tmp_path / "work"))
    return str(postgres_server.url(postgres_server.create_database()))


# ---- PostgreSQL databases that start from a loaded account (flowtests, issue 32) --------------
@pytest.fixture
def pg_loaded(
    postgres_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., str]:
    """``pg_loaded(containers, seed, clock=None, duckdb=None)``: the URL of a new database
    holding the load of that sandbox, a copy of one loaded once per server (tests/pg.py
    :func:`~tests.pg.loaded_template`) instead of a sandbox and a load per test; given a path
    ``duckdb``, a DuckDB file loaded from the same sandbox is copied there. The
    writers' local working folder is under ``tmp_path``, as with ``pg_database``."""
    import shutil

    from tests.pg import loaded_template

    monkeypatch.setenv("FREETIME_WORKDIR", str(tmp_path / "work"))

    def clone(
        containers: int, seed: int, clock: str | None = None, duckdb: Path | None = None
    ) -> str:
        name, twin = loaded_template(postgres_server, containers, seed, clock, duckdb is not None)
        if duckdb is not None and twin is not None:
            shutil.copyfile(twin, duckdb)
        return str(postgres_server.url(postgres_server.clone(name)))

    return clone
