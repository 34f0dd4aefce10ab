"""A gang's rank 0 checks it can listen on its master port before it starts."""

from __future__ import annotations

import socket

from runplane.agent.gang import master_port_refusal


def test_a_port_in_use_is_refused_a_free_one_is_not() -> None:
    assert master_port_refusal(None) is None  # not rank 0 of a gang
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        refusal = master_port_refusal(port)
        assert refusal is not None
        assert refusal.startswith(f"gang master port {port} is not free on this node: ")
    assert master_port_refusal(port) is None  # free again
