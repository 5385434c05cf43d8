"""Tiered-storage rules for topic configs (tiered_storage.md §3) and the creation of a topic's KIP-950
``tieredstorage`` znodes (zookeeper.md §11), plugged into the admin path.

Rules, in Kafka's order, when the new config has ``remote.storage.enable=true``:

1. the broker's ``remote.log.storage.system.enable`` is off -> refused;
2. ``cleanup.policy`` contains ``compact`` -> refused;
3. ``local.retention.bytes`` against ``retention.bytes``, then 4. ``local.retention.ms`` against ``retention.ms``;
5. with ``remote.log.copy.disable=true``: the local and total retention must be equal (or local -2).

Otherwise, if the *existing* config had ``remote.storage.enable=true``: switching it off requires
``remote.log.delete.on.disable=true``.  Every refusal is INVALID_CONFIG with Kafka's (or the seed's) text, except
an unsupported value of a KIP-950 policy config (``remote.log.copy.disable``, ``remote.log.delete.on.disable``),
which is INVALID_REQUEST (seed 000) and is checked before the values are parsed.

Znodes: the first time a topic has ``remote.storage.enable=true`` (at creation, or with the first enabling
config change), ``tieredstorage``, ``tiered_epoch`` = 0 and ``state`` = ENABLED (DISABLED when the topic starts
read-only) are created in the same ZooKeeper multi as the config write.  State changes of existing znodes
(disablement, re-enable) are the KIP-950 disablement's.

Nothing is active until :func:`install` is called (the broker does it at start-up): the validators go into
:data:`topic_config.EXTRA_VALIDATORS` / :data:`topic_config.PRE_VALIDATORS`, the znode hooks into the given
``AdminZkClient``'s hook lists.
"""
from __future__ import annotations

from typing import Any, Mapping

from kafkatier.admin import topic_config as tc
from kafkatier.log.remote.tiered_state import creation_ops
from kafkatier.protocol.errors import InvalidConfigurationError, InvalidRequestError

SYSTEM_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote "
                   "log storage.")
COMPACTED_UNSUPPORTED = "Remote log storage is unsupported for the compacted topics"
COPY_DISABLED_BYTES = ("When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and "
                       "`retention.bytes` must be set to the identical value because there will be no more logs "
                       "copied to the remote storage.")
COPY_DISABLED_MS = ("When `remote.log.copy.disable` is set to true, the `local.retention.ms` and `retention.ms` "
                    "must be set to the identical value because there will be no more logs copied to the remote "
                    "storage.")
DISABLE_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data, "
    "but turn to read only, please set `remote.log.copy.disable=true`. If you want to disable remote storage and "
    "delete all remote data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def _flag(config: Mapping[str, Any], name: str) -> bool:
    v = config.get(name)
    return str(v).strip().lower() == "true" if v is not None else False


def _check_local_retention(kind: str, total: int, local: int) -> None:
    """``validateRemoteStorageRetentionSize`` / ``...Time``: local -2 passes; -1 or more than the total fails."""
    if total == -1 or local == -2:
        return
    name, total_name = f"local.retention.{kind}", f"retention.{kind}"
    if local == -1:
        raise tc.config_exception(name, local, f"Value must not be -1 as {total_name} value is set as {total}.")
    if local > total:
        raise tc.config_exception(name, local, f"Value must not be more than {total_name} property value: {total}")


def validate_tiered_storage(ctx: tc.TopicConfigValidation) -> None:
    """The EXTRA_VALIDATORS rule (see the module docstring)."""
    values = ctx.values
    if values["remote.storage.enable"]:
        if not ctx.remote_log_storage_system_enable:
            raise InvalidConfigurationError(SYSTEM_DISABLED)
        if any("compact" in str(p).strip().lower() for p in values["cleanup.policy"]):
            raise InvalidConfigurationError(COMPACTED_UNSUPPORTED)
        _check_local_retention("bytes", values["retention.bytes"], values["local.retention.bytes"])
        _check_local_retention("ms", values["retention.ms"], values["local.retention.ms"])
        if values["remote.log.copy.disable"]:
            for kind, message in (("bytes", COPY_DISABLED_BYTES), ("ms", COPY_DISABLED_MS)):
                local = values[f"local.retention.{kind}"]
                if local != -2 and local != values[f"retention.{kind}"]:
                    raise InvalidConfigurationError(message)
    elif _flag(ctx.existing, "remote.storage.enable") and not values["remote.log.delete.on.disable"]:
        raise InvalidConfigurationError(DISABLE_WITHOUT_DELETE)


POLICY_CONFIGS = ("remote.log.copy.disable", "remote.log.delete.on.disable")


def validate_policy_values(props: Mapping[str, Any]) -> None:
    """KIP-950: an unsupported value of a disablement policy config is INVALID_REQUEST (42), not INVALID_CONFIG
    (seed 000, "other invalid formatted requests, such as an unsupported disablement policy option")."""
    for name in POLICY_CONFIGS:
        v = props.get(name)
        if v is not None and str(v).strip().lower() not in ("true", "false"):
            raise InvalidRequestError(f"Invalid value {v} for configuration {name}: Expected value to be either "
                                      f"true or false")


def before_topic_create(zk, topic: str, config: Mapping[str, str], assignment: Mapping[int, Any], ops: list) -> None:
    """Create the ``tieredstorage`` znodes with a topic created tiered."""
    ops.extend(creation_ops(zk, topic, config, creating_topic=True))


def before_config_change(zk, topic: str, old: Mapping[str, str], new: Mapping[str, str], ops: list) -> None:
    """Create the ``tieredstorage`` znodes with the first config change that enables tiering."""
    ops.extend(creation_ops(zk, topic, new, creating_topic=False))


def install(admin: Any | None = None) -> None:
    """Activate the rules (idempotent); with an ``AdminZkClient``, also its znode hooks."""
    if validate_tiered_storage not in tc.EXTRA_VALIDATORS:
        tc.EXTRA_VALIDATORS.append(validate_tiered_storage)
    if validate_policy_values not in tc.PRE_VALIDATORS:
        tc.PRE_VALIDATORS.append(validate_policy_values)
    if admin is not None:
        if before_topic_create not in admin.before_topic_create:
            admin.before_topic_create.append(before_topic_create)
        if before_config_change not in admin.before_config_change:
            admin.before_config_change.append(before_config_change)


def uninstall(admin: Any | None = None) -> None:
    """Undo :func:`install` (tests)."""
    while validate_tiered_storage in tc.EXTRA_VALIDATORS:
        tc.EXTRA_VALIDATORS.remove(validate_tiered_storage)
    while validate_policy_values in tc.PRE_VALIDATORS:
        tc.PRE_VALIDATORS.remove(validate_policy_values)
    if admin is not None:
        for lst, hook in ((admin.before_topic_create, before_topic_create),
                          (admin.before_config_change, before_config_change)):
            while hook in lst:
                lst.remove(hook)
