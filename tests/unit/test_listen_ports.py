"""The ports scratch servers listen on stay out of the range from which outgoing connections
take their local ports: a pgbench client's connection holding the port a server was given made
that server fail to bind ("Address already in use")."""

import socket

from hpadvise.benchmarks.target import LISTEN_FLOOR, free_port, listen_ports


def test_listen_ports_leave_out_the_ephemeral_and_reserved_ranges():
    ports = listen_ports("32768\t60999\n", "40000-40010,50000\n")
    assert ports[0] == LISTEN_FLOOR and ports[-1] == 65535
    assert 32767 in ports and 61000 in ports
    assert not [p for p in ports if 32768 <= p <= 60999]
    assert len(ports) == (32768 - LISTEN_FLOOR) + (65535 - 61000 + 1)
    # the reserved ones are outside the range here, so nothing else goes
    assert listen_ports("20000 30000", "10005,10010-10012") == [
        p for p in [*range(LISTEN_FLOOR, 20000), *range(30001, 65536)]
        if p not in (10005, 10010, 10011, 10012)]


def test_unreadable_range_gives_no_ports():
    assert listen_ports("") == [] and listen_ports("32768") == [] and listen_ports("a b") == []


def test_free_port_is_outside_this_hosts_range_and_bindable():
    """On this host's own ranges: every port free_port gives is one of listen_ports (where the
    ranges leave any; else the kernel's pick) and can be bound."""
    from hpadvise.benchmarks.target import PORT_RANGE, RESERVED_PORTS
    with open(PORT_RANGE) as f, open(RESERVED_PORTS) as g:
        allowed = set(listen_ports(f.read(), g.read()))
    ports = {free_port() for _ in range(20)}
    assert not allowed or ports <= allowed, (ports - allowed)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_free_port_skips_a_port_something_holds(monkeypatch):
    """With the choice narrowed to one port that a listening socket holds, free_port passes it
    by and takes one the kernel picks."""
    import hpadvise.benchmarks.target as target
    with socket.socket() as server:
        server.bind(("127.0.0.1", free_port()))
        server.listen()
        held = server.getsockname()[1]
        monkeypatch.setattr(target, "listen_ports", lambda *a: [held])
        port = target.free_port()
        assert port != held
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
