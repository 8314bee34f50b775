"""apply through Patroni: the cluster's parameters in Patroni's distributed configuration, and
restarts by Patroni, member by member, replicas before the leader.

Patroni's REST API (Patroni docs, "REST API"): `GET /config` returns the dynamic configuration
and `PATCH /config` merges a JSON document into it, a null value removing a key; `GET
/cluster` lists the members with their role and API URL; `POST /restart` restarts the member
it is sent to and answers once PostgreSQL is back (503 when the restart failed). Parameters set
there reach every member (postgresql.parameters), where ALTER SYSTEM would reach one, and is
overridden by Patroni anyway for the parameters it puts on the command line.

Only `postgresql.parameters` of the configuration is read or written; the rest of it is
Patroni's and holds nothing hpadvise needs.
"""

from __future__ import annotations

import json
import shlex
import time

from hpadvise.api.face import Action, ActionError, Restart

from .actions import PgRestart


def request(method: str, url: str, body: dict | None = None, timeout: float = 10) -> dict:
    """One REST call; its JSON answer ({} for none). Errors name the call, never a body."""
    import urllib.error
    import urllib.request
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as exc:
        why = "it asks for the REST API's credentials (restapi.authentication); run the " \
              "printed patronictl commands instead" if exc.code == 401 else \
            (exc.read().decode(errors="replace").strip()[:200] or exc.reason)
        raise ActionError(f"Patroni {method} {url}: HTTP {exc.code}: {why}") from None
    except OSError as exc:
        raise ActionError(f"Patroni {method} {url}: {exc}") from None
    try:
        return json.loads(text) if text.strip().startswith(("{", "[")) else {}
    except ValueError:
        return {}


# The longest wait for a member's view of the configuration to show a change: Patroni's
# loop_wait, 10 s by default (Patroni docs, "Dynamic Configuration Settings"), and a margin.
SETTLE_S = 15


class PatroniParams(Action):
    """PostgreSQL parameters in Patroni's dynamic configuration (the whole cluster's). The old
    value is each parameter's, None where the configuration did not set it (restored by
    removing it again)."""
    kind = "patroni_params"

    def __init__(self, api: str, scope: str, names: list[str], config: str | None = None,
                 instance: str | None = None, engine: str = "postgres", dcs: str | None = None):
        self.api, self.scope, self.names, self.config = api, scope, list(names), config
        self.instance, self.dcs = instance, dcs

    def spec(self) -> dict:
        return {"kind": self.kind, "engine": "postgres", "api": self.api, "scope": self.scope,
                "names": self.names, "config": self.config, "instance": self.instance,
                "dcs": self.dcs}

    def covers(self, other: Action) -> bool:
        """The cluster's configuration is every member's: a member's failed restart puts it
        back."""
        spec = other.spec()
        return spec.get("kind") == "patroni_restart" and spec.get("scope") == self.scope

    def identity(self) -> str:
        """The same through any member's API: the configuration is the cluster's, kept in its
        DCS under its namespace and scope (two clusters may share a scope name on other DCSs)."""
        return f"{self.kind}:{self.dcs}:{self.scope}:{','.join(self.names)}"

    @property
    def label(self) -> str:
        return f"Patroni {self.scope}: postgresql.parameters {', '.join(self.names)}"

    def get(self) -> dict:
        params = (request("GET", f"{self.api}/config").get("postgresql") or {}) \
            .get("parameters") or {}
        return {n: (None if params.get(n) is None else str(params[n])) for n in self.names}

    def set(self, value: dict) -> None:
        request("PATCH", f"{self.api}/config", {"postgresql": {"parameters": value}})

    def verify(self, value: dict) -> tuple[bool, dict]:
        now = self._settled(value)
        return now == value, now

    def restore(self, old: dict) -> None:
        self.set(old)

    def restored(self, old: dict) -> str | None:
        now = self._settled(old)
        return None if now == old else f"it reads {now}, not {old}"

    def _settled(self, value: dict) -> dict:
        """The configuration once the member's view of it has caught up with `value`, or
        as it reads after SETTLE_S. GET /config answers from the member's copy of the DCS,
        refreshed once per HA loop (Patroni's api.py, do_GET_config: dcs.cluster); PATCH
        wakes the loop up, so the change shows within a second or so, not at once
        (measured: read back right after a PATCH, the old value)."""
        deadline = time.monotonic() + SETTLE_S
        while (now := self.get()) != value and time.monotonic() < deadline:
            time.sleep(0.2)
        return now

    def invalid(self, value) -> str | None:
        ok = isinstance(value, dict) and all(v is None or isinstance(v, str)
                                             for v in value.values())
        return None if ok else "is not a set of parameters"

    def describe(self, old, new) -> str:
        return f"{self.label}: " + ", ".join(
            f"{n} {(old or {}).get(n) or '(unset)'} -> {new.get(n) or '(unset)'}"
            for n in self.names)

    def undo_shell(self, old: dict) -> list[str]:
        """patronictl cannot remove a parameter with -p: an old value that was unset is put
        back by hand."""
        unset = [n for n, v in (old or {}).items() if v is None]
        if unset:
            msg = (f"hpadvise: remove {', '.join(unset)} from the postgresql.parameters of "
                   f"Patroni {self.scope} by hand (patronictl edit-config)")
            return [f"echo {shlex.quote(msg)} >&2"]
        return self.shell(old)

    def shell(self, new: dict) -> list[str]:
        cfg = f"-c {shlex.quote(self.config)} " if self.config else ""
        params = " ".join(f"-p {shlex.quote(f'{k}={v}')}" for k, v in new.items()
                          if v is not None)
        return [f"patronictl {cfg}edit-config {shlex.quote(self.scope)} {params} --force"]


class PatroniRestart(Restart):
    """Restart one member through Patroni (POST /restart to its own API), then wait until
    Patroni reports it running again; verified from the postmaster's smaps like any restart.
    `order` puts replicas before the leader."""
    kind = "patroni_restart"

    @property
    def order(self) -> int:
        return 1 if self.s.get("role") in ("primary", "master", "leader") else 0

    @property
    def label(self) -> str:
        return f"restart {self.instance or self.s['datadir']} through Patroni " + \
            (f"({self.s['member']})" if self.s.get('member') else "(member unknown)")

    def preflight(self) -> None:
        PgRestart(**self.s).preflight()

    def set(self, value=True) -> None:
        self.preflight()
        api = self.s["api"]
        try:
            request("POST", f"{api}/restart", {}, timeout=600)
        except ActionError as exc:
            # Patroni restarts a postmaster that failed to start by itself ("restarting
            # after failure already in progress"): then wait for that start, as for ours
            if "already in progress" not in str(exc):
                raise ActionError(f"{self.label} failed: {exc}") from None
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                d = request("GET", f"{api}/patroni", timeout=2)
                if d.get("state") == "running" and not d.get("pending_restart"):
                    return
            except ActionError:
                pass  # its API answers again once Patroni has the server back
            time.sleep(0.5)
        raise ActionError(f"{self.label}: Patroni did not report the member running within "
                          "300 s")

    def verify(self, value=True) -> tuple[bool, str]:
        return PgRestart(**self.s).verify(value)

    def restored(self, old=None) -> str | None:
        return PgRestart(**self.s).restored(old)

    def running(self) -> bool:
        return PgRestart(**self.s).running()

    def shell(self, new=True) -> list[str]:
        cfg = f"-c {shlex.quote(self.s['config'])} " if self.s.get("config") else ""
        return [f"patronictl {cfg}restart {shlex.quote(self.s.get('scope') or 'SCOPE')} "
                f"{shlex.quote(self.s.get('member') or '')} --force".replace("  ", " ")]
