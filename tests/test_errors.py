"""Bad input gives a clear error naming the field, file and line."""

import numpy as np
import pytest

from multiverse_jax.conf.schema import PacketConfig, SimConfig, SwitchConfig, WorkloadConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.errors import InputError
from multiverse_jax.topology import fattree
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows
from multiverse_jax.workload.htsim_cm import load_cm

K4 = fattree(4, 100.0, 1.0)


def test_unknown_host():
    with pytest.raises(InputError, match=r"unknown host dst=99 \(valid hosts: 0..15\)"):
        Experiment(K4, make_flows([0], [99], [1000])).validate()


def test_unreachable_destination():
    islands = from_cables("islands", ["h0", "h1", "s0", "s1"], 2, [(0, 2, 100, 1), (1, 3, 100, 1)])
    with pytest.raises(InputError, match="unreachable"):
        Experiment(islands, make_flows([0], [1], [1000])).validate()


def test_negative_size():
    with pytest.raises(InputError, match="size_bytes must be > 0"):
        make_flows([0], [1], [-5])


def test_zero_rate_link():
    with pytest.raises(InputError, match="rate_gbps must be > 0"):
        from_cables("bad", ["h0", "h1"], 2, [(0, 1, 0.0, 1.0)])


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("switch", {"pfc_xon_bytes": 300_000}, "switch.pfc_xon_bytes"),
        ("switch", {"buffer_bytes": 0}, "switch.buffer_bytes"),
        ("packet", {"payload_bytes": 0}, "packet.payload_bytes"),
        ("cc", "reno", "cc must be one of"),
        ("lb", "magic", "lb must be one of"),
    ],
)
def test_bad_knobs_name_their_key(key, value, match):
    groups = {"switch": SwitchConfig, "packet": PacketConfig}
    with pytest.raises(InputError, match=match):
        knob = groups[key](**value) if key in groups else value  # a group checks its ranges when built
        Experiment(K4, make_flows([0], [1], [1000]), **{key: knob}).validate()


def test_malformed_cm_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.cm"
    path.write_text("Nodes 16\nConnections 2\n0->1 id 1 start 0 size 100\n2->3 id 2 start 0 size -7\n")
    with pytest.raises(InputError, match=rf"{path}:4:"):
        load_cm(path)


def test_trigger_never_fired_and_cycle(tmp_path):
    never = tmp_path / "never.cm"
    never.write_text("Nodes 4\nConnections 1\nTriggers 1\n0->1 id 1 trigger 5 size 100\ntrigger id 5 oneshot\n")
    with pytest.raises(InputError, match="never fired"):
        load_cm(never)
    cycle = tmp_path / "cycle.cm"
    cycle.write_text(
        "Nodes 4\nConnections 2\nTriggers 2\n"
        "0->1 id 1 trigger 1 size 100 send_done_trigger 2\n"
        "1->2 id 2 trigger 2 size 100 send_done_trigger 1\n"
        "trigger id 1 oneshot\ntrigger id 2 oneshot\n"
    )
    with pytest.raises(InputError, match="never start"):
        load_cm(cycle)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: PacketConfig(ack_class="bogus"), "packet.ack_class must be one of control, data, got 'bogus'"),
        (lambda: SwitchConfig(pfc_release="late"), "switch.pfc_release must be one of dequeue, sent, got 'late'"),
        (lambda: SimConfig(batching="fast"), "sim.batching must be one of auto, vmap, map, got 'fast'"),
        (lambda: WorkloadConfig(placement="x"), "workload.placement must be one of packed, random, rail, got 'x'"),
    ],
)
def test_python_api_choices_are_checked_like_the_cli(build, match):
    """Every Enum field of every group (``schema.Group``) turns a Python string into its
    member, or fails naming the key and the valid values, as OmegaConf does on the CLI."""
    with pytest.raises(InputError, match=match):
        build()
