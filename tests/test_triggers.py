"""Trigger semantics: check_triggers and trigger_tables."""

import numpy as np
import pytest

from multiverse_jax.errors import InputError
from multiverse_jax.workload.flows import (
    TRIGGER_BARRIER,
    TRIGGER_MULTISHOT,
    TRIGGER_ONESHOT,
    FlowSet,
    Triggers,
)
from multiverse_jax.workload.htsim_cm import load_cm
from multiverse_jax.workload.triggers import check_triggers, trigger_tables


def build(flows, triggers, source="test.cm"):
    """flows: list of (start, trigger, send_done, recv_done) with trigger indices; ids 1..F, lines 10+f.
    triggers: list of (kind, count); trigger ids 100+t, lines 50+t."""
    n = len(flows)
    col = lambda i: np.asarray([f[i] for f in flows], np.int32)
    return FlowSet(
        flow_id=np.arange(1, n + 1, dtype=np.int64),
        src=np.zeros(n, np.int32),
        dst=np.ones(n, np.int32),
        size_bytes=np.full(n, 1000, np.int64),
        start_ps=np.asarray([f[0] for f in flows], np.int64),
        prio=np.zeros(n, np.int32),
        trigger=col(1),
        send_done_trigger=col(2),
        recv_done_trigger=col(3),
        triggers=Triggers(
            trigger_id=np.arange(100, 100 + len(triggers), dtype=np.int64),
            kind=np.asarray([t[0] for t in triggers], np.int8).reshape(-1),
            count=np.asarray([t[1] for t in triggers], np.int32).reshape(-1),
            line=np.arange(50, 50 + len(triggers), dtype=np.int32),
        ),
        source=source,
        line=np.arange(10, 10 + n, dtype=np.int32),
    )


W = -1  # start_ps of a waiting flow


def test_valid_chain_passes():
    # 1 -> T0 -> 2 -> T1 (barrier 2, also from 3) -> 4
    flows = build(
        [(0, -1, 0, -1), (W, 0, 1, -1), (5, -1, -1, 1), (W, 1, -1, -1)],
        [(TRIGGER_ONESHOT, 1), (TRIGGER_BARRIER, 2)],
    )
    check_triggers(flows)


def test_never_fired():
    flows = build([(0, -1, -1, -1), (W, 0, -1, -1)], [(TRIGGER_ONESHOT, 1)])
    with pytest.raises(InputError) as info:
        check_triggers(flows)
    msg = str(info.value)
    assert msg.startswith("test.cm:50: ")
    assert "trigger 100 is never fired: no flow has send_done_trigger 100 or recv_done_trigger 100" in msg


def test_barrier_count_too_high():
    flows = build([(0, -1, 0, -1), (0, -1, -1, 0), (W, 0, -1, -1)], [(TRIGGER_BARRIER, 3)])
    with pytest.raises(InputError, match=r"test.cm:50: barrier trigger 100 needs count 3 .* only 2"):
        check_triggers(flows)


def test_barrier_counts_both_completions_of_one_flow():
    flows = build([(0, -1, 0, 0), (W, 0, -1, -1)], [(TRIGGER_BARRIER, 2)])
    check_triggers(flows)


def test_multishot_too_many_waiters():
    flows = build(
        [(0, -1, 0, -1), (0, -1, 0, -1), (W, 0, -1, -1), (W, 0, -1, -1), (W, 0, -1, -1)],
        [(TRIGGER_MULTISHOT, 1)],
    )
    with pytest.raises(InputError, match=r"test.cm:50: multishot trigger 100 has 3 waiting flows \(3, 4, 5\)"):
        check_triggers(flows)


def test_two_flow_cycle():
    # flow 2 waits on T0 activated by flow 3; flow 3 waits on T1 activated by flow 2
    flows = build([(0, -1, -1, -1), (W, 0, 1, -1), (W, 1, -1, 0)], [(TRIGGER_ONESHOT, 1)] * 2)
    with pytest.raises(InputError) as info:
        check_triggers(flows)
    msg = str(info.value)
    assert "cycle" in msg and ("flows 2, 3" in msg or "flows 3, 2" in msg)
    assert msg.startswith("test.cm:11: ") or msg.startswith("test.cm:12: ")


def test_three_flow_cycle():
    # 1 waits T0 <- 3 ; 2 waits T1 <- 1 ; 3 waits T2 <- 2 ; flow 4 is independent
    flows = build(
        [(W, 0, 1, -1), (W, 1, -1, 2), (W, 2, 0, -1), (0, -1, -1, -1)],
        [(TRIGGER_ONESHOT, 1)] * 3,
    )
    with pytest.raises(InputError) as info:
        check_triggers(flows)
    msg = str(info.value)
    assert "cycle" in msg
    listed = msg.split("flows ")[1].split(" can never")[0]
    assert sorted(int(x) for x in listed.split(", ")) == [1, 2, 3]


def test_self_wait_cycle():
    flows = build([(0, -1, -1, -1), (W, 0, 0, -1)], [(TRIGGER_ONESHOT, 1)])
    with pytest.raises(InputError, match=r"test.cm:11: trigger cycle: flows 2 "):
        check_triggers(flows)


def test_cycle_broken_by_outside_activator_passes():
    # 2 waits T0 (oneshot) activated by 3 or by 1 (which starts at 0); 3 waits T1 <- 2
    flows = build([(0, -1, 0, -1), (W, 0, 1, -1), (W, 1, 0, -1)], [(TRIGGER_ONESHOT, 1)] * 2)
    check_triggers(flows)


def test_multishot_serial_chain_passes():
    # a multishot trigger activated by its own waiters: 1 -> 2 -> 3 -> 4 in sequence
    flows = build([(0, -1, 0, -1), (W, 0, 0, -1), (W, 0, 0, -1), (W, 0, -1, -1)], [(TRIGGER_MULTISHOT, 1)])
    check_triggers(flows)


def test_barrier_waiting_on_own_waiter_is_a_cycle():
    # barrier count 2: activated by 1 and by 2, but 2 waits on the barrier
    flows = build([(0, -1, 0, -1), (W, 0, 0, -1)], [(TRIGGER_BARRIER, 2)])
    with pytest.raises(InputError, match="cycle: flows 2"):
        check_triggers(flows)


def test_cycle_from_file_names_line(tmp_path):
    path = tmp_path / "c.cm"
    path.write_text(
        "Nodes 4\nConnections 3\n"
        "0->1 id 7 start 0 size 10\n"
        "1->2 id 8 trigger 1 size 10 send_done_trigger 2\n"
        "2->3 id 9 trigger 2 size 10 recv_done_trigger 1\n"
        "trigger id 1 oneshot\ntrigger id 2 oneshot\n"
    )
    with pytest.raises(InputError) as info:
        load_cm(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:4: ") or msg.startswith(f"{path}:5: ")
    assert "flows 8, 9" in msg or "flows 9, 8" in msg


def test_trigger_tables():
    # T0 oneshot: activated by flow0 (send) ; waiters flows 1, 2
    # T1 multishot: activated by flow0 (recv), flow3 (send and recv) ; waiters 4, 5, 6 -> ranks 1, 2, 3
    # T2 barrier count 2: activated by flow1 (recv), flow2 (send) ; waiter 7
    flows = build(
        [
            (0, -1, 0, 1),
            (W, 0, -1, 2),
            (W, 0, 2, -1),
            (0, -1, 1, 1),
            (W, 1, -1, -1),
            (W, 1, -1, -1),
            (W, 1, -1, -1),
            (W, 2, -1, -1),
        ],
        [(TRIGGER_ONESHOT, 1), (TRIGGER_MULTISHOT, 1), (TRIGGER_BARRIER, 2)],
    )
    check_triggers(flows)
    act, is_recv, rank = trigger_tables(flows)
    assert act.dtype == np.int32 and is_recv.dtype == bool and rank.dtype == np.int32
    np.testing.assert_array_equal(act, [[0, -1, -1], [0, 3, 3], [1, 2, -1]])
    np.testing.assert_array_equal(is_recv, [[False, False, False], [True, False, True], [True, False, False]])
    np.testing.assert_array_equal(rank, [0, 1, 1, 0, 1, 2, 3, 2])


def test_trigger_tables_no_triggers():
    flows = build([(0, -1, -1, -1), (3, -1, -1, -1)], [])
    check_triggers(flows)
    act, is_recv, rank = trigger_tables(flows)
    assert act.shape == (0, 1) and is_recv.shape == (0, 1)
    np.testing.assert_array_equal(rank, [0, 0])


def test_out_of_range_index():
    flows = build([(0, -1, 3, -1)], [(TRIGGER_ONESHOT, 1)])
    with pytest.raises(InputError, match=r"test.cm:10: flow 1: send_done_trigger index 3 is out of range"):
        check_triggers(flows)
