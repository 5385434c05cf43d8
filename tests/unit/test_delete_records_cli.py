"""``kafkatier delete-records``: the offset JSON file rules and messages
(docs/kip-107-delete-records.md#the-command-line-tool), option names."""
from __future__ import annotations

import pytest

from kafkatier.cli import main as cli_main
from kafkatier.cli.delete_records import OffsetJsonError, dedup, load_offset_json_file, parse_offset_json


def test_parses_kafka_format_in_file_order():
    text = '{"partitions":[{"topic":"foo","partition":1,"offset":1},{"topic":"bar","partition":0,"offset":-1}],' \
           '"version":1}'
    assert parse_offset_json(text) == [(("foo", 1), 1), (("bar", 0), -1)]


def test_version_defaults_to_one_and_extra_fields_are_ignored():
    text = '{"partitions":[{"topic":"t","partition":0,"offset":5,"comment":"x"}],"other":true}'
    assert parse_offset_json(text) == [(("t", 0), 5)]


@pytest.mark.parametrize("text, message", [
    ('{"partitions":[],"version":2}', "Not supported version field value 2"),
    ('{"partitions":[],"version":"1"}', 'Not supported version field value "1"'),
    ('{"version":1}', "Missing partitions field"),
    ("{not json", "The input string is not a valid JSON"),
    ('{"partitions":[{"partition":0,"offset":1}]}', "No such field exists: `topic`"),
    ('{"partitions":[{"topic":"t","offset":1}]}', "No such field exists: `partition`"),
    ('{"partitions":[{"topic":"t","partition":0}]}', "No such field exists: `offset`"),
    ('{"partitions":[{"topic":"t","partition":"0","offset":1}]}', "Expected `int` value for `partition`"),
    ('{"partitions":[{"topic":"t","partition":0,"offset":1.5}]}', "Expected `long` value for `offset`"),
    ('{"partitions":[{"topic":1,"partition":0,"offset":1}]}', "Expected `string` value for `topic`"),
    ('{"partitions":[{"topic":"t","partition":4294967296,"offset":1}]}', "does not fit in a int"),
])
def test_bad_files_have_one_line_messages(text, message):
    with pytest.raises(OffsetJsonError) as e:
        parse_offset_json(text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_duplicates_are_listed_comma_joined():
    entries = [(("t", 0), 1), (("t", 1), 1), (("t", 0), 2), (("u", 3), 1), (("u", 3), 4), (("t", 0), 3)]
    with pytest.raises(OffsetJsonError, match=r"^Offset json file contains duplicate topic partitions: t-0,u-3$"):
        dedup(entries)


def test_missing_file(tmp_path):
    with pytest.raises(OffsetJsonError, match="Cannot read offset json file"):
        load_offset_json_file(str(tmp_path / "nope.json"))


@pytest.mark.parametrize("option", ["--offset-json-file", "--delete-offset-json-file"])
def test_option_names_and_exit_status_two_for_a_bad_file(tmp_path, capsys, option):
    f = tmp_path / "offsets.json"
    f.write_text('{"partitions":[{"topic":"t","partition":0,"offset":1},{"topic":"t","partition":0,"offset":1}]}')
    # No broker at this address: a bad file must fail before anything connects.
    rc = cli_main.main(["delete-records", "--bootstrap-server", "127.0.0.1:1", option, str(f)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""
    assert err.strip().endswith("Offset json file contains duplicate topic partitions: t-0")
    assert len(err.strip().splitlines()) == 1
