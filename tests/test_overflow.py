"""Lossless overflow (``switch.overflow``): a queue fed by several ingresses can grow past
``switch.buffer_bytes`` although PFC holds each ingress near XOFF; ``report`` counts it and
goes on (htsim's behaviour), ``error`` stops naming the port. Nothing is ever dropped."""

import json

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from conftest import run_small
from multiverse_jax.cli import run
from multiverse_jax.conf.schema import SwitchConfig
from multiverse_jax.config import experiment_from_config
from multiverse_jax.errors import InputError
from multiverse_jax.experiment import Experiment
from multiverse_jax.sweep.results import metrics_of
from multiverse_jax.topology.graph import from_cables
from multiverse_jax.workload.flows import make_flows

# h0 and h1 both send to h2 through one switch: the egress s0 -> h2 (port 5) has two ingresses.
FAN_IN = from_cables("fan_in", ["h0", "h1", "h2", "s0"], 3, [(0, 3, 100.0, 1.0), (1, 3, 100.0, 1.0), (2, 3, 100.0, 1.0)])
S0_TO_H2 = FAN_IN.link_between(FAN_IN.node_index("s0"), FAN_IN.node_index("h2"))
WIRE, SER_PS, DELAY_PS = 4160, 332_800, 1_000_000  # a full packet, its time at 100 Gb/s, the link delay
XOFF = 40_000
BUFFER = 60_000  # < 2 XOFF: PFC lets each ingress reach XOFF (plus headroom), so the queue outgrows it
SIZE = 500_000


def fan_in(overflow, buffer_bytes=BUFFER, xoff=XOFF, flows=None):
    switch = SwitchConfig(buffer_bytes=buffer_bytes, pfc_xoff_bytes=xoff, pfc_xon_bytes=xoff // 2, overflow=overflow)
    return Experiment(FAN_IN, flows or make_flows([0, 1], [2, 2], [SIZE, SIZE], [0, 0]), switch=switch)


def same_results(a, b):
    """Bit for bit: every flow column, the queue maxima and every summary figure but wall times."""
    for column, values in a.flows.items():
        np.testing.assert_array_equal(values, b.flows[column], err_msg=column)
    np.testing.assert_array_equal(a.port_max_queue_bytes, b.port_max_queue_bytes)
    figures = {k: v for k, v in a.summary.items() if not k.startswith("batch_")}
    assert json.dumps(figures, sort_keys=True) == json.dumps(
        {k: v for k, v in b.summary.items() if not k.startswith("batch_")}, sort_keys=True
    )


def test_report_counts_a_queue_past_its_buffer_and_delivers_every_byte():
    result = run_small([fan_in("report")])[0]
    summary = result.summary
    assert result.ok, summary
    assert (result.flows["rx_bytes"] == SIZE).all()  # nothing dropped
    assert summary["pfc_pauses"] > 0  # PFC held both ingresses ...
    assert result.port_max_queue_bytes[S0_TO_H2] > 2 * XOFF > BUFFER  # ... each at XOFF: their sum is past the buffer
    assert summary["overflow_ports"] == 1 and summary["overflow_events"] >= 1
    (record,) = summary["overflow_by_port"]
    assert record["port"] == S0_TO_H2 and record["link"] == "s0->h2"
    assert summary["max_excess_bytes"] == record["max_excess_bytes"] == result.port_max_queue_bytes[S0_TO_H2] - BUFFER
    assert 0 < summary["over_buffer_ps"] < summary["simulated_time_ps"]
    assert summary["over_buffer_us"] == summary["over_buffer_ps"] / 1e6 and summary["error"] == ""


def test_error_stops_naming_the_port():
    result = run_small([fan_in("error")])[0]
    assert not result.ok
    assert result.summary["flows_finished"] == 0
    assert result.summary["error"].startswith(f"egress queue s0->h2 (port {S0_TO_H2}, ")
    assert "exceeded switch.buffer_bytes" in result.summary["error"]
    assert "switch.overflow=report" in result.summary["error"]  # says how to go on instead
    assert result.summary["overflow_events"] >= 1


@pytest.mark.parametrize("batching", ["vmap", "map"])
def test_a_batch_mixing_report_and_error_equals_each_alone(batching):
    exps = [fan_in("report"), fan_in("error"), fan_in("report", buffer_bytes=80_000)]
    together = run_small(exps, batching=batching)
    assert [r.ok for r in together] == [True, False, True]
    for exp, batched in zip(exps, together):
        same_results(batched, run_small([exp], batching=batching)[0])


def reference_queue(arrivals_ps, buffer_bytes):
    """A plain FIFO output queue of full packets at 100 Gb/s: (times it rose above the
    buffer, largest excess, time above the buffer in ps). Arrivals at an instant join
    before the departure that starts then, as the simulator's queue samples count them."""
    starts, free = [], 0
    for arrival in sorted(arrivals_ps):
        free = max(free, arrival)
        starts.append(free)
        free += SER_PS
    queue, events, peak, above_ps, over, last = 0, 0, 0, 0, False, 0
    for t in sorted(set(arrivals_ps) | set(starts)):
        above_ps += (t - last) if over else 0
        queue += WIRE * arrivals_ps.count(t)
        peak = max(peak, queue)
        events += int(queue > buffer_bytes and not over)
        queue -= WIRE * starts.count(t)
        over, last = queue > buffer_bytes, t
    return events, peak - buffer_bytes, above_ps


def test_counters_match_a_reference_queue_and_report_changes_nothing_else():
    """Two bursts of two line-rate senders into s0 -> h2, XOFF high enough that PFC never
    pauses. Every arrival coincides with a departure start (the port sends back to back),
    so the simulator's time above the buffer is exact. Each burst crosses the buffer twice:
    for an instant (two packets arrive as one leaves), then for good one packet time later.
    A buffer the queue never reaches gives the same run with no overflow counted."""
    packets, second_ps = 100, 200_000_000  # 100 full packets per flow; the second burst after the first drained
    flows = make_flows([0, 1, 0, 1], [2, 2, 2, 2], [packets * 4096] * 4, [0, 0, second_ps, second_ps])
    buffer_bytes = 300_000
    counted, roomy = run_small([fan_in("report", buffer_bytes, buffer_bytes, flows), fan_in("report", 10**7, buffer_bytes, flows)])
    assert counted.ok and counted.summary["pfc_pauses"] == 0
    arrivals = [burst + (i + 1) * SER_PS + DELAY_PS for burst in (0, second_ps) for i in range(packets) for _ in (0, 1)]
    events, excess, above_ps = reference_queue(arrivals, buffer_bytes)
    assert events == 4 and excess > 0
    (record,) = counted.summary["overflow_by_port"]
    assert (record["port"], record["events"], record["max_excess_bytes"], record["over_buffer_ps"]) == (
        S0_TO_H2, events, excess, above_ps
    )
    assert roomy.summary["overflow_events"] == 0 and roomy.summary["overflow_by_port"] == []
    for column in ("start_ps", "finish_ps", "rx_finish_ps", "rx_bytes"):
        np.testing.assert_array_equal(counted.flows[column], roomy.flows[column])
    np.testing.assert_array_equal(counted.port_max_queue_bytes, roomy.port_max_queue_bytes)


def test_sweep_table_has_the_overflow_columns():
    summary = {"status": "ok", "overflow_ports": 2, "overflow_events": 5, "max_excess_bytes": 1234, "over_buffer_us": 7.5}
    metrics = metrics_of(summary)
    assert [metrics[k] for k in ("overflow_ports", "overflow_events", "max_excess_bytes", "over_buffer_us")] == [2, 5, 1234, 7.5]


# --- The config key and the command line --------------------------------------------------------


def config(*overrides):
    with initialize_config_module("multiverse_jax.conf", version_base=None):
        return compose("config", overrides=list(overrides))


def test_default_is_error():
    assert SwitchConfig().overflow == "error" and experiment_from_config({}).switch.overflow == "error"


def test_unknown_overflow_names_the_key_and_the_valid_values():
    with pytest.raises(InputError, match=r"switch.overflow must be one of report, error, got 'drop'"):
        SwitchConfig(overflow="drop")
    with pytest.raises(InputError, match=r"switch.overflow must be one of report, error, got 'drop'"):
        experiment_from_config({"switch": {"overflow": "drop"}})
    with pytest.raises(Exception) as info:
        config("switch.overflow=drop")  # Hydra: the schema's Enum, before any of our code runs
    message = f"{info.value} {info.value.__cause__}"
    assert "switch.overflow" in message and "expected one of [report, error]" in message


INCAST = [
    "workload=incast", "workload.senders=4", "workload.flow_bytes=100000", "output=minimal",
    "switch.buffer_bytes=50000", "switch.pfc_xoff_bytes=20000", "switch.pfc_xon_bytes=10000",
]  # fmt: skip


def test_cli_report_warns_and_writes_the_counts(tmp_path, capsys):
    assert run(config(*INCAST, "switch.overflow=report"), tmp_path) == 0
    out, err = capsys.readouterr()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["overflow_events"] > 0 and summary["max_excess_bytes"] > 0
    assert summary["overflow_by_port"][0]["link"] == "tor0->h0"  # the incast's last hop
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "tor0->h0" in warning[0] and "nothing was dropped" in warning[0]
    assert "overflow events" in out and "max excess (bytes)" in out


def test_cli_error_exits_1_naming_the_port(tmp_path, capsys):
    assert run(config(*INCAST), tmp_path) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "simulation failed: egress queue tor0->h0 (port" in err
