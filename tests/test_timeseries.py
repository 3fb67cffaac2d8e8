"""Time series (sim.sample_interval_us): sample times, what the samples may hold, that
sampling changes nothing else, draining of the device ring, and the files and the plot
command a run writes.

Compiling dominates the cost (about 10 s a program on a 2-core CPU; a step is ~1 ms), so
the experiments below run one at a time (a batch of 1) padded to the shapes the CLI picks
for its default k=4 job: the CLI test then reuses the same compiled program. Only the
ring-draining test (8 windows per call) compiles a second one.
"""

import csv
import dataclasses
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module

from multiverse_jax.batch import build_batch
from multiverse_jax.conf.schema import STEPS_PER_CALL, SimConfig, SwitchConfig
from multiverse_jax.experiment import Experiment
from multiverse_jax.cli import run
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError
from multiverse_jax.report import plot
from multiverse_jax.report.outputs import (
    FLOW_SERIES_COLUMNS,
    PORT_SERIES_COLUMNS,
    plot_timeseries,
    timeseries_figure,
    write_outputs,
)
from multiverse_jax.simulate import simulate
from multiverse_jax.topology import fattree
from multiverse_jax.workload.flows import make_flows

TOPO = fattree(4, rate_gbps=100.0, delay_us=1.0)
RATE_BPS = 100e9
PAYLOAD, WIRE = 4096, 4096 + 64
SER_PS = WIRE * 8 * 10**12 // int(RATE_BPS)  # 332 800 ps: one full packet on a 100 Gb/s link
# Flows 0 and 1 (hosts 0, 1 -> host 8) share host 8's downlink: a queue builds at its ToR
# port; flows 2 and 3 run alone.
BUSY = make_flows([0, 1, 4, 5], [8, 8, 9, 13], [200_000, 100_000, 150_000, 50_000], 0)
# Two short flows with an idle gap between them: the clock jumps over the gap, and the
# windows (1 µs) are no longer aligned with the 2.5 µs sampling grid.
GAPPED = make_flows([0, 1], [8, 12], [50_000, 50_000], [0, 33_300_000])
STEP_ECN = SwitchConfig(ecn_kmin_bytes=10_000, ecn_kmax_bytes=10_000, ecn_pmax=1.0)  # mark above 10 KB: DCQCN reacts
EXPERIMENTS = [
    Experiment(TOPO, BUSY, cc="none", sim=SimConfig(sample_interval_us=0.0)),
    Experiment(TOPO, BUSY, cc="none", sim=SimConfig(sample_interval_us=2.0)),
    Experiment(TOPO, BUSY, cc="dcqcn", switch=STEP_ECN, sim=SimConfig(sample_interval_us=0.0)),
    Experiment(TOPO, BUSY, cc="dcqcn", switch=STEP_ECN, sim=SimConfig(sample_interval_us=2.0)),
    Experiment(TOPO, GAPPED, cc="none", sim=SimConfig(sample_interval_us=2.5)),
]
SAMPLED = [1, 3, 4]  # experiments with a time series
UNSAMPLED_TWIN = {1: 0, 3: 2}  # the same experiment without one
CLI_SAMPLED = "sim.sample_interval_us=1"


def config(*overrides):
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="module")
def cli_static():
    """The shapes of the CLI's default job with sampling on (no compiling here), with the cc
    system compiled in: the CLI's default runs without congestion control, EXPERIMENTS with."""
    static = build_batch([experiment_from_config(config(CLI_SAMPLED))]).static
    return dataclasses.replace(static, congestion_control=True)


def _run_each(static, steps_per_call):
    """EXPERIMENTS one at a time: (results, final sample_count of each)."""
    results, counts = [], []
    for exp in EXPERIMENTS:
        final = {}

        def keep(state):
            final["count"] = int(np.asarray(state.samples.sample_count)[0])

        results += simulate(
            [exp], slots_per_host=static.slots_per_host, static=static, steps_per_call=steps_per_call, on_progress=keep
        )
        counts.append(final["count"])
    return results, counts


@pytest.fixture(scope="module")
def runs(cli_static):
    """The CLI's settings: ``sim.steps_per_call`` windows per call, a ring as long."""
    return _run_each(cli_static, STEPS_PER_CALL)[0]


@pytest.fixture(scope="module")
def short_calls(cli_static):
    """8 windows per call and a ring of 8 (the smallest allowed): the ring wraps several times."""
    return _run_each(dataclasses.replace(cli_static, n_samples=8), 8)


def times_ps(result):
    """Distinct sample times of a result, in ps (exact: the µs floats come from integer ps)."""
    return np.unique(np.round(result.flow_series["time_us"] * 1e6).astype(np.int64))


def per_flow(result, column):
    """{flow id: (times in ps, values)} of a flow-series column."""
    fs = result.flow_series
    out = {}
    for flow_id in np.unique(fs["flow_id"]):
        mask = fs["flow_id"] == flow_id
        out[int(flow_id)] = (np.round(fs["time_us"][mask] * 1e6).astype(np.int64), fs[column][mask])
    return out


def test_every_experiment_ran(runs):
    results = runs
    assert [r.ok for r in results] == [True] * len(EXPERIMENTS)
    for e, result in enumerate(results):
        if e in SAMPLED:
            assert result.flow_series is not None and result.port_series is not None
        else:
            assert result.flow_series is None and result.port_series is None


@pytest.mark.parametrize("e", SAMPLED)
def test_series_layout(runs, e):
    result = runs[e]
    exp = EXPERIMENTS[e]
    fs, ps = result.flow_series, result.port_series
    assert tuple(fs) == FLOW_SERIES_COLUMNS and tuple(ps) + ("port_name",) == PORT_SERIES_COLUMNS  # named in the file
    n = len(times_ps(result))
    n_flows, n_ports = len(exp.flows), exp.topology.n_links
    assert n >= 5
    assert all(len(col) == n * n_flows for col in fs.values())
    assert all(len(col) == n * n_ports for col in ps.values())
    np.testing.assert_array_equal(fs["flow_id"], np.tile(exp.flows.flow_id, n))
    np.testing.assert_array_equal(ps["port"], np.tile(np.arange(n_ports), n))
    np.testing.assert_array_equal(ps["src_node"], np.tile(exp.topology.link_src, n))
    np.testing.assert_array_equal(ps["dst_node"], np.tile(exp.topology.link_dst, n))
    np.testing.assert_array_equal(fs["window_bytes"], 0.0)  # rate-based (none, DCQCN): no window


@pytest.mark.parametrize("e", SAMPLED)
def test_sample_times(runs, e):
    """Samples are taken at the end of the first window that reaches a point of the grid
    k * interval (k >= 1); the next one is due at the next grid point after it. So times
    strictly increase, the first is at or after one interval, and no two samples share a
    grid cell [k * interval, (k + 1) * interval).

    Consecutive samples are NOT always an interval apart: a sample taken late (after an idle
    jump of the clock, or with windows not aligned with the grid) is followed by one at the
    next grid point, which can be closer than an interval (experiment 4 has gaps of 1.3 and
    2 µs at a 2.5 µs interval), so spacing >= interval is not checked."""
    result = runs[e]
    interval_ps = round(EXPERIMENTS[e].sim.sample_interval_us * 1e6)
    t = times_ps(result)
    assert len(t) == len(result.flow_series["time_us"]) // len(EXPERIMENTS[e].flows)  # no time twice
    assert np.all(np.diff(t) > 0)
    assert t[0] >= interval_ps
    cells = t // interval_ps
    assert cells[0] >= 1 and np.all(np.diff(cells) >= 1)
    # The last sample is taken at the end of the window in which the last flow finished;
    # the reported simulated time stops at that finish, up to one window (1 µs) earlier.
    assert t[-1] <= result.summary["simulated_time_ps"] + 1_000_000
    if e != 4:  # BUSY: the network is busy throughout, the 1 µs windows step evenly and
        # the 2 µs grid holds a whole number of them: most samples are one interval apart.
        assert np.median(np.diff(t)) == interval_ps


@pytest.mark.parametrize("e", SAMPLED)
def test_rx_bytes(runs, e):
    """Delivered bytes never decrease, agree with the flow's rx finish time, and never grow
    faster than the receiver's link delivers them.

    Bound: a flow's packets reach its receiver over one 100 Gb/s link, at most one full
    packet (4160 wire bytes) per SER_PS, so in any span of D ps at most floor(D / SER_PS) + 1
    packets of <= 4096 payload bytes arrive: a rate of at most 100 Gb/s * 4096/4160 (payload
    at line rate, 98.5 Gb/s) + 4096*8 bits / D. The second term is the quantisation of a
    sample to whole packets (16 Gb/s at D = 2 µs, more for the shorter gaps of experiment 4),
    too large for a fixed tolerance on the line rate; the packet count bound is exact.
    """
    result = runs[e]
    exp = EXPERIMENTS[e]
    sizes = dict(zip(exp.flows.flow_id.tolist(), exp.flows.size_bytes.tolist()))
    rx_finish_ps = dict(zip(exp.flows.flow_id.tolist(), result.flows["rx_finish_ps"]))
    fastest = 0.0
    for flow_id, (t, rx) in per_flow(result, "rx_bytes").items():
        assert np.all(np.diff(rx) >= 0) and rx[-1] <= sizes[flow_id], flow_id
        assert np.all(rx[t > rx_finish_ps[flow_id]] == sizes[flow_id]), flow_id
        assert np.all(rx[t < rx_finish_ps[flow_id]] < sizes[flow_id]), flow_id
        t = np.concatenate([[0], t])  # nothing was delivered at time 0
        rx = np.concatenate([[0], rx])
        span, grown = np.diff(t), np.diff(rx)
        assert np.all(grown <= PAYLOAD * (span // SER_PS + 1)), flow_id
        fastest = max(fastest, float((grown * 8e12 / span).max()))
    # Non-vacuous: some flow ran near line rate over some sample gap.
    assert fastest >= 0.8 * RATE_BPS * PAYLOAD / WIRE


def test_rates(runs):
    results = runs
    for e in (1, 4):  # cc=none: the line rate throughout
        np.testing.assert_array_equal(results[e].flow_series["rate_gbps"], RATE_BPS / 1e9)
    dcqcn = results[3].flow_series["rate_gbps"]
    assert np.all((dcqcn >= 1.0) & (dcqcn <= RATE_BPS / 1e9))  # dcqcn.min_rate_mbps .. line rate
    assert dcqcn.min() < 0.9 * RATE_BPS / 1e9  # the incast made DCQCN cut its rate


def test_sent_rate_is_what_each_flow_sent(runs):
    """Under cc=none ``rate_gbps`` is the line rate throughout (test_rates); ``tx_gbps`` is
    what the flow put on the wire in each sample interval: nothing before it starts or after
    its last packet, and its integral over the sample spans is ``tx_bytes``, which ends at
    the flow's size and is never below what was delivered."""
    for e in (1, 4):  # BUSY, GAPPED (flow 1 starts at 33.3 µs)
        exp, result = EXPERIMENTS[e], runs[e]
        ids = exp.flows.flow_id.tolist()
        start, finish = dict(zip(ids, result.flows["start_ps"])), dict(zip(ids, result.flows["finish_ps"]))
        size = dict(zip(ids, exp.flows.size_bytes.tolist()))
        tx_bytes, rx_bytes = per_flow(result, "tx_bytes"), per_flow(result, "rx_bytes")
        for flow_id, (t, gbps) in per_flow(result, "tx_gbps").items():
            sent_bytes = gbps * np.diff(t, prepend=0) / 8e3  # Gb/s x ps -> bytes
            np.testing.assert_allclose(np.cumsum(sent_bytes), tx_bytes[flow_id][1], rtol=1e-12)
            assert tx_bytes[flow_id][1][-1] == size[flow_id] and np.all(tx_bytes[flow_id][1] >= rx_bytes[flow_id][1])
            assert np.all(gbps[(t <= start[flow_id]) | (t > finish[flow_id])] == 0)
            assert gbps.max() > 0.9 * RATE_BPS / 1e9 * PAYLOAD / WIRE and (gbps == 0).any()


@pytest.mark.parametrize("e", SAMPLED)
def test_queue_within_port_maximum(runs, e):
    result = runs[e]
    ps = result.port_series
    assert np.all(ps["queue_bytes"] >= 0)
    sampled_max = np.zeros(len(result.port_max_queue_bytes), np.int64)
    np.maximum.at(sampled_max, ps["port"], ps["queue_bytes"])
    assert np.all(sampled_max <= result.port_max_queue_bytes)
    if e != 4:  # the two flows into host 8 queue at its ToR port
        assert sampled_max.max() > 0


@pytest.mark.parametrize("sampled, twin", sorted(UNSAMPLED_TWIN.items()))
def test_sampling_changes_nothing(runs, sampled, twin):
    """FCTs (every per-flow column) and the summary, bit for bit, with and without sampling."""
    a, b = runs[sampled], runs[twin]
    assert a.flows.keys() == b.flows.keys()
    for name in a.flows:
        np.testing.assert_array_equal(a.flows[name], b.flows[name], err_msg=name)
    np.testing.assert_array_equal(a.port_max_queue_bytes, b.port_max_queue_bytes)
    plain = {k: v for k, v in a.summary.items() if not k.startswith(("batch_", "sample_"))}
    assert plain == {k: v for k, v in b.summary.items() if not k.startswith(("batch_", "sample_"))}


def test_ring_draining_loses_nothing(runs, short_calls):
    """8 windows per call and a ring of 8: the host still gets every sample (as many
    distinct times as the device counted), identical to the CLI's calls (``runs``)."""
    short, count = short_calls
    for e in SAMPLED:
        assert short[e].summary["batch_n_calls"] > 2
        assert count[e] > 8  # more samples than the ring holds and than windows per call
        assert len(times_ps(short[e])) == count[e]
        for series in ("flow_series", "port_series"):
            a, b = getattr(short[e], series), getattr(runs[e], series)
            assert a.keys() == b.keys()
            for name in a:
                np.testing.assert_array_equal(a[name], b[name], err_msg=f"{e} {series} {name}")
    for e in UNSAMPLED_TWIN.values():
        assert count[e] == 0 and short[e].flow_series is None
        np.testing.assert_array_equal(short[e].flows["fct_us"], runs[e].flows["fct_us"])


# --- config ---------------------------------------------------------------------------


def test_config_key():
    assert experiment_from_config({}).sim.sample_interval_us == 5.0
    assert experiment_from_config({"sim": {"sample_interval_us": 0}}).sim.sample_interval_us == 0.0
    assert experiment_from_config({"sim": {"sample_interval_us": 2}}).sim.sample_interval_us == 2.0
    for bad in (-1, float("nan")):
        with pytest.raises(InputError, match=r"sim\.sample_interval_us must be a finite number >= 0"):
            experiment_from_config({"sim": {"sample_interval_us": bad}})
    for bad in ("often", True):
        with pytest.raises(InputError, match=r"sim\.sample_interval_us must be a number, got"):
            experiment_from_config({"sim": {"sample_interval_us": bad}})


# --- outputs and the plot command -------------------------------------------------------


def is_png(path):
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_writes_series_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    assert run(config("workload.flow_bytes=100000", CLI_SAMPLED), out) == 0
    flows = pq.read_table(out / "timeseries_flows.parquet")
    ports = pq.read_table(out / "timeseries_ports.parquet")
    assert tuple(flows.column_names) == FLOW_SERIES_COLUMNS
    assert tuple(ports.column_names) == PORT_SERIES_COLUMNS
    n = len(np.unique(flows.column("time_us").to_numpy()))
    assert n >= 5 and flows.num_rows == 16 * n and ports.num_rows == 96 * n  # k=4: 16 flows, 96 ports
    assert is_png(out / "timeseries.png")

    # The plot command, in-process: default output, then picked flows and ports elsewhere.
    (out / "timeseries.png").unlink()
    assert plot.main([str(out)]) == 0
    assert is_png(out / "timeseries.png")
    assert plot.main([str(out), "--out", str(tmp_path / "picked.png"), "--flows", "0,3", "5", "--ports", "2"]) == 0
    assert is_png(tmp_path / "picked.png")
    capsys.readouterr()
    assert plot.main([str(out), "--out", str(tmp_path / "x.png"), "--flows", "99"]) == 2
    err = capsys.readouterr().err
    assert "flow id 99 not in the time series" in err and len(err.strip().splitlines()) == 1


def test_outputs_only_with_series(runs, tmp_path):
    """write_outputs: series files (and the plot) for a sampled result, none otherwise."""
    names = {"timeseries_flows.parquet", "timeseries_ports.parquet", "timeseries.png"}
    write_outputs(runs[0], tmp_path / "off", EXPERIMENTS[0])
    assert not names & {p.name for p in (tmp_path / "off").iterdir()}
    files = write_outputs(runs[3], tmp_path / "on", EXPERIMENTS[3], plots=False)
    assert {p.name for p in files.values()} >= names - {"timeseries.png"}
    assert not (tmp_path / "on" / "timeseries.png").exists()
    table = pq.read_table(files["timeseries_flows"])
    for name in FLOW_SERIES_COLUMNS:
        np.testing.assert_array_equal(table.column(name).to_numpy(), runs[3].flow_series[name])


def test_outputs_name_hosts_and_ports(runs, tmp_path):
    """flows.parquet, fct.csv and the port series name hosts and ports by role (``h0``,
    ``tor4->h8``), each flow's path runs from its host to its host over linked nodes, and
    the figure redrawn from the files labels its lines with these names."""
    exp, result = EXPERIMENTS[1], runs[1]
    write_outputs(result, tmp_path, exp, plots=False)
    port_names = TOPO.port_names()
    flows = pq.read_table(tmp_path / "flows.parquet").to_pydict()
    hosts = [(f"h{s}", f"h{d}") for s, d in zip(exp.flows.src, exp.flows.dst)]
    assert list(zip(flows["src_name"], flows["dst_name"])) == hosts
    for path, (src, dst) in zip(flows["path"], hosts):  # BUSY: every flow crosses pods
        hops = path.split("->")
        assert (hops[0], hops[-1], len(hops)) == (src, dst, 7)
        assert all(f"{a}->{b}" in port_names for a, b in zip(hops, hops[1:]))
    with open(tmp_path / "fct.csv", newline="") as handle:
        assert [(r["src_name"], r["dst_name"]) for r in csv.DictReader(handle)] == hosts

    flow_series, port_series = plot.read_series(tmp_path)  # as multiverse-jax-plot reads them
    np.testing.assert_array_equal(port_series["port_name"], port_names[port_series["port"]])
    fig = timeseries_figure(flow_series, port_series, flow_names=plot.read_flow_labels(tmp_path))
    flow_axes, port_axes = fig.axes
    legend = [text.get_text() for text in flow_axes.get_legend().get_texts()]
    assert legend == [f"flow {i}: {s}->{d}" for i, (s, d) in enumerate(hosts)]
    t, sent = per_flow(result, "tx_gbps")[0]
    np.testing.assert_array_equal(flow_axes.lines[0].get_ydata(), np.r_[sent[:1], sent])  # what flow 0 sent
    peak = np.zeros(TOPO.n_links, np.int64)
    np.maximum.at(peak, port_series["port"], port_series["queue_bytes"])
    legend = [text.get_text() for text in port_axes.get_legend().get_texts()]
    assert legend[0] == port_names[np.argmax(peak)] and set(legend) <= set(port_names)


def test_plot_command_errors(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert plot.main([str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err and len(err.strip().splitlines()) == 1

    (tmp_path / "summary.json").write_text("{}")  # a run directory without time series
    assert plot.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "timeseries_flows.parquet" in err and "sim.sample_interval_us > 0" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "timeseries.png").exists()


def test_plot_module_entry_point(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "multiverse_jax.report.plot", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    assert "sim.sample_interval_us > 0" in proc.stderr and "Traceback" not in proc.stderr


def test_plot_many_flows_samples_sixteen_plus_mean(tmp_path):
    """Synthetic series, no simulation: 40 flows -> 16 lines plus the mean; no queue."""
    n_t, n_f, n_p = 30, 40, 6
    t = np.arange(1, n_t + 1, dtype=float)
    flows = {
        "time_us": np.repeat(t, n_f),
        "flow_id": np.tile(np.arange(n_f), n_t),
        "rate_gbps": np.tile(np.linspace(10, 100, n_f), n_t),
        "window_bytes": np.zeros(n_t * n_f),
        "rx_bytes": np.zeros(n_t * n_f, np.int64),
    }
    ports = {
        "time_us": np.repeat(t, n_p),
        "port": np.tile(np.arange(n_p), n_t),
        "src_node": np.tile(np.arange(n_p), n_t),
        "dst_node": np.tile(np.arange(n_p) + 1, n_t),
        "queue_bytes": np.zeros(n_t * n_p, np.int64),
    }
    path = tmp_path / "many.png"
    plot_timeseries(flows, ports, path, title="synthetic")
    assert is_png(path)
    with pytest.raises(ValueError, match="flow id 40 not in the time series"):
        plot_timeseries(flows, ports, tmp_path / "bad.png", flows=[1, 40])


def test_long_series_are_thinned_to_the_host_budget_evenly(runs, cli_static, monkeypatch):
    """Past its memory budget an experiment's series keeps every 2nd (4th, ...) sample: the
    kept samples are exactly the full series' samples number 0, s, 2s, ... (s = stride)."""
    from multiverse_jax import timeseries

    full = runs[1]
    n_times = len(times_ps(full))
    assert full.summary["sample_stride"] == 1 and n_times > 20
    per_sample = (len(full.flows["id"]) + 0) * 8  # lower bound on one sample's bytes
    monkeypatch.setattr(timeseries, "MAX_BYTES_PER_EXPERIMENT", per_sample * n_times // 5)
    (thin,) = simulate([EXPERIMENTS[1]], slots_per_host=cli_static.slots_per_host, static=cli_static)
    stride = thin.summary["sample_stride"]
    assert stride >= 4 and stride & (stride - 1) == 0  # a power of two
    np.testing.assert_array_equal(times_ps(thin), times_ps(full)[::stride])
    for column in ("rate_gbps", "rx_bytes"):
        want, got = per_flow(full, column), per_flow(thin, column)
        for flow, (t, v) in got.items():
            keep = np.isin(want[flow][0], t)
            np.testing.assert_array_equal(want[flow][1][keep], v)
    # Everything else is unchanged.
    assert {k: v for k, v in thin.summary.items() if not k.startswith(("batch_", "sample_"))} == {
        k: v for k, v in full.summary.items() if not k.startswith(("batch_", "sample_"))
    }
