"""What the broker advertises in ApiVersions, and the ApiVersions responses built from it.

The advertised table is not fixed here: the broker advertises exactly the API keys that have a registered
handler, with the version range given at registration, and passes that mapping to :class:`ApiVersionsTable`.
:data:`SUPPORTED` is the reference range per API (Kafka 3.6's ZooKeeper-mode broker, StopReplica extended to
KIP-950's v5, each clamped to what our message classes can decode) for handler authors to pick from.
"""
from __future__ import annotations

from typing import Mapping

from kafka.protocol.metadata import ApiVersionsResponse

from kafkatier.protocol.codec import API_VERSIONS_KEY, api_name, request_class, response_class
from kafkatier.protocol.errors import Errors

#: ApiVersions itself: v3 is Kafka 3.x's newest (first flexible) version.
API_VERSIONS_RANGE: tuple[int, int] = (0, 3)

_KAFKA_36_RANGES: dict[int, tuple[int, int]] = {
    0: (0, 9),     # Produce
    1: (0, 15),    # Fetch
    2: (0, 8),     # ListOffsets
    3: (0, 12),    # Metadata
    4: (0, 7),     # LeaderAndIsr
    5: (0, 5),     # StopReplica (v5: KIP-950, ZooKeeper mode)
    6: (0, 8),     # UpdateMetadata
    7: (0, 3),     # ControlledShutdown
    10: (0, 4),    # FindCoordinator
    18: API_VERSIONS_RANGE,
    19: (0, 7),    # CreateTopics
    20: (0, 6),    # DeleteTopics
    21: (0, 2),    # DeleteRecords
    23: (0, 4),    # OffsetForLeaderEpoch
    32: (0, 4),    # DescribeConfigs
    33: (0, 2),    # AlterConfigs
    34: (0, 2),    # AlterReplicaLogDirs
    35: (0, 4),    # DescribeLogDirs
    37: (0, 3),    # CreatePartitions
    43: (0, 2),    # ElectLeaders
    44: (0, 1),    # IncrementalAlterConfigs
    45: (0, 0),    # AlterPartitionReassignments
    46: (0, 0),    # ListPartitionReassignments
    60: (0, 1),    # DescribeCluster
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
        table.setdefault(API_VERSIONS_KEY, API_VERSIONS_RANGE)
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
        if not self.is_supported(API_VERSIONS_KEY, version):
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
