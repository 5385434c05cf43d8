"""Raw Kafka requests for end-to-end tests: a request built from kafkatier's message specs and sent with
:class:`~kafkatier.server.broker_client.BrokerClient`, its response decoded at the same version."""
from __future__ import annotations

from kafkatier.protocol import codec
from kafkatier.protocol.build import build
from kafkatier.server.broker_client import BrokerClient


def send(client: BrokerClient, api_key: int, version: int, body: dict):
    """One request on an open connection (a throttled or muted channel is seen across calls)."""
    return client.send(build(codec.request_class(api_key), version, body), codec.response_class(api_key), version)


def send_once(host_port: str, api_key: int, version: int, body: dict, *, client_id: str):
    """One request on a connection of its own to ``host:port``."""
    host, port = host_port.rsplit(":", 1)
    client = BrokerClient(host, int(port), client_id=client_id, timeout_s=20)
    try:
        return send(client, api_key, version, body)
    finally:
        client.close()
