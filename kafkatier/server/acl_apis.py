"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): Kafka's ``AclApis`` (ZooKeeper mode), v0-3.

The handlers translate the wire codes to the authorizer's names and back; filter semantics and storage live in
:mod:`kafkatier.server.acl`.  Checks, as Kafka: DESCRIBE on the cluster for DescribeAcls (else a top-level
CLUSTER_AUTHORIZATION_FAILED), ALTER on the cluster for CreateAcls and DeleteAcls (else every creation / filter
answers CLUSTER_AUTHORIZATION_FAILED); without an authorizer every answer is SECURITY_DISABLED ("No Authorizer
is configured on the broker").  A creation is INVALID_REQUEST when a code is unknown or ANY / MATCH, the
pattern type is not LITERAL or PREFIXED, the principal is not ``<type>:<name>``, the name is empty or contains
``/``, or a CLUSTER resource is not named ``kafka-cluster``; a filter with an unknown code is INVALID_REQUEST.
Kafka answers from the broker that receives the request (no forwarding in ZooKeeper mode): so do we.
"""
from __future__ import annotations

from typing import Any, Callable

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors
from kafkatier.server.acl import AclBinding, AclBindingFilter, AclEntry, AclFormatError, ResourcePattern
from kafkatier.server.auth_helper import CLUSTER_NAME, OPERATION_CODES, AuthHelper

log = get_logger("server.acl-apis")

VERSIONS = (0, 3)

#: Kafka's wire codes (``ResourceType``, ``PatternType``, ``AclPermissionType``); 0 is UNKNOWN everywhere.
RESOURCE_TYPE_CODES = {"Any": 1, "Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5, "DelegationToken": 6,
                       "User": 7}
PATTERN_TYPE_CODES = {"ANY": 1, "MATCH": 2, "LITERAL": 3, "PREFIXED": 4}
PERMISSION_CODES = {"Any": 1, "Deny": 2, "Allow": 3}
SECURITY_DISABLED_MESSAGE = "No Authorizer is configured on the broker"


def _name(codes: dict[str, int], code: int, what: str) -> str:
    for name, c in codes.items():
        if c == code:
            return name
    raise AclFormatError(f"unknown {what} code {code}")


def binding_from_creation(c) -> AclBinding:
    """A CreateAcls creation as a binding; :class:`AclFormatError` says why it is invalid."""
    rtype = _name(RESOURCE_TYPE_CODES, c.resource_type, "resource type")
    ptype = _name(PATTERN_TYPE_CODES, c.resource_pattern_type, "pattern type")
    op = _name(OPERATION_CODES, c.operation, "operation")
    perm = _name(PERMISSION_CODES, c.permission_type, "permission type")
    if "Any" in (rtype, op, perm) or ptype not in ("LITERAL", "PREFIXED"):
        raise AclFormatError("Invalid ACL creation: ANY or MATCH is not a valid resource type, pattern type, "
                             "operation or permission type")
    if rtype == "Cluster" and c.resource_name != CLUSTER_NAME:
        raise AclFormatError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not c.resource_name:
        raise AclFormatError("Invalid empty resource name specified")
    if "/" in c.resource_name:
        raise AclFormatError(f"ACL binding contains invalid resource name: {c.resource_name}")
    principal = c.principal or ""
    if ":" not in principal or not principal.split(":", 1)[1]:
        raise AclFormatError(f"Invalid principal {principal!r}: expected <type>:<name>")
    return AclBinding(ResourcePattern(rtype, c.resource_name, ptype),
                      AclEntry(principal, perm, op, c.host or "*"))


def filter_from_request(f) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type=_name(RESOURCE_TYPE_CODES, f.resource_type_filter, "resource type"),
        name=f.resource_name_filter,
        pattern_type=_name(PATTERN_TYPE_CODES, getattr(f, "pattern_type_filter", 3), "pattern type"),
        principal=f.principal_filter, host=f.host_filter,
        operation=_name(OPERATION_CODES, f.operation, "operation"),
        permission_type=_name(PERMISSION_CODES, f.permission_type, "permission type"))


class AclApis:
    """The three ACL request handlers over the broker's authorizer (None: SECURITY_DISABLED)."""

    def __init__(self, authorizer, auth: AuthHelper):
        self.authorizer = authorizer
        self.auth = auth

    def handlers(self) -> dict[int, tuple[tuple[int, int], Callable]]:
        return {ApiKeys.DESCRIBE_ACLS: (VERSIONS, self.handle_describe_acls),
        ApiKeys.CREATE_ACLS: (VERSIONS, self.handle_create_acls),
                ApiKeys.DELETE_ACLS: (VERSIONS, self.handle_delete_acls)}

    def _refusal(self, context, operation: str) -> tuple[Errors, str] | None:
        if self.authorizer is None:
            return Errors.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE
        if not self.auth.authorize_cluster(context, operation):
            return Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
        return None

    def handle_describe_acls(self, header, req, context) -> Any:
        v = header.request_api_version
        cls = codec.response_class(ApiKeys.DESCRIBE_ACLS)
        refused = self._refusal(context, "Describe")
        if refused is not None:
            return build(cls, v, {"throttle_time_ms": 0, "error_code": int(refused[0]), "error_message": refused[1],
                                  "resources": []})
        try:
            bindings = self.authorizer.acls(filter_from_request(req))
        except AclFormatError as e:
            return build(cls, v, {"throttle_time_ms": 0, "error_code": int(Errors.INVALID_REQUEST),
                                  "error_message": str(e), "resources": []})
        by_pattern: dict[ResourcePattern, list[AclEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, []).append(b.entry)
        return build(cls, v, {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
            {"resource_type": RESOURCE_TYPE_CODES[p.resource_type], "resource_name": p.name,
             "pattern_type": PATTERN_TYPE_CODES[p.pattern_type],
             "acls": [{"principal": e.principal, "host": e.host, "operation": OPERATION_CODES[e.operation],
                       "permission_type": PERMISSION_CODES[e.permission_type]} for e in entries]}
            for p, entries in by_pattern.items()]})

    def handle_create_acls(self, header, req, context) -> Any:
        v = header.request_api_version
        refused = self._refusal(context, "Alter")
        results: list[dict] = []
        valid: list[tuple[dict, AclBinding]] = []
        for c in req.creations:
            res = {"error_code": 0, "error_message": None}
            results.append(res)
            if refused is not None:
                res.update(error_code=int(refused[0]), error_message=refused[1])
                continue
            try:
                valid.append((res, binding_from_creation(c)))
            except AclFormatError as e:
                res.update(error_code=int(Errors.INVALID_REQUEST), error_message=str(e))
        for res, binding in valid:
            try:
                self.authorizer.create_acls([binding])
            except Exception as e:  # noqa: BLE001 - per creation, as Kafka (ApiError.fromThrowable)
                log.exception("ACL creation failed %s", kv(binding=binding))
                res.update(error_code=int(Errors.UNKNOWN_SERVER_ERROR), error_message=str(e))
        log.info("CreateAcls %s", kv(principal=getattr(context, "principal", None),
                                     created=sum(1 for r, _ in valid if not r["error_code"]),
                                     failed=sum(1 for r in results if r["error_code"])))
        return build(codec.response_class(ApiKeys.CREATE_ACLS), v, {"throttle_time_ms": 0, "results": results})

    def handle_delete_acls(self, header, req, context) -> Any:
        v = header.request_api_version
        refused = self._refusal(context, "Alter")
        results = []
        for f in req.filters:
            res: dict = {"error_code": 0, "error_message": None, "matching_acls": []}
            results.append(res)
            if refused is not None:
                res.update(error_code=int(refused[0]), error_message=refused[1])
                continue
            try:
                deleted = self.authorizer.delete_acls(filter_from_request(f))
            except AclFormatError as e:
                res.update(error_code=int(Errors.INVALID_REQUEST), error_message=str(e))
                continue
            except Exception as e:  # noqa: BLE001
                log.exception("ACL deletion failed")
                res.update(error_code=int(Errors.UNKNOWN_SERVER_ERROR), error_message=str(e))
                continue
            res["matching_acls"] = [
                {"error_code": 0, "error_message": None,
                 "resource_type": RESOURCE_TYPE_CODES[b.pattern.resource_type], "resource_name": b.pattern.name,
                 "pattern_type": PATTERN_TYPE_CODES[b.pattern.pattern_type], "principal": b.entry.principal,
                 "host": b.entry.host, "operation": OPERATION_CODES[b.entry.operation],
                 "permission_type": PERMISSION_CODES[b.entry.permission_type]} for b in deleted]
        return build(codec.response_class(ApiKeys.DELETE_ACLS), v, {"throttle_time_ms": 0, "filter_results": results})
