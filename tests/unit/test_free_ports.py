"""The tests' servers take the ports `free_port` chooses: a port chosen and not yet bound (a Redis
Cluster node's bus port, chosen before its own; nginx's two listeners) must not be chosen again."""

from __future__ import annotations

from tests.servers import free_port


def test_no_port_is_handed_out_twice_before_its_server_binds_it():
    # Nothing binds these: as many as a suite run's xdist worker starts servers on, and more.
    ports = [free_port() for _ in range(1000)]
    assert len(set(ports)) == len(ports)
