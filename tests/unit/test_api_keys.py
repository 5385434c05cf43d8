"""ApiKeys: Kafka's numbers and message names, once; no module redefines a key as an integer of its own."""
import ast
import pathlib

from kafka.protocol.api_key import ApiKey

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol import codec

ROOT = pathlib.Path(__file__).resolve().parents[2] / "kafkatier"


def test_numbers_and_message_names_match_the_protocol():
    for key in ApiKeys:
        assert ApiKey(key.value).name == key.message_name or key.value == 74   # 74 renamed after Kafka 3.9
    assert ApiKeys.STOP_REPLICA.message_name == "StopReplica"
    assert ApiKeys.for_id(5) is ApiKeys.STOP_REPLICA and ApiKeys.for_id(9999) is None


def test_every_registered_message_has_a_key():
    for key in codec.REGISTRY:
        assert ApiKeys.for_id(key) is not None, key


def _constant_redefinitions(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        for t, v in zip(targets, values):
            if (isinstance(t, ast.Name) and t.id in ApiKeys.__members__ and isinstance(v, ast.Constant)
                    and v.value == ApiKeys[t.id].value):
                yield f"{path.relative_to(ROOT.parent)}:{node.lineno} {t.id}"


# The controller's request batch is another helper's area this session; its (key, name, version) tuples go next.
ALLOWED = {"kafkatier/controller/request_batch.py"}


def test_no_module_redefines_an_api_key():
    found = [hit for p in sorted(ROOT.rglob("*.py")) if str(p.relative_to(ROOT.parent)) not in ALLOWED
             for hit in _constant_redefinitions(p)]
    assert found == []
