"""The agent's check that an engine's port is free: a listener anywhere on the port makes it taken, a port
left in TIME_WAIT by a stopped engine of ours does not."""

import random
import socket

from workers.engine.launch.ports import port_in_use


def listener(host: str, port: int = 0, reuse: bool = False) -> socket.socket:
    sock = socket.socket()
    if reuse:  # as an engine's server (uvicorn) binds
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen()
    return sock


def free_port_outside_the_ephemeral_range() -> int:
    """A free port below Linux's ephemeral range (32768 up), which the kernel never hands to another test
    process's connection or port-0 listener meanwhile (the port next to a listener's once was)."""
    for port in range(random.randrange(20000, 30000), 32768):
        if not port_in_use("127.0.0.1", port):
            return port
    raise AssertionError("no free port between 20000 and 32767")


def test_a_port_another_process_listens_on_is_in_use_on_that_address_and_on_every_address():
    with listener("127.0.0.1") as other:
        port = other.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
        assert port_in_use("0.0.0.0", port)  # noqa: S104  the engine of a node with an address binds all


def test_a_listener_on_every_address_takes_the_port_on_loopback_too():
    with listener("0.0.0.0") as other:  # noqa: S104
        assert port_in_use("127.0.0.1", other.getsockname()[1])


def test_the_port_of_an_engine_that_stopped_is_free_again():
    with listener("127.0.0.1", reuse=True) as other:
        port = other.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _peer = other.accept()
        accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    assert not port_in_use("127.0.0.1", port)


def test_an_engine_whose_kv_side_channel_port_is_taken_is_refused_as_a_taken_port_of_its_own():
    import pytest

    from workers.engine.launch.command import LaunchSpec
    from workers.tasks.deploy_launch import LaunchFailed, refuse_taken_port

    with listener("127.0.0.1") as other:
        taken = other.getsockname()[1]
        own = free_port_outside_the_ephemeral_range()
        spec = LaunchSpec(model_path="/m", served_model_name="m", port=own, log_path="/l", chip="cpu",
                          kv_transfer_config={"kv_connector": "NixlConnector", "kv_port": taken})  # fmt: skip
        with pytest.raises(LaunchFailed) as refused:
            refuse_taken_port(spec)
    # Reported against the engine's own port: the panel moves the pair (panel.deployments.placement.ports).
    assert (refused.value.code, refused.value.details["port"], refused.value.permanent) == (
        "port_in_use", own, True,
    )  # fmt: skip
    assert f"KV transfer port {taken}" in str(refused.value)
