"""thp-exec: start a server with a THP mode of its own (prctl), whatever the host-wide one."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from .app import app


@app.command("thp-exec", context_settings={"allow_interspersed_args": False})
def thp_exec(
    command: Annotated[Optional[List[str]], typer.Argument(
        metavar="-- COMMAND [ARGS]...", help="The command to run in that THP mode.")] = None,
    mode: Annotated[str, typer.Option(
        metavar="MODE", help="advised: THP only where the process asks for it with madvise "
             "(Linux 6.18); never: no THP for it; inherit: the host's mode.")] = "advised",
):
    """Run COMMAND with its own THP mode: prctl(PR_SET_THP_DISABLE), kept by everything it
    starts, so a server keeps it until it stops. Where the host gives THP to every process
    (enabled = always, for MongoDB or a JVM), PostgreSQL or Redis started this way get only
    what they ask for. systemd units say the same with MemoryTHP= (disable, madvise).

    Examples:

    \b
      sudo -u postgres hpadvise thp-exec --mode advised -- pg_ctl -D /srv/pg/17 start
      hpadvise thp-exec --mode never -- redis-server /etc/redis/redis.conf
    """
    from ..facts.thp_exec import exec_under
    exec_under(mode, list(command or []))
