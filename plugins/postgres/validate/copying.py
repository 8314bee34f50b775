"""Physical copies of a user's cluster for validate: `--instance ID --copy` and the base backup
that `hpadvise capture` takes before its log.

A copy is a base backup (pg_basebackup over the cluster's socket, as its owner: a read of every
file and the WAL written meanwhile, the source's only load; PostgreSQL docs, pg_basebackup)
made into a scratch server: validate's own postgresql.conf (the source's settings from its
configuration files, less what would make the copy reach the source's files, network, archive
or log), an empty postgresql.auto.conf, a pg_hba.conf that lets only local connections in, and
validate's scratch mark. It starts as a new server with the source's data, roles and
databases; the first start recovers from the backup (its backup_label) to a consistent state.

Where the statements of a replay write, every run starts from the same data: the first copy,
cleanly stopped once, is kept as the pristine data directory, and each server's data files are
put back from it before every start (`reset_data`), its configuration files left as the
run's switches made them.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

from hpadvise.benchmarks.face import check_run, mark_scratch
from hpadvise.api.face import InputError, SCRATCH_MARK

# Settings a copy never takes from its source (pg_settings names): its files and port, its
# network, WAL shipping and replication (the copy is no member of the source's cluster), its
# log (the copy must not write into the source's log directory, nor log statements), and the
# server's own generated settings.
LEFT_OUT = ("data_directory", "config_file", "hba_file", "ident_file", "external_pid_file",
            "port", "unix_socket_directories", "unix_socket_group", "unix_socket_permissions",
            "listen_addresses", "cluster_name", "include", "include_dir", "include_if_exists",
            "archive_mode", "archive_command", "archive_library", "restore_command",
            "primary_conninfo", "primary_slot_name", "recovery_target_timeline",
            "synchronized_standby_slots", "synchronous_standby_names", "hot_standby",
            "stats_temp_directory", "krb_server_keyfile", "lc_messages")
LEFT_OUT_PREFIXES = ("ssl", "log_", "logging_", "syslog_", "event_source", "debug_")
# What a reset leaves as it is: the configuration files (the run's switches are in them),
# and the server's own postmaster.opts (`pg_ctl restart` starts the server with the options
# recorded there, its data directory among them: the pristine copy's would start another
# server's directory) and restart log.
CONFIG_FILES = ("postgresql.conf", "postgresql.auto.conf", "pg_hba.conf", "pg_ident.conf",
                SCRATCH_MARK, "postmaster.opts", "postmaster.pid", "hpadvise-restart.log")
# What a copy's server must not start with: a standby's signal files, the source's lock and
# log files (a log holds statements, and with them data).
DROPPED = ("standby.signal", "recovery.signal", "postmaster.pid", "postmaster.opts",
           "current_logfiles")
HBA = ("# validate's copy: local connections only\n"
       "local all all trust\nlocal replication all trust\n")


def kept(name: str) -> bool:
    return not (name in LEFT_OUT or name.startswith(LEFT_OUT_PREFIXES))


def conf_value(value: str) -> str:
    """A setting's value as postgresql.conf writes it: single-quoted, quotes doubled
    (PostgreSQL docs, 20.1.2 "Parameter Interaction via the Configuration File")."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def source_settings(psql) -> list[str]:
    """The source's own settings (pg_settings rows whose source is a configuration file,
    postgresql.auto.conf among them), less LEFT_OUT, as postgresql.conf lines. `psql(sql)`
    runs a query on the source and returns its unaligned rows."""
    rows = psql("SELECT name, current_setting(name) FROM pg_settings WHERE source = "
                "'configuration file' ORDER BY name")
    out = []
    for line in rows.splitlines():
        name, _, value = line.partition("|")
        if name and kept(name):
            out.append(f"{name} = {conf_value(value)}")
    return out


def data_bytes(psql) -> int:
    """The source's databases on disk, summed (what a copy takes)."""
    return int(psql("SELECT sum(pg_database_size(oid)) FROM pg_database") or 0)


def base_backup(bindir: str, socket_dir: str, port: int, owner: str, dest: str,
                run_as: dict) -> None:
    """A base backup of the running cluster into `dest` (created by pg_basebackup, owned by
    the OS user run_as runs as): a fast checkpoint first, and the WAL it needs streamed
    beside it, so it starts alone (pg_basebackup -c fast -X stream; PostgreSQL docs)."""
    r = subprocess.run([f"{bindir}/pg_basebackup", "-h", socket_dir, "-p", str(port), "-U",
                        owner, "-D", dest, "-c", "fast", "-X", "stream", "--no-sync"],
                       capture_output=True, text=True, cwd="/", **run_as)
    if r.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise InputError(f"pg_basebackup of the cluster on port {port} failed: {why[:300]}; "
                         f"it needs a local replication connection for {owner} in its "
                         "pg_hba.conf and max_wal_senders above 0")


def base_backup_into(bindir: str, socket_dir: str, port: int, owner: str, dest: str,
                     run_as: dict, exclude: list[str] = ()) -> None:
    """A base backup streamed as one tar to standard output (pg_basebackup -D - -Ft, with the
    WAL it needs fetched into it: streaming WAL cannot go to standard output; PostgreSQL docs,
    pg_basebackup) and unpacked by root into `dest`: for a directory the cluster's owner may
    not reach (a capture directory under root's own). Files keep the owner the tar names.
    `exclude`: paths in the data directory left out (the server's own log: it holds
    statements, and their passwords; pg_basebackup has no option for it, tar's --exclude
    does, anchored at the archive's top)."""
    os.makedirs(dest, mode=0o700)
    pg = subprocess.Popen([f"{bindir}/pg_basebackup", "-h", socket_dir, "-p", str(port),
                           "-U", owner, "-D", "-", "-Ft", "-X", "fetch", "-c", "fast"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", **run_as)
    try:
        tar = subprocess.run(["tar", "-x", "--same-owner", "-C", dest, "--anchored",
                              *(f"--exclude={p}" for p in exclude),
                              *(f"--exclude=./{p}" for p in exclude)],
                             stdin=pg.stdout, capture_output=True, text=True)
        pg.stdout.close()
        err = pg.stderr.read().decode(errors="replace")
        failed = pg.wait() != 0 or tar.returncode != 0
    except BaseException:  # Ctrl-C, SIGTERM: nothing goes on writing into dest
        pg.kill()
        pg.wait()
        shutil.rmtree(dest, ignore_errors=True)
        raise
    if failed:
        shutil.rmtree(dest, ignore_errors=True)
        why = (err.strip().splitlines() or tar.stderr.strip().splitlines() or ["?"])[-1]
        raise InputError(f"pg_basebackup of the cluster on port {port} failed: {why[:300]}; "
                         f"it needs a local replication connection for {owner} in its "
                         "pg_hba.conf and max_wal_senders above 0")
    pw = pwd.getpwnam(owner)
    os.chown(dest, pw.pw_uid, pw.pw_gid)


def prepare_copy(datadir: str, pw, port: int, socket_dir: str, settings: list[str],
                 extra: dict[str, str]) -> None:
    """Make a base backup in `datadir` a scratch server's: validate's configuration files
    and mark, no standby signal, no log of the source's."""
    for name in DROPPED:
        try:
            os.unlink(os.path.join(datadir, name))
        except FileNotFoundError:
            pass
    logdir = os.path.join(datadir, "log")
    if os.path.isdir(logdir):  # the source's own log (logging_collector's default place)
        shutil.rmtree(logdir)
    lines = ["# validate's copy: the source's settings, then validate's own", *settings,
             f"port = {port}", f"unix_socket_directories = {conf_value(socket_dir)}",
             "listen_addresses = ''", "logging_collector = off", "log_statement = 'none'",
             "log_min_duration_statement = -1", "archive_mode = off",
             *(f"{k} = {v}" for k, v in extra.items())]
    files = {"postgresql.conf": "\n".join(lines) + "\n",
             "postgresql.auto.conf": "# Do not edit this file manually!\n"
                                     "# It will be overwritten by the ALTER SYSTEM command.\n",
             "pg_hba.conf": HBA, "pg_ident.conf": ""}
    for name, text in files.items():
        path = os.path.join(datadir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        os.chown(path, pw.pw_uid, pw.pw_gid)
    mark_scratch(datadir, pw)


def copy_base(base: str):
    """A `fill` for scratch_cluster.scratch_from: cp -a of a base backup (owner and modes
    kept)."""
    return lambda datadir: check_run(["cp", "-a", base, datadir])


def keep_pristine(datadir: str, dest: str) -> None:
    """The data directory of a cleanly stopped copy, kept as every reset's source."""
    check_run(["cp", "-a", datadir, dest])


def reset_data(pristine: str, datadir: str) -> None:
    """Put a stopped copy's data back as it was in `pristine`: every file and directory but
    the configuration files (CONFIG_FILES), which hold the run's switches."""
    for name in os.listdir(datadir):
        if name in CONFIG_FILES:
            continue
        path = os.path.join(datadir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    names = [os.path.join(pristine, n) for n in os.listdir(pristine) if n not in CONFIG_FILES]
    if names:
        check_run(["cp", "-a", *names, datadir])
