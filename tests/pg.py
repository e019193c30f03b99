"""A real PostgreSQL server for the tests: started in a temporary folder, stopped at the end.

:class:`PostgresServer` runs Debian's (or any) ``initdb`` and ``pg_ctl`` from
:func:`server_bin_dir` on a free loopback port, with password authentication over TCP
(scram-sha-256) so that a wrong password is refused as on a real server. A server refuses to
run as root: under root the server's commands run as the ``postgres`` user (``runuser``), in
a folder that user owns.

The superuser is ``postgres`` with password :data:`SUPERUSER_PASSWORD`; each test gets its own
database (:meth:`PostgresServer.create_database`), so tests never see each other's tables.

A test that starts from a loaded account gets a copy of one loaded once per server
(:func:`loaded_template`, :meth:`PostgresServer.clone`, the ``pg_loaded`` fixture): a
``CREATE DATABASE ... TEMPLATE`` is a file copy, where a load is a sandbox and dlt's
whole pipeline.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SUPERUSER_PASSWORD = "superpass-Not-Shown"
#: where ``quickstart.py test`` (``apt-get install postgresql``) puts the server on Debian
DEBIAN_BIN_GLOB = "/usr/lib/postgresql/*/bin"


def server_bin_dir() -> Path | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``: env ``FREETIME_PG_BIN``,
    else ``pg_config --bindir`` on PATH, else the newest Debian version; None if none."""
    env = os.environ.get("FREETIME_PG_BIN")
    candidates = [Path(env)] if env else []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).parent)
    versions = sorted(
        glob.glob(DEBIAN_BIN_GLOB), key=lambda p: int(Path(p).parent.name), reverse=True
    )
    candidates += [Path(p) for p in versions if Path(p).parent.name.isdigit()]
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """One server: :meth:`start`, :meth:`create_database` per test, :meth:`stop`."""

    bin_dir: Path
    port: int = field(default_factory=free_port)
    folder: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="freetime-pg-")))
    #: the databases :func:`loaded_template` built on this server, by what they hold
    templates: dict[tuple[int, int, str | None, bool], tuple[str, Path | None]] = field(
        default_factory=dict
    )

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def _as_server_user(self, *argv: str | Path) -> list[str]:
        cmd = [str(a) for a in argv]
        if os.geteuid() == 0:  # the server refuses root
            return ["runuser", "-u", "postgres", "--", *cmd]
        return cmd

    def _run(self, *argv: str | Path) -> None:
        done = subprocess.run(
            self._as_server_user(*argv), capture_output=True, text=True, cwd=self.folder
        )
        if done.returncode != 0:
            log = self.folder / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{argv[0]} failed ({done.returncode}): {done.stderr or done.stdout}\n{tail}"
            )

    def start(self) -> PostgresServer:
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        pwfile = self.folder / "pwfile"
        pwfile.write_text(SUPERUSER_PASSWORD + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        self._run(
            self.bin_dir / "initdb",
            "-D",
            self.data,
            "-U",
            "postgres",
            "--pwfile",
            pwfile,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.folder} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100"
        )
        self._run(
            self.bin_dir / "pg_ctl",
            "-D",
            self.data,
            "-l",
            self.folder / "server.log",
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run(self.bin_dir / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
        for _, twin in self.templates.values():
            if twin is not None:
                shutil.rmtree(twin.parent.parent, ignore_errors=True)

    def url(
        self, database: str = "postgres", user: str = "postgres", password: str | None = None
    ) -> str:
        """A ``postgresql://`` URL to ``database`` (the superuser's password by default)."""
        secret = SUPERUSER_PASSWORD if password is None and user == "postgres" else password
        auth = f"{user}:{secret}" if secret else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> list[tuple[object, ...]]:
        """Run ``sql`` as the superuser (autocommit); the rows it returns, if any."""
        import psycopg2

        con = psycopg2.connect(self.url(database))
        con.autocommit = True
        try:
            with con.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall()) if cur.description else []
        finally:
            con.close()

    def create_database(self, owner: str = "postgres") -> str:
        """A new empty database owned by ``owner``; its name."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.execute(f'CREATE DATABASE "{name}" OWNER "{owner}"')
        return name

    def clone(self, template: str) -> str:
        """A new database holding what ``template`` holds (``CREATE DATABASE ... TEMPLATE``, a
        copy of its files); its name. Nothing may be connected to ``template`` meanwhile."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name


@contextlib.contextmanager
def running_server(bin_dir: Path, attempts: int = 3) -> Iterator[PostgresServer]:
    """A started server, stopped on exit. The free port is picked before the server binds it,
    so another process (an xdist worker starting its own server) may take it first: a server
    that fails to start is retried on a new port and folder."""
    for attempt in range(attempts):
        server = PostgresServer(bin_dir)
        try:
            server.start()
            break
        except RuntimeError:
            server.stop()
            if attempt == attempts - 1:
                raise
    try:
        yield server
    finally:
        server.stop()


def loaded_template(
    server: PostgresServer,
    containers: int,
    seed: int,
    clock: str | None = None,
    duckdb_twin: bool = False,
) -> tuple[str, Path | None]:
    """A database on ``server`` holding the load of a sandbox of ``containers`` of ``seed`` at
    ``clock`` (``run_load``, as a test would do it), loaded the first time it is asked for and
    kept for the server's life: its name, and with ``duckdb_twin`` a DuckDB file loaded from
    the same sandbox (else None). Read them only through :meth:`clone` and a copy."""
    key = (containers, seed, clock, duckdb_twin)
    if key not in server.templates:
        from pipelines.config import ApiSettings
        from pipelines.load import run_load
        from sandbox.thread import SandboxThread

        name = f"loaded_{containers}_{seed}_{uuid.uuid4().hex[:6]}"
        server.execute(f'CREATE DATABASE "{name}"')
        work = Path(tempfile.mkdtemp(prefix="freetime-pg-load-"))
        twin = work / "twin" / "freetime.duckdb" if duckdb_twin else None
        saved = os.environ.get("FREETIME_WORKDIR")
        os.environ["FREETIME_WORKDIR"] = str(work / "dlt")  # the load's local folder
        try:
            with SandboxThread(containers=containers, seed=seed, clock=clock) as sb:
                api = ApiSettings(
                    base_url=sb.base_url, api_key=sb.api_key, rate_limit_per_minute=100000
                )
                if twin is not None:
                    twin.parent.mkdir()
                    run_load(twin, api)
                run_load(server.url(name), api)
        finally:
            if saved is None:
                os.environ.pop("FREETIME_WORKDIR", None)
            else:
                os.environ["FREETIME_WORKDIR"] = saved
            shutil.rmtree(work / "dlt" if twin is not None else work, ignore_errors=True)
        server.templates[key] = (name, twin)
    return server.templates[key]
