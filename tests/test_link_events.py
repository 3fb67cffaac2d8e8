"""Timed link events (``topology/link_events.py``): a rate change mid-flow meets the closed
form to the picosecond (the delivered rate drops at the event and recovers at the up
event), a failure mid-run reroutes what is forwarded after it and leaves what came before
alone, batched == alone with events that differ per experiment, hybrid and flow modes
end at events, and the errors name the event."""

import dataclasses

import numpy as np
import pytest
from hydra import compose, initialize_config_module

import jax

from conftest import SMALL, build_batch, chain, pipeline_ps, run_small, store_and_forward_ps, wire_sizes
from multiverse_jax import engine
from multiverse_jax.conf.schema import HybridConfig, SimConfig, SimMode
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.report.paths import flow_path_names
from multiverse_jax.simulate import simulate
from multiverse_jax.topology import fattree
from multiverse_jax.topology.failures import tier_cables
from multiverse_jax.topology.link_events import link_epochs
from multiverse_jax.workload.flows import make_flows

PS = 1_000_000  # ps per µs
GBPS = 10**9
K4 = fattree(4, 100.0, 1.0)
CHAIN = chain([100, 100, 100], [1.0, 1.0, 1.0])  # h0 - s0 - s1 - h1
DEGRADED_US, RECOVERED_US = 10.0, 20.0
QUARTER = [
    {"at_us": DEGRADED_US, "link": "s0-s1", "action": "rate", "gbps": 25},
    {"at_us": RECOVERED_US, "link": "s0-s1", "action": "up"},
]


def run(experiments, **overrides):
    """``run_small`` with room for three epochs (two event times): one shape for the module."""
    return run_small(experiments, n_link_epochs=3, lockstep_experiments=0, **overrides)  # vmap: the whole batch at once


def _middle_rate(start_ps):
    """s0-s1's rate for a packet that starts on it at ``start_ps``."""
    return 25 * GBPS if DEGRADED_US * PS <= start_ps < RECOVERED_US * PS else 100 * GBPS


def test_quarter_rate_mid_flow_closed_form():
    """A flow on an idle chain whose middle cable runs at a quarter rate from 10 to 20 µs:
    every packet's timing is the store-and-forward closed form with the rate a packet
    meets when it starts on the cable, so the finish times match to the picosecond, and
    the delivered bytes at every sample equal the closed form's (the rate drops at the
    event and recovers at the up event)."""
    size = 150 * 4096
    exp = Experiment(CHAIN, make_flows([0], [1], [size], [PS]), sim=SimConfig(sample_interval_us=1.0), link_events=QUARTER)
    result = run([exp])[0]
    assert result.ok
    wire = wire_sizes(size)
    rates = [100 * GBPS, _middle_rate, 100 * GBPS]
    rx, ack = store_and_forward_ps(wire, rates, [PS] * 3, start_ps=PS)
    assert result.flows["rx_finish_ps"][0] == rx
    assert result.flows["finish_ps"][0] == ack
    healthy = store_and_forward_ps(wire, [100 * GBPS] * 3, [PS] * 3, start_ps=PS)[0]
    assert rx - healthy > 5 * PS  # the degradation cost time (closed form: 7.5 µs of the 10 at a quarter)
    # Delivered bytes at every sample time: the payload of the packets that arrived before it.
    arrivals = np.array(pipeline_ps([PS] * len(wire), wire, rates, [PS] * 3))
    payload = np.array(wire) - 64
    series = result.flow_series
    times_ps = np.round(series["time_us"] * PS).astype(np.int64)
    expected = [int(payload[arrivals < t].sum()) for t in times_ps]
    np.testing.assert_array_equal(series["rx_bytes"], expected)

    def delivered_gbps(from_us, to_us):
        a, b = np.searchsorted(series["time_us"], [from_us, to_us])
        return (series["rx_bytes"][b] - series["rx_bytes"][a]) * 8e-3 / (series["time_us"][b] - series["time_us"][a])

    # Payload rates; packets reach the receiver about 3 µs after they start on s0-s1.
    assert delivered_gbps(4, 12) > 90
    assert abs(delivered_gbps(14, 22) - 25 * 4096 / 4160) < 2
    assert delivered_gbps(25, 40) > 90


def test_failure_mid_run_reroutes_after_the_event():
    """agg0-core0 fails at 30 µs and comes back at 70 µs. Flows 0-6 start at 40 µs (the
    pairs of ``test_failures``: flows 1 and 6 cross the cable when it is up) and run as on a
    fabric with the cable down from the start, bit for bit; flows 7, 8 (inside a pod,
    before the event) and 9 (after the up event) as on the healthy one."""
    late, after_up = 40 * PS, 80 * PS
    src, dst = [0, 10, 4, 12, 6, 14, 1, 0, 5, 1], [9, 3, 13, 5, 7, 15, 8, 2, 7, 8]
    flows = make_flows(src, dst, [20_000] * 10, [late] * 7 + [0, 0, after_up])
    events = [
        {"at_us": 30.0, "link": "agg0-core0", "action": "down"},
        {"at_us": 70.0, "link": "agg0-core0", "action": "up"},
    ]
    healthy_exp = Experiment(K4, flows)
    failed_exp = dataclasses.replace(healthy_exp, link_events=events)
    down_exp = dataclasses.replace(healthy_exp, topology=failed_exp.epochs[1].topology, ecmp=None)
    healthy_paths, down_paths = flow_path_names(healthy_exp), flow_path_names(down_exp)
    crossing = [f for f, p in enumerate(healthy_paths) if "agg0->core0" in p or "core0->agg0" in p]
    assert crossing == [1, 6] and healthy_paths[6] != down_paths[6]
    healthy, failed, down = run([healthy_exp, failed_exp, down_exp])
    assert healthy.ok and failed.ok and down.ok
    for column in ("rx_finish_ps", "finish_ps"):
        np.testing.assert_array_equal(failed.flows[column][:7], down.flows[column][:7])
        np.testing.assert_array_equal(failed.flows[column][7:], healthy.flows[column][7:])
    assert (failed.flows["rx_bytes"] == 20_000).all()
    # flows.parquet's path: the late flows' paths are the down fabric's; a flow alive across
    # both events lists each path it was given.
    named = flow_path_names(failed_exp, failed.flows["start_ps"], failed.flows["rx_finish_ps"])
    assert list(named[:7]) == list(down_paths[:7]) and list(named[7:]) == list(healthy_paths[7:])
    spanning = flow_path_names(failed_exp, np.zeros(10, np.int64), np.full(10, 90 * PS))
    assert spanning[6] == f"{healthy_paths[6]} then {down_paths[6]} then {healthy_paths[6]}"


def test_single_timed_failures_batched_equal_each_alone():
    """The healthy k=4 fat-tree and its 16 agg-core cables each failing at 3 µs: batches of
    four experiments whose events differ (the module's one program: 17 experiments in one
    batch would compile another, for E = 20), each equal to its run alone."""
    flows = make_flows(np.arange(16), (np.arange(16) + 5) % 16, 20_000, 0)
    cables = tier_cables(K4, "agg-core")
    exps = [Experiment(K4, flows)] + [
        Experiment(K4, flows, link_events=[{"at_us": 3.0, "link": c, "action": "down"}]) for c in cables
    ]
    together = [result for i in range(0, len(exps), 4) for result in run(exps[i : i + 4])]
    fcts = set()
    for exp, batched in zip(exps, together, strict=True):
        alone = run([exp])[0]
        assert batched.ok and alone.ok
        for column in ("fct_ps", "rx_finish_ps"):
            np.testing.assert_array_equal(batched.flows[column], alone.flows[column])
        fcts.add(tuple(batched.flows["fct_ps"]))
    assert len(fcts) > 1  # some failure changes some flow's time


@pytest.mark.parametrize("batching", ["vmap", "map"])
def test_events_batched_equal_alone_in_both_modes(batching):
    """Experiments with different numbers of events (padded epochs never begin) in one batch."""
    flows = make_flows([0, 2, 5], [9, 13, 12], [60_000] * 3, [0, PS, 2 * PS])
    exps = [
        Experiment(K4, flows),
        Experiment(K4, flows, link_events=[{"at_us": 2.5, "link": "tor0-agg0", "action": "rate", "gbps": 40}]),
        Experiment(
            K4,
            flows,
            link_events=[
                {"at_us": 1.5, "link": "agg4-core0", "action": "down"},
                {"at_us": 1.5, "link": "tor1-agg1", "action": "rate", "gbps": 50},
                {"at_us": 4.0, "link": "agg4-core0", "action": "up"},
            ],
        ),
    ]
    together = run(exps, batching=batching)
    for exp, batched in zip(exps, together):
        alone = run([exp], batching=batching)[0]
        assert batched.ok
        np.testing.assert_array_equal(batched.flows["fct_ps"], alone.flows["fct_ps"])


def test_flow_mode_rates_change_at_the_event():
    """sim.mode=flow: a lone flow's fluid rate follows the link's rate, so its last byte
    leaves the NIC when 100 Gb/s before 10 µs, 25 between, 100 after have sent its bytes."""
    size = 150 * 4096
    events = [{"at_us": 10.0, "link": "h0-s0", "action": "rate", "gbps": 25}, {"at_us": 20.0, "link": "h0-s0", "action": "up"}]
    exp = Experiment(CHAIN, make_flows([0], [1], [size], [0]), sim=SimConfig(mode=SimMode.flow), link_events=events)
    result = run([exp], slots_per_host=1, flow_level=True)[0]
    assert result.ok
    wire = sum(wire_sizes(size)) * 8 * 10**12  # bit-ps
    sent = 100 * GBPS * 10 * PS + 25 * GBPS * 10 * PS
    drained_ps = 20 * PS + -(-(wire - sent) // (100 * GBPS))
    # Then the receiver has it one idle path tail later (at 100 Gb/s again).
    tail = PS + (4160 * 8 * 10**12 // (100 * GBPS) + PS) * 2
    assert result.flows["rx_finish_ps"][0] == drained_ps + tail


def test_hybrid_partition_thaws_at_an_event_on_its_path():
    """Two steady hybrid flows frozen at flow level; a rate change on flow 0's path ends its
    steady phase at the event's picosecond (planned when it froze), flow 1's partition stays
    frozen across it, and both finish like the packet-level run within 1 %."""
    size = 1_500_000
    flows = make_flows([0, 4], [1, 5], [size, size], [0, 0])
    at_ps = 80 * PS  # after both froze (4 samples of 5 µs), before they finish (124 µs)
    events = [{"at_us": 80.0, "link": "tor0-h1", "action": "rate", "gbps": 50}]
    hybrid = HybridConfig(window=4, sample_interval_us=5.0)
    exps = [
        Experiment(K4, flows, sim=SimConfig(mode=mode, sample_interval_us=0), hybrid=hybrid, link_events=events)
        for mode in ("packet", "hybrid")
    ]
    shapes = dataclasses.replace(SMALL, n_link_epochs=3, steady_window=4)
    batch = build_batch(exps[1:], static=shapes, slots_per_host=shapes.slots_per_host, batch_size=len(exps))  # the program simulate uses below
    state = batch.state
    while int(state.time_ps[0]) < at_ps:  # one window (or jump) at a time, up to the event
        state = engine.advance(batch.params, state, 1)
    assert int(state.time_ps[0]) == at_ps, "the clock jumps to the planned end: the event"
    steady = jax.device_get(state.steady)
    assert steady.frozen[0, :2].all(), "both flows are frozen when the event comes"
    assert steady.thaw_at_ps[0, 0] == at_ps and steady.thaw_at_ps[0, 1] != at_ps
    state = engine.advance(batch.params, state, 1)  # the window the event starts
    steady = jax.device_get(state.steady)
    assert not steady.frozen[0, 0] and steady.frozen[0, 1]
    packet, hybrid = simulate(exps, slots_per_host=shapes.slots_per_host, static=shapes)
    assert packet.ok and hybrid.ok
    np.testing.assert_allclose(hybrid.flows["fct_ps"], packet.flows["fct_ps"], rtol=0.01)
    # Flow 1 is untouched; flow 0 sends the rest of its bytes at half rate from the event
    # (but for the few µs of packets already past the link then: within 3 %).
    healthy_ps = int(packet.flows["fct_ps"][1])
    np.testing.assert_allclose(packet.flows["fct_ps"][0], at_ps + 2 * (healthy_ps - at_ps), rtol=0.03)


def test_epochs_and_config_keys():
    events = [
        {"at_us": 5, "link": "agg0-core0", "action": "down"},
        {"at_us": 2, "link": "tor0-agg0", "action": "rate", "gbps": 25},
        {"at_us": 5, "link": "tor0-agg0", "action": "up"},
    ]
    epochs = link_epochs(K4, events)
    assert [e.start_ps for e in epochs] == [0, 2 * PS, 5 * PS]
    assert [e.topology.links_down() for e in epochs] == [[], [], ["agg0-core0"]]
    tor0_agg0 = K4.link_between(K4.node_index("tor0"), K4.node_index("agg0"))
    rate = {e.start_ps: int(e.topology.link_rate_bps[tor0_agg0]) for e in epochs}
    assert rate == {0: 100 * GBPS, 2 * PS: 25 * GBPS, 5 * PS: 100 * GBPS}
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        cfg = compose(
            "config",
            overrides=[
                "workload.kind=permutation",
                "workload.flow_bytes=10000",
                "topology.link_events=[{at_us: 5, link: agg0-core0, action: down}]",
            ],
        )
        exp = experiment_from_config(cfg)
    assert [e.describe() for e in exp.link_events] == ["agg0-core0 down at 5 µs"]


@pytest.mark.parametrize(
    "events, fragment",
    [
        ("agg0-core0", "must be a list of events"),
        ([{"at_us": 1, "link": "agg0-core0"}], "topology.link_events[0].action is missing"),
        ([{"at_us": 1, "link": "agg0-core0", "action": "off"}], "action must be one of down, up, rate"),
        ([{"at_us": -1, "link": "agg0-core0", "action": "down"}], "topology.link_events[0].at_us must be"),
        ([{"at_us": 1, "link": "agg0-core9", "action": "down"}], "topology.link_events[0].link: 'agg0-core9' names no cable"),
        ([{"at_us": 1, "link": "agg0-core0", "action": "rate"}], "gbps is missing"),
        ([{"at_us": 1, "link": "agg0-core0", "action": "down", "gbps": 5}], "gbps is only for action rate"),
        ([{"at_us": 1, "link": "agg0-core0", "action": "down", "when": 5}], "unknown field(s) when"),
        (
            [{"at_us": 1, "link": "agg0-core0", "action": "down"}, {"at_us": 2, "link": "core0-agg0", "action": "down"}],
            "topology.link_events[1]: core0-agg0 down at 2 µs, but the cable is already down then",
        ),
        (
            [{"at_us": 1, "link": "agg0-core0", "action": "down"}, {"at_us": 2, "link": "agg0-core0", "action": "rate", "gbps": 5}],
            "the cable is down then (bring it up first)",
        ),
    ],
)
def test_event_errors_name_the_event(events, fragment):
    with pytest.raises(InputError) as info:
        Experiment(K4, make_flows([0], [9], [1000], [0]), link_events=events).validate()
    assert fragment in str(info.value)


def test_unreachable_after_an_event_names_the_event_and_flow():
    exp = Experiment(K4, make_flows([0], [9], [1000], [0]), link_events=[{"at_us": 7, "link": "h9-tor4", "action": "down"}])
    with pytest.raises(InputError, match=r"after h9-tor4 down at 7 µs \(topology.link_events\): flow 0 \(h0->h9\): destination"):
        exp.validate()


def test_timed_failure_sweep_override_parses_and_labels():
    """``multiverse-jax-failures --at-us 5 --up-us 9``: the healthy point, then one point per
    agg-core cable failing at 5 µs and back at 9 µs; Hydra parses each point into an
    experiment with those events, and the report labels the points by their event."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from multiverse_jax.report.sweep_report import failed_link_label
    from multiverse_jax.sweep.results import flatten
    from multiverse_jax.topology.failures import sweep_override

    text = sweep_override(K4, "agg-core", at_us=5, up_us=9)
    assert text.startswith("topology.link_events=[],[{at_us:5,link:agg0-core0,action:down},{at_us:9,link:agg0-core0,action:up}],")
    override = OverridesParser.create().parse_overrides([text])[0]
    points = list(override.sweep_string_iterator())
    assert len(points) == 17 and points[0] == "[]"
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        cfg = compose("config", overrides=["workload.kind=permutation", f"topology.link_events={points[1]}"])
        exp = experiment_from_config(cfg)
    assert [e.describe() for e in exp.link_events] == ["agg0-core0 down at 5 µs", "agg0-core0 up at 9 µs"]
    row = flatten({"topology": {"link_events": [{"at_us": 5, "link": "agg0-core0", "action": "down"}]}})
    assert failed_link_label(row) == "agg0-core0 down@5µs"
    rate = sweep_override(K4, "agg-core", rate_gbps=25, at_us=2)
    assert "[{at_us:2,link:agg0-core0,action:rate,gbps:25}]" in rate
    with pytest.raises(InputError, match="--up-us needs --at-us"):
        sweep_override(K4, "agg-core", up_us=3)


def test_timed_failures_and_the_healthy_fabric_form_one_group():
    from multiverse_jax.sweep.groups import make_groups

    flows = make_flows([0, 4], [9, 13], [10_000] * 2, [0, 0])
    exps = [Experiment(K4, flows)] + [
        Experiment(K4, flows, link_events=[{"at_us": 3.0, "link": c, "action": "down"}]) for c in ("agg0-core0", "agg1-core1")
    ]
    groups = make_groups(exps, [{"slots_per_host": 40}] * 3)
    assert len(groups) == 1 and groups[0].static.n_link_epochs == 2 and groups[0].members == (0, 1, 2)
