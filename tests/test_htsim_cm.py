"""htsim connection-matrix reader: fields, tolerance, and file:line errors."""

import numpy as np
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.workload.flows import TRIGGER_BARRIER, TRIGGER_MULTISHOT, TRIGGER_ONESHOT
from multiverse_jax.workload.htsim_cm import load_cm

SPEC_EXAMPLE = """Nodes 16
Connections 3
Triggers 1
0->15 id 1 start 0 size 1000000 send_done_trigger 1
1->15 id 2 start 10000000 size 500000
2->14 id 3 trigger 1 size 2000000
trigger id 1 oneshot
"""


def write(tmp_path, text, name="w.cm", newline="\n"):
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def test_spec_example(tmp_path):
    path = write(tmp_path, SPEC_EXAMPLE)
    flows = load_cm(path)
    assert len(flows) == 3
    np.testing.assert_array_equal(flows.flow_id, [1, 2, 3])
    np.testing.assert_array_equal(flows.src, [0, 1, 2])
    np.testing.assert_array_equal(flows.dst, [15, 15, 14])
    np.testing.assert_array_equal(flows.size_bytes, [1000000, 500000, 2000000])
    np.testing.assert_array_equal(flows.start_ps, [0, 10_000_000, -1])
    np.testing.assert_array_equal(flows.prio, [0, 0, 0])
    np.testing.assert_array_equal(flows.trigger, [-1, -1, 0])
    np.testing.assert_array_equal(flows.send_done_trigger, [0, -1, -1])
    np.testing.assert_array_equal(flows.recv_done_trigger, [-1, -1, -1])
    np.testing.assert_array_equal(flows.line, [4, 5, 6])
    assert flows.source == str(path)
    assert flows.flow_id.dtype == np.int64 and flows.start_ps.dtype == np.int64
    assert flows.src.dtype == np.int32 and flows.trigger.dtype == np.int32
    t = flows.triggers
    np.testing.assert_array_equal(t.trigger_id, [1])
    np.testing.assert_array_equal(t.kind, [TRIGGER_ONESHOT])
    np.testing.assert_array_equal(t.count, [1])
    np.testing.assert_array_equal(t.line, [7])


def test_trigger_index_mapping_and_any_order(tmp_path):
    text = """# comment line
Connections 4
Triggers 3
Nodes 8

0->1 size 100 start 0 id 10 recv_done_trigger 7 prio 2
4->5 send_done_trigger 42 addon size 300 start 5 id 20
trigger id 42 barrier count 1
2->3 size 200 trigger 7 id 30
3->2 id 40 size 50 trigger 42 send_done_trigger 9   
trigger   id 7    multishot
trigger id 9 oneshot
"""
    flows = load_cm(write(tmp_path, text))
    np.testing.assert_array_equal(flows.flow_id, [10, 20, 30, 40])
    np.testing.assert_array_equal(flows.prio, [2, 0, 0, 0])
    np.testing.assert_array_equal(flows.start_ps, [0, 5, -1, -1])
    # trigger table in file order: 42 -> 0, 7 -> 1, 9 -> 2
    np.testing.assert_array_equal(flows.triggers.trigger_id, [42, 7, 9])
    np.testing.assert_array_equal(flows.triggers.kind, [TRIGGER_BARRIER, TRIGGER_MULTISHOT, TRIGGER_ONESHOT])
    np.testing.assert_array_equal(flows.triggers.count, [1, 1, 1])
    np.testing.assert_array_equal(flows.triggers.line, [8, 11, 12])
    np.testing.assert_array_equal(flows.trigger, [-1, -1, 1, 0])
    np.testing.assert_array_equal(flows.recv_done_trigger, [1, -1, -1, -1])
    np.testing.assert_array_equal(flows.send_done_trigger, [-1, 0, -1, 2])
    np.testing.assert_array_equal(flows.line, [6, 7, 9, 10])


def test_crlf_and_whitespace(tmp_path):
    flows = load_cm(write(tmp_path, SPEC_EXAMPLE.replace(" ", "  \t"), newline="\r\n"))
    np.testing.assert_array_equal(flows.start_ps, [0, 10_000_000, -1])
    np.testing.assert_array_equal(flows.line, [4, 5, 6])


@pytest.mark.parametrize(
    "text,expected",
    [("1e6", 1_000_000), ("1000000", 1_000_000), ("2.5e7", 25_000_000), ("123456789123", 123456789123)],
)
def test_start_parsed_exactly(tmp_path, text, expected):
    flows = load_cm(write(tmp_path, f"Nodes 2\nConnections 1\n0->1 start {text} size 10\n"))
    assert int(flows.start_ps[0]) == expected


def test_missing_id_uses_position(tmp_path):
    flows = load_cm(write(tmp_path, "Nodes 3\nConnections 2\n0->1 start 0 size 10\n1->2 start 0 size 10\n"))
    np.testing.assert_array_equal(flows.flow_id, [1, 2])


HEAD = "Nodes 4\nConnections 2\n"


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        (HEAD + "0->1 id 1 start 0 size 10 bogus 3\n1->2 id 2 start 0 size 1\n", 3, "unknown flow token 'bogus'"),
        (HEAD + "0->1 id 1 start 0 size 10\n1->2 id 2 start 0 size\n", 4, "missing its value"),
        (HEAD + "0->1 id 1 start 0 size ten\n1->2 id 2 start 0 size 1\n", 3, "expected an integer"),
        (HEAD + "0->1 id 1 start soon size 10\n1->2 id 2 start 0 size 1\n", 3, "expected a number"),
        (HEAD + "0->1 id 1 start 0 size 0\n1->2 id 2 start 0 size 1\n", 3, "size must be > 0"),
        (HEAD + "0->1 id 1 start 0 size -5\n1->2 id 2 start 0 size 1\n", 3, "size must be > 0"),
        (HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start -1 size 1\n", 4, "start must be >= 0"),
        (HEAD + "0->1 id 0 start 0 size 5\n1->2 id 2 start 0 size 1\n", 3, "id must be > 0"),
        (HEAD + "0->1 id 1 start 0 size 5\n1->2 id 1 start 0 size 1\n", 4, "duplicate flow id 1"),
        (HEAD + "0->4 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n", 3, "unknown host dst=4"),
        (HEAD + "0->1 id 1 start 0 size 5\n9->2 id 2 start 0 size 1\n", 4, "unknown host src=9"),
        (HEAD + "0->1 id 1 start 0 size 5\n2->2 id 2 start 0 size 1\n", 4, "both host 2"),
        (HEAD + "0-1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n", 3, "unknown line"),
        (HEAD + "0->x id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n", 3, "malformed flow endpoints"),
        (HEAD + "0->1->2 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n", 3, "malformed flow endpoints"),
        (HEAD + "0->1 id 1 size 5\n1->2 id 2 start 0 size 1\n", 3, "exactly one of 'start"),
        (HEAD + "0->1 id 1 start 0 size 5 trigger 1\n1->2 id 2 start 0 size 1 send_done_trigger 1\n"
         "trigger id 1 oneshot\n", 3, "has both"),
        (HEAD + "0->1 start 0 size 5\n1->2 size 1 trigger 1\n", 4, "needs an 'id'"),
        (HEAD + "0->1 id 1 start 0 size 5 start 1\n1->2 id 2 start 0 size 1\n", 3, "given twice"),
        (HEAD + "0->1 id 1 start 0\n1->2 id 2 start 0 size 1\n", 3, "no 'size"),
        (HEAD + "0->1 id 1 start 0 size 5\n", 2, "Connections 2 but the file has 1 flow lines"),
        ("Nodes 4\nConnections 1\nTriggers 2\n0->1 id 1 start 0 size 5 send_done_trigger 1\n"
         "trigger id 1 oneshot\n", 3, "Triggers 2 but the file has 1 trigger lines"),
        (HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 trigger 3 size 1\n", 4, "trigger 3 refers to a trigger with no"),
        (HEAD + "0->1 id 1 start 0 size 5 send_done_trigger 8\n1->2 id 2 start 0 size 1\n", 3,
         "send_done_trigger 8 refers"),
        (HEAD + "0->1 id 1 start 0 size 5 send_done_trigger 1\n1->2 id 2 trigger 1 size 1\n"
         "trigger id 1 oneshot\ntrigger id 1 oneshot\n", 6, "duplicate trigger id 1"),
        (HEAD + "0->1 id 1 start 0 size 5 send_done_trigger 1\n1->2 id 2 trigger 1 size 1\n"
         "trigger id 1 barrier\n", 5, "needs 'count"),
        (HEAD + "0->1 id 1 start 0 size 5 send_done_trigger 1\n1->2 id 2 trigger 1 size 1\n"
         "trigger id 1 barrier count 0\n", 5, "count must be > 0"),
        (HEAD + "0->1 id 1 start 0 size 5 send_done_trigger 1\n1->2 id 2 trigger 1 size 1\n"
         "trigger id 1 sometimes\n", 5, "unknown type 'sometimes'"),
        # failure lines (htsim's fat-tree): as htsim checks them, and what it asserts or reads past
        ("Failures 1\n" + HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type TOR switch_id 0 link_id 1\n", 6, "AGG switches only"),
        ("Failures 1\n" + HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type AGG switch_id 0 port 1\n", 6, "unknown failure attribute 'port'"),
        ("Failures 1\n" + HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type AGG switch_id 0 link_id\n", 6, "'link_id' is missing its value"),
        ("Failures 1\n" + HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type AGG link_id 1\n", 6, "no 'switch_id'"),
        ("Failures 1\n" + HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type AGG switch_id x link_id 1\n", 6, "failure switch_id: expected an integer"),
        ("Failures 2\n" + HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type AGG switch_id 0 link_id 0\n", 1, "Failures 2 but the file has 1 failure lines"),
        (HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size 1\n"
         "failure switch_type AGG switch_id 0 link_id 0\n", 5, "needs a 'Failures <F>' header"),
        ("Nodes 4\n0->1 id 1 start 0 size 5\n", 2, "missing header 'Connections'"),
        ("Connections 1\n\n0->1 id 1 start 0 size 5\n", 3, "missing header 'Nodes'"),
        (HEAD + "0->1 id 1 start 0 size 5\nNodes 5\n", 4, "must come before"),
        # a check_triggers error surfaces with the trigger's line
        (HEAD + "0->1 id 1 start 0 size 5\n1->2 id 2 trigger 1 size 1\n\ntrigger id 1 oneshot\n", 6,
         "never fired"),
    ],
)
def test_errors_name_file_and_line(tmp_path, text, line, fragment):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_cm(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message, message
    assert info.value.line == line


def test_errors_line_numbers_with_crlf(tmp_path):
    path = write(tmp_path, HEAD + "\n0->1 id 1 start 0 size 5\n1->2 id 2 start 0 size -1\n", newline="\r\n")
    with pytest.raises(InputError, match=rf"{path}:5: size must be > 0"):
        load_cm(path)


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "nope.cm"
    with pytest.raises(InputError) as info:
        load_cm(path)
    assert str(path) in str(info.value) and "not found" in str(info.value)


def test_empty_file(tmp_path):
    path = write(tmp_path, "# nothing\n")
    with pytest.raises(InputError, match="missing header 'Nodes'") as info:
        load_cm(path)
    assert str(path) in str(info.value)
