"""A throwaway PostgreSQL cluster (initdb + pg_ctl on a loopback port) for tests and benchmarks.

PostgreSQL refuses to run as root, so under root the server runs as the `postgres` system user that Debian's
package creates. `.ci/run` installs the package when `initdb` is missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from lightning_otel.testing.ports import free_port


def find_pg_bin() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


class ThrowawayPostgres:
    def __init__(self, *, fsync: bool = False) -> None:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL server binaries not found: apt-get install postgresql")
        self.bin_dir = bin_dir
        self.fsync = fsync
        self.port = free_port()
        self.base = Path(tempfile.mkdtemp(prefix="agl-pg-"))
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    def _run(self, *args: str) -> None:
        def demote() -> None:
            if self._user is not None:
                os.setgid(self._user.pw_gid)
                os.setuid(self._user.pw_uid)

        subprocess.run(args, check=True, capture_output=True, preexec_fn=demote, cwd=self.base, timeout=120)

    def start(self) -> ThrowawayPostgres:
        if self._user is not None:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
        data = self.base / "data"
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "agl",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        )
        self.start_again()
        return self

    def start_again(self) -> None:
        """Start the initialized cluster (again, after `stop()`, on the same port)."""
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.base / "data"),
            "-o",
            self._options(),
            "-l",
            str(self.base / "log"),
            "-w",
            "start",
        )

    def _options(self) -> str:
        fsync = "on" if self.fsync else "off"
        return (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync={fsync} "
            "-c max_connections=200 -c shared_buffers=256MB"
        )

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.base / "data"), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://agl@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
