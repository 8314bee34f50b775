"""PostgreSQL run in a Debian root the way Debian's packaging and its container images run it:
the cluster made by `pg_createcluster` (configuration in the root's /etc/postgresql/V/NAME,
settings in its conf.d, data in /var/lib/postgresql/V/NAME) and started by `pg_ctlcluster
--foreground V NAME start`, which execs `postgres -c config_file=...` with no -D and no
PGDATA (postgresql-common's pg_ctlcluster). The postmaster's data directory is then known
only from that file's data_directory line and its own working directory.

Everything else (namespaces, mounts, the server as the namespace's child, stopping) is
RootServer's; destroy() also removes what pg_createcluster made in the root."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from roots import RootServer


class DebianCluster(RootServer):
    """`settings` go into the cluster's conf.d/hplab.conf (postgresql-common's
    postgresql.conf includes conf.d)."""

    def __init__(self, suite_root=None, engine: str = "postgres", settings: dict | None = None,
                 **kw):
        if engine != "postgres":
            raise ValueError("pg_createcluster makes PostgreSQL clusters only")
        self.conf_settings = dict(settings or {})
        self.made: list[Path] = []  # directories pg_createcluster made above the cluster's
        super().__init__(suite_root, engine, None, **kw)

    @property
    def major(self) -> str:
        return self.pg_bin.split("/")[-2]

    @property
    def cluster(self) -> str:
        return self.name.replace("-", "_")

    @property
    def etc(self) -> str:
        return f"/etc/postgresql/{self.major}/{self.cluster}"

    def _init_datadir(self) -> None:
        import subprocess
        self.datadir = f"/var/lib/postgresql/{self.major}/{self.cluster}"
        for d in ("/etc/postgresql", f"/etc/postgresql/{self.major}",
                  f"/var/lib/postgresql/{self.major}"):
            if not self.host(d).exists():
                self.made.insert(0, self.host(d))  # innermost first
        argv = ["pg_createcluster", "--port", str(self.port), "--socketdir", "/run/postgresql",
                "--start-conf", "manual", self.major, self.cluster, "--", "--no-sync",
                "-A", "trust", "-U", "postgres"]
        r = subprocess.run(self._enter(argv, as_user=False), capture_output=True, text=True,
                           timeout=300, start_new_session=True)
        if r.returncode != 0:
            raise RuntimeError(f"pg_createcluster in {self.root} failed (rc {r.returncode}): "
                               f"{(r.stdout + r.stderr)[-1500:]}")
        conf = {"listen_addresses": "", **self.conf_settings}
        with open(self.host(f"{self.etc}/conf.d/hplab.conf"), "w") as f:
            f.write("# hpadvise lab (tests/roots_debian.py)\n")
            for k, v in conf.items():
                f.write(f"{k} = '{str(v).replace(chr(39), chr(39) * 2)}'\n")

    def server_argv(self) -> list[str]:
        return ["pg_ctlcluster", "--foreground", self.major, self.cluster, "start"]

    def _init_script(self) -> str:
        log = shlex.quote(str(self.host(self.log)))
        # as root: pg_ctlcluster becomes the cluster's owner itself, then execs postgres
        argv = self._chroot(self.server_argv(), as_user=False)
        return f"{shlex.join(argv)} >> {log} 2>&1\nexit $?"

    def destroy(self) -> None:
        try:
            super().destroy()
        finally:
            for p in (self.etc, self.datadir,
                      f"/var/log/postgresql/postgresql-{self.major}-{self.cluster}.log"):
                h = self.host(p)
                if h.is_dir():
                    shutil.rmtree(h, ignore_errors=True)
                elif h.exists():
                    h.unlink()
            for d in self.made:  # those another cluster still uses are kept
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
