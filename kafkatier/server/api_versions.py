"""What the broker advertises in ApiVersions, and the ApiVersions responses built from it.

The advertised table is not fixed here: the broker advertises exactly the API keys that have a registered
handler, with the version range given at registration, and passes that mapping to :class:`ApiVersionsTable`.
:data:`SUPPORTED` is the reference range per API (Kafka 3.6's ZooKeeper-mode broker, StopReplica extended to
KIP-950's v5, each clamped to what our message classes can decode) for handler authors to pick from.
"""
from __future__ import annotations

from typing import Mapping

from kafka.protocol.metadata import ApiVersionsResponse

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.codec import api_name, request_class, response_class
from kafkatier.protocol.errors import Errors

#: ApiVersions itself: v3 is the first flexible version; v4 (Kafka 3.9, KAFKA-17011) has v3's format and lets a
#: supported feature's min version be 0 (no feature is listed here).
API_VERSIONS_RANGE: tuple[int, int] = (0, 4)

_KAFKA_36_RANGES: dict[int, tuple[int, int]] = {
    ApiKeys.PRODUCE: (0, 9),
    ApiKeys.FETCH: (0, 15),
    ApiKeys.LIST_OFFSETS: (0, 8),
    ApiKeys.METADATA: (0, 12),
    ApiKeys.LEADER_AND_ISR: (0, 7),
    ApiKeys.STOP_REPLICA: (0, 5),  # v5: KIP-950 in ZooKeeper mode
    ApiKeys.UPDATE_METADATA: (0, 8),
    ApiKeys.CONTROLLED_SHUTDOWN: (0, 3),
    ApiKeys.FIND_COORDINATOR: (0, 6),  # v5 (KIP-890) and v6 (KIP-932's SHARE key type) add no field
    ApiKeys.API_VERSIONS: API_VERSIONS_RANGE,
    ApiKeys.CREATE_TOPICS: (0, 7),
    ApiKeys.DELETE_TOPICS: (0, 6),
    ApiKeys.DELETE_RECORDS: (0, 2),
    ApiKeys.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKeys.DESCRIBE_CONFIGS: (0, 4),
    ApiKeys.ALTER_CONFIGS: (0, 2),
    ApiKeys.ALTER_REPLICA_LOG_DIRS: (0, 2),
    ApiKeys.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKeys.CREATE_PARTITIONS: (0, 3),
    ApiKeys.ELECT_LEADERS: (0, 2),
    ApiKeys.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKeys.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKeys.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKeys.DESCRIBE_CLUSTER: (0, 1),
}


def _clamped(ranges: Mapping[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    out = {}
    for key, (lo, hi) in ranges.items():
        req, resp = request_class(key), response_class(key)
        if req is None or resp is None:
            continue
        out[key] = (lo, min(hi, req.max_version, resp.max_version))
    return out


#: Reference ranges (see module docstring); not what is advertised unless a handler registers them.
SUPPORTED: dict[int, tuple[int, int]] = _clamped(_KAFKA_36_RANGES)


class ApiVersionsTable:
    """An immutable advertised table ``{api_key: (min, max)}``.

    ApiVersions (18) is added with :data:`API_VERSIONS_RANGE` when missing, since the server always answers
    it.  Raises ``ValueError`` for a key without message classes, a reversed range, or a maximum our classes
    cannot decode."""

    def __init__(self, supported: Mapping[int, tuple[int, int]]):
        table: dict[int, tuple[int, int]] = {}
        for key, rng in supported.items():
            lo, hi = int(rng[0]), int(rng[1])
            req, resp = request_class(key), response_class(key)
            if req is None or resp is None:
                raise ValueError(f"api key {key} has no message classes; cannot advertise it")
            if not 0 <= lo <= hi:
                raise ValueError(f"{api_name(key)}: invalid version range {lo}..{hi}")
            limit = min(req.max_version, resp.max_version)
            if hi > limit:
                raise ValueError(f"{api_name(key)}: max version {hi} exceeds what we can decode ({limit})")
            table[int(key)] = (lo, hi)
        table.setdefault(ApiKeys.API_VERSIONS, API_VERSIONS_RANGE)
        self._table = dict(sorted(table.items()))

    @property
    def supported(self) -> dict[int, tuple[int, int]]:
        return dict(self._table)

    def range(self, api_key: int) -> tuple[int, int] | None:
        return self._table.get(api_key)

    def is_supported(self, api_key: int, version: int) -> bool:
        rng = self._table.get(api_key)
        return rng is not None and rng[0] <= version <= rng[1]

    def _api_keys(self, version: int) -> list:
        cls = ApiVersionsResponse.ApiVersion
        return [cls(version=version, api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in self._table.items()]

    def response(self, version: int, throttle_time_ms: int = 0) -> ApiVersionsResponse:
        """A successful ApiVersionsResponse of ``version`` listing the table.  v3+ carries no features
        (the tagged feature fields stay at their defaults and are not written)."""
        if not self.is_supported(ApiKeys.API_VERSIONS, version):
            raise ValueError(f"ApiVersions v{version} is not advertised")
        return ApiVersionsResponse(version=version, error_code=Errors.NONE,
                                   api_keys=self._api_keys(version), throttle_time_ms=throttle_time_ms)

    def unsupported_version_response(self) -> ApiVersionsResponse:
        """The answer to an ApiVersions request of a version we do not support: UNSUPPORTED_VERSION, to be
        encoded as ApiVersionsResponse **v0**, still listing the table so the client can pick a version."""
        return ApiVersionsResponse(version=0, error_code=Errors.UNSUPPORTED_VERSION, api_keys=self._api_keys(0))

    def __repr__(self) -> str:
        return f"ApiVersionsTable({self._table})"


__all__ = ["SUPPORTED", "API_VERSIONS_RANGE", "ApiVersionsTable"]
