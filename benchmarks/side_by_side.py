"""The resident and simultaneous designs of a validate run: one server per variant, all
resident at once with the same data, switched, restarted and prewarmed at every epoch, then
measured one after the other (resident) or at the same time on CPUs of their own
(simultaneous). Validation (runner.py) takes these steps from here; its restart design, the
measuring and the result stay there."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from hpadvise.act.face import Compact, Pool, SysfsChoice
from hpadvise.api.face import read_meminfo

from .cpus import cpu_groups
from .drivers import BENCHMARKS, resets
from .measure import RunOverrun
from .target import BenchTarget
from .variants import THP_BASE, client_order, group_of, host_wide, phase_at, start_order


class SideBySide:
    """The side-by-side designs' steps, for Validation (which holds the state they use)."""

    def _make_servers(self) -> None:
        """One server per variant for the resident and simultaneous designs: the target, and
        copies with the same data for the others (which variant runs on which server changes
        from epoch to epoch: assign_servers)."""
        o, t = self.o, self.target
        self.made = [(t, self.bench)]
        for i, v in enumerate(self.side_by_side[1:], 2):
            self._update(phase=f"copying the server for variant {v} ({i} of "
                               f"{len(self.side_by_side)})")
            tw = t.twin(self.twins.append)
            self.made.append((tw, tw.driver(o.bench, o.scale, load=False)))
        self.assign_servers(0)

    def assign_servers(self, epoch: int) -> None:
        """Variant i runs on server (i + epoch) mod n in this epoch. A server's own traits
        (the original or a copy; where its files lie on disk and in the page cache) would
        otherwise stay with one variant for the whole run and shift its estimate; rotated,
        they fall on every variant alike and widen the interval instead, as other
        start-to-start variation does."""
        n = len(self.made)
        self.servers = {v: self.made[(i + epoch) % n] for i, v in enumerate(self.side_by_side)}

    @property
    def side_by_side(self) -> list[str]:
        """The variants that get a server of their own side by side: all of them, or with THP
        phases the per-server ones (the THP variants are phases of THP_BASE's server)."""
        return [v for v in self.o.variants if not (self.phases and host_wide(v))]

    def _room_for_a_held_pool(self) -> bool:
        """Whether a 1 GiB pool for the server's buffers can be held while a 4 KiB variant's
        server runs: the buffers in whole GiB, the buffers again and 2 GiB for the rest, as
        design.choose_design asks of two servers side by side."""
        avail = read_meminfo(self.sr).available_kb
        b = self.target.buffers_bytes()
        return avail is not None and -(-b >> 30) * (1 << 30) + b + (2 << 30) <= avail * 1024

    def _epoch_steps(self, v: str, t: BenchTarget):
        """A variant's switches for one server side by side: its own settings only. Pools
        are held for the whole run (switching.reserve_pools) and THP knobs are left alone (a
        recommended plan that changes them runs the restart design)."""
        return [(a, new) for a, new in self.sw.steps(v, t)
                if not isinstance(a, (Pool, Compact, SysfsChoice))]

    def _loop_epochs(self) -> None:
        o = self.o
        epoch = 0
        epoch_times: list[float] = []
        sbs = self.side_by_side
        n = len(sbs)
        groups = cpu_groups(n) if o.pin_cpus else [None] * n
        while True:
            t0, n0 = time.time(), len(self.samples)
            phase = phase_at(epoch, self.phases)
            self._start_epoch(epoch, phase)
            under = f" ({phase})" if phase else ""
            try:
                for r in range(o.rounds):
                    blk = epoch * o.rounds + r
                    if self.design == "simultaneous":
                        # the starting CPU group rotates from block to block (and the
                        # servers trade CPUs within the run: measure.py); whose clients
                        # start first turns too (client_order)
                        jobs = [(v, *self.servers[v], groups[group_of(sbs.index(v), blk, n)])
                                for v in client_order(sbs, blk)]
                        self._update(variant="all at once", block=blk + 1)
                        got = sorted(self._measure(jobs, blk, epoch, phase),
                                     key=lambda s: sbs.index(s.variant))
                    else:
                        order = list(sbs) if blk % 2 == 0 else list(reversed(sbs))
                        got = []
                        for v in order:
                            self._update(variant=v, block=blk + 1)
                            got += self._measure([(v, *self.servers[v], None)], blk, epoch,
                                                 phase)
                    self.samples += got
                    self._update(last_run=f"epoch {epoch + 1}{under} round {r + 1}: " +
                                 ", ".join(f"{s.variant} {s.tps:,.0f} "
                                           f"{BENCHMARKS[o.bench].rate}" for s in got))
            except RunOverrun:
                del self.samples[n0:]  # only whole epochs count (every CPU, every round)
                raise
            finally:
                # every variant's knobs back, the servers still running (as the restart
                # design does after each run): the next epoch's plan is read off running
                # servers, and a pool shrunk under a server keeps its pages as surplus
                self.sw.unapply()
            epoch += 1
            epoch_times.append(time.time() - t0)
            if self._done(epoch_times):
                return

    def _start_epoch(self, epoch: int, phase: str | None = None) -> None:
        """Every server switched into its variant, (re)started and prewarmed. The switches are
        read off the running servers (the plan needs them running); then every server stops,
        the host takes the epoch's THP phase (its knob, before any server starts: THP
        applies to memory faulted after it), and the variants that take huge pages start
        first, so that a server on `huge_pages = try` finds no free pages of the held pools
        and stays on 4 KiB pages."""
        self.assign_servers(epoch)
        sbs = self.side_by_side
        steps = {v: self._epoch_steps(v, self.servers[v][0]) for v in sbs}
        self._update(phase=f"epoch {epoch + 1}: stopping the servers")
        # at once: each stop's checkpoint writes its own server's dirty pages, waiting for none
        with ThreadPoolExecutor(len(self.servers)) as ex:
            list(ex.map(lambda t: t.stop(), [t for t, _ in self.servers.values()]))
        for t, _ in self.servers.values() if resets(self.bench) else ():
            t.reset_data()  # a replay's data as before its log
        if phase:
            base = self.servers[THP_BASE][0]
            self._update(phase=f"epoch {epoch + 1}: THP phase {phase}", variant=phase)
            self.sw.current = phase
            self.sw.apply(self.sw.steps(phase, base), base)
        for v in sbs:
            self._update(phase=f"epoch {epoch + 1}: switching {v}", variant=v)
            self.sw.current = v
            self.sw.apply(steps[v], self.servers[v][0])
        for v in start_order(sbs, epoch):
            t, _ = self.servers[v]
            self._update(phase=f"epoch {epoch + 1}: starting {v}", variant=v)
            self.restarted = True
            t.restart()
            self._update(phase=f"epoch {epoch + 1}: prewarming {v}")
            t.prewarm()

    def _server_no(self, t: BenchTarget) -> int | None:
        return next((i for i, (m, _) in enumerate(self.made) if m is t), None)
