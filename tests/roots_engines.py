"""What each engine's server in a root (tests/roots.py) is run with: its options, its data
directory's initialisation, its command line, its client, its readiness check and its stop
signal, for Oracle MySQL, MariaDB and PostgreSQL. A mixin of RootServer: it reads the server's
attributes (engine, root, port, datadir, pg_bin ...) and its namespace helpers (_enter,
_chroot, exec, host)."""

from __future__ import annotations

import shlex
import signal
import subprocess


class EngineCommands:
    @property
    def socket(self) -> str:
        return "/run/mysqld/mysqld.sock" if self.engine != "postgres" else \
            f"/run/postgresql/.s.PGSQL.{self.port}"

    def _options(self, options) -> tuple[list[str], dict]:
        if self.engine == "postgres":
            if isinstance(options, dict):
                return [], dict(options)
            return list(options or []), {}
        if isinstance(options, dict):
            return [f"--{k}={v}" for k, v in options.items()], {}
        return list(options or []), {}

    def _init_datadir(self) -> None:
        if self.engine == "mysql":
            argv = ["mysqld", "--initialize-insecure",
                    f"--datadir={self.datadir}", f"--log-error={self.dir}/init.log"]
            user = True
        elif self.engine == "mariadb":
            argv = ["mariadb-install-db", "--user=mysql", f"--datadir={self.datadir}",
                    "--auth-root-authentication-method=socket", "--skip-test-db"]
            user = False  # run as root inside the root: it chowns to mysql
        else:
            argv = [f"{self.pg_bin}/initdb", "-D", self.datadir, "-U", "postgres", "-A", "trust",
                    "--no-sync", "-E", "UTF8", "--locale=C"]
            user = True
        r = subprocess.run(self._enter(argv, as_user=user), capture_output=True, text=True,
                           timeout=300, start_new_session=True)
        if r.returncode != 0:
            extra = ""
            init = self.host(f"{self.dir}/init.log")
            if init.is_file():
                extra = init.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"initialising {self.datadir} in {self.root} failed (rc "
                               f"{r.returncode}): {(r.stdout + r.stderr)[-1500:]} {extra}")
        if self.engine == "postgres":
            conf = {"port": self.port, "unix_socket_directories": "/run/postgresql",
                    "listen_addresses": "", **self.settings}
            with open(self.host(f"{self.datadir}/postgresql.conf"), "a") as f:
                f.write("\n# hpadvise lab (tests/roots.py)\n")
                for k, v in conf.items():
                    f.write(f"{k} = '{str(v).replace(chr(39), chr(39) * 2)}'\n")

    def server_argv(self) -> list[str]:
        if self.engine == "mysql":
            return ["mysqld", f"--datadir={self.datadir}", "--mysqlx=OFF",
                    f"--port={self.port}", "--bind-address=127.0.0.1",
                    f"--socket={self.socket}", f"--log-error={self.log}",
                    f"--pid-file={self.run_dir}/mysqld.pid", *self.options]
        if self.engine == "mariadb":
            return ["mariadbd", f"--datadir={self.datadir}",
                    f"--port={self.port}", "--bind-address=127.0.0.1",
                    f"--socket={self.socket}", f"--log-error={self.log}",
                    f"--pid-file={self.run_dir}/mariadbd.pid", *self.options]
        return [f"{self.pg_bin}/postgres", "-D", self.datadir, *self.options]

    def _init_script(self) -> str:
        """The namespace's PID 1: the server in the foreground, its output in its log; with
        pg_ctl, the daemonised postmaster (a child of this shell once pg_ctl has left)."""
        log = shlex.quote(str(self.host(self.log)))
        if self.engine == "postgres" and self.pg_ctl:
            start = self._chroot([f"{self.pg_bin}/pg_ctl", "-D", self.datadir, "-l", self.log,
                                  "-o", shlex.join(self.options), "-W", "start"])
            return (f"{shlex.join(start)} >> {log} 2>&1\n"
                    "trap 'exit 0' TERM\nwhile :; do sleep 1; done")
        # not the shell's last command: it stays PID 1 (dash would exec a last command)
        return f"{shlex.join(self._chroot(self.server_argv()))} >> {log} 2>&1\nexit $?"

    def _ping(self) -> bool:
        if self.engine == "postgres":
            argv = [f"{self.pg_bin}/pg_isready", "-q", "-h", "/run/postgresql", "-p",
                    str(self.port), "-U", "postgres", "-d", "postgres"]
        else:
            tool = "mysqladmin" if self.engine == "mysql" else "mariadb-admin"
            argv = [tool, f"--socket={self.socket}", "-uroot", "ping"]
        try:
            return self.exec(argv, timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def client_argv(self, query: str) -> tuple[list[str], bool]:
        if self.engine == "postgres":
            return [f"{self.pg_bin}/psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-h",
                    "/run/postgresql", "-p", str(self.port), "-U", "postgres", "-d",
                    "postgres", "-c", query], True
        tool = "mysql" if self.engine == "mysql" else "mariadb"
        # root over the socket: no password (MySQL: --initialize-insecure), or unix_socket
        # authentication as the OS root (MariaDB)
        return [tool, f"--socket={self.socket}", "-uroot", "-N", "-B",
                "-e", query], False

    def _stop_signal(self) -> int:
        return signal.SIGINT if self.engine == "postgres" else signal.SIGTERM  # fast shutdown
