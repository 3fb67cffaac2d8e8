"""Task DAGs in the engine: exact start/finish times, streams, flows started by tasks,
validation errors, multi-job placement, and batching with plain-flow experiments."""

import dataclasses

import numpy as np
import pytest

from conftest import run_small, store_and_forward_ps, wire_sizes
from multiverse_jax.conf.schema import WorkloadConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.errors import InputError
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.placement import combine, place, placement
from multiverse_jax.workload.tasks import STREAM_COMM, STREAM_COMPUTE, TaskGraphBuilder

K4 = fattree(4, 100.0, 1.0)
US = 1_000_000


def ping_pong():
    """gpu0 computes 5 us, sends 100 KB to gpu1 (same ToR), which computes 2 us and sends
    50 KB back; gpu0 then computes 1 us."""
    b = TaskGraphBuilder(16)
    c0 = b.delay(0, 5 * US, name="c0")
    s1 = b.send(0, 1, 100_000, [c0], name="s1")
    c1 = b.delay(1, 2 * US, [s1], name="c1")
    s2 = b.send(1, 0, 50_000, [c1], name="s2")
    b.delay(0, 1 * US, [s2], name="c2")
    return b.build()


def test_task_times_follow_the_closed_form():
    graph = ping_pong()
    result = run_small([Experiment(K4, graph.flow_set(), tasks=graph)])[0]
    assert result.ok, result.summary
    # h0 -> tor0 -> h1: two 100 Gb/s, 1 us links; a flow task ends when the receiver has it all.
    rx1, _ = store_and_forward_ps(wire_sizes(100_000), [100 * 10**9] * 2, [US] * 2)
    rx2, _ = store_and_forward_ps(wire_sizes(50_000), [100 * 10**9] * 2, [US] * 2)
    start = [0, 5 * US, 5 * US + rx1, 7 * US + rx1, 7 * US + rx1 + rx2]
    finish = [5 * US, 5 * US + rx1, 7 * US + rx1, 7 * US + rx1 + rx2, 8 * US + rx1 + rx2]
    np.testing.assert_array_equal(result.tasks["start_ps"], start)  # exact, in ps
    np.testing.assert_array_equal(result.tasks["finish_ps"], finish)
    # Each flow starts exactly when its task starts.
    np.testing.assert_array_equal(result.flows["start_ps"], np.array(start)[[1, 3]])
    assert result.summary["iteration_time_ps"] == finish[-1]
    assert result.summary["iteration_time_us"] == finish[-1] / US
    split = result.summary
    assert split["compute_us"] + split["exposed_comm_us"] + split["bubble_us"] == pytest.approx(finish[-1] / US)
    assert split["compute_us"] == pytest.approx((6 + 2) / 2)  # mean over the two GPUs


def test_streams_overlap_and_serialise():
    """Compute and communication streams run side by side; tasks of one stream run in order."""
    b = TaskGraphBuilder(16)
    b.delay(0, 30 * US, stream=STREAM_COMPUTE, name="long compute")
    send = b.send(0, 15, 200_000, stream=STREAM_COMM, name="overlapping send")
    b.delay(0, 1 * US, stream=STREAM_COMPUTE, name="after the compute")  # waits for "long compute"
    b.send(0, 14, 10_000, stream=STREAM_COMM, name="after the send")  # waits for "overlapping send"
    graph = b.build()
    result = run_small([Experiment(K4, graph.flow_set(), tasks=graph)])[0]
    t = result.tasks
    assert t["start_ps"][1] == 0  # the send does not wait for the compute
    assert t["start_ps"][2] == 30 * US
    assert t["start_ps"][3] == t["finish_ps"][send]
    assert result.summary["exposed_comm_us"] < t["finish_us"][3] - 30.0 + 1e-6  # the first send hid under compute


def test_a_dependency_on_a_later_task_is_fine_without_a_cycle():
    b = TaskGraphBuilder(2)
    first = b.delay(0, 1, name="x", stream=-1)
    second = b.delay(1, 1, name="y", stream=-1)
    b._tasks[first].deps.append(second)  # x waits for y, created after it
    assert b.build().deps[first].tolist() == [second]


def test_dependency_errors_name_the_task():
    b = TaskGraphBuilder(4)
    a = b.delay(0, 1, name="a")
    b.delay(1, 1, [a, 7], name="b")
    with pytest.raises(InputError, match="task 'b' depends on task 7, which does not exist"):
        b.build()
    b = TaskGraphBuilder(4, source="job.txt")
    first = b.delay(0, 1, name="x", stream=-1, line=3)
    second = b.delay(0, 1, [first], name="y", stream=-1, line=4)
    b._tasks[first].deps.append(second)  # x <-> y
    with pytest.raises(InputError, match=r"job.txt:\d: the task dependencies have a cycle: (x -> y -> x|y -> x -> y)"):
        b.build()
    with pytest.raises(InputError, match="GPU 9 does not exist"):
        TaskGraphBuilder(4).delay(9, 1)
    with pytest.raises(InputError, match="send from GPU 2 to itself"):
        TaskGraphBuilder(4).send(2, 2, 10)


def test_two_jobs_on_disjoint_hosts_run_as_if_alone():
    job = ping_pong()
    small = dataclasses.replace(job, n_gpus=2)  # the job uses GPUs 0 and 1
    first = place(small, placement("packed", 2, 16), 16)
    second = place(small, placement("packed", 2, 16, first_host=8), 16)
    both = combine([first, second])
    together = run_small([Experiment(K4, both.flow_set(), tasks=both)])[0]
    alone = run_small([Experiment(K4, first.flow_set(), tasks=first)])[0]
    assert together.ok and alone.ok
    n = len(first)
    np.testing.assert_array_equal(together.tasks["finish_us"][:n], alone.tasks["finish_us"])
    np.testing.assert_array_equal(together.tasks["finish_us"][n:], alone.tasks["finish_us"])
    assert set(together.tasks["gpu"][n:]) == {8, 9}


def test_task_and_flow_experiments_batch_bit_for_bit():
    graph = ping_pong()
    exps = [Experiment(K4, graph.flow_set(), tasks=graph), Experiment(K4, make_flows([3, 4], [12, 2], 80_000, [0, 2 * US]))]
    together = run_small(exps)
    for exp, batched in zip(exps, together):
        alone = run_small([exp])[0]
        np.testing.assert_array_equal(batched.flows["finish_us"], alone.flows["finish_us"])
        if exp.tasks is not None:
            np.testing.assert_array_equal(batched.tasks["finish_us"], alone.tasks["finish_us"])


def test_task_graph_larger_than_the_topology_is_an_error():
    b = TaskGraphBuilder(32)
    b.send(0, 31, 1000)
    graph = b.build()
    with pytest.raises(InputError, match="runs on 32 GPUs but topology fattree\\(k=4\\) has only 16 hosts"):
        Experiment(K4, graph.flow_set(), tasks=graph).validate()


def test_compute_that_overlaps_communication_is_slowed():
    """With workload.compute_slowdown = 1.5, a compute task that starts while its GPU is
    sending takes 1.5x its duration; one that starts after the send finished does not."""
    b = TaskGraphBuilder(16)
    send = b.send(0, 15, 200_000, stream=STREAM_COMM, name="send")  # ~17 us on the wire
    prep = b.delay(0, 1 * US, stream=STREAM_COMPUTE, name="prep")
    during = b.delay(0, 10 * US, [prep], stream=STREAM_COMPUTE, name="during the send")
    wait = b.delay(0, 50 * US, [during], stream=STREAM_COMPUTE, name="wait")
    after = b.delay(0, 10 * US, [wait, send], stream=STREAM_COMPUTE, name="after the send")
    graph = b.build()
    slow, plain = run_small(
        [
            Experiment(K4, graph.flow_set(), tasks=graph, workload=WorkloadConfig(compute_slowdown=1.5)),
            Experiment(K4, graph.flow_set(), tasks=graph),
        ]
    )
    t = slow.tasks
    assert t["start_ps"][during] == 1 * US and t["start_ps"][during] < t["finish_ps"][send]
    assert t["finish_ps"][during] - t["start_ps"][during] == 15 * US
    assert t["start_ps"][after] > t["finish_ps"][send]
    assert t["finish_ps"][after] - t["start_ps"][after] == 10 * US
    assert plain.tasks["finish_ps"][during] - plain.tasks["start_ps"][during] == 10 * US
    with pytest.raises(InputError, match="workload.compute_slowdown"):
        WorkloadConfig(compute_slowdown=0)
