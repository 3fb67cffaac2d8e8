"""The Python API: simulate a list of experiments as one batch and get per-experiment results."""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

from multiverse_jax.conf.schema import STEPS_PER_CALL
from multiverse_jax import engine
from multiverse_jax.batch import Batch, build_batch
from multiverse_jax.experiment import Experiment
from multiverse_jax.components.experiment import ERROR_BUFFER_OVERFLOW, ERROR_MESSAGES, State
from multiverse_jax.components.static import Static
from multiverse_jax.report.timeline import iteration_split, task_columns
from multiverse_jax.timeseries import SampleCollector
from multiverse_jax.topology.cost import topology_cost
from multiverse_jax.units import NEVER, NOT_YET_PS, PS_PER_US, ps_or_not_yet, us_from_ps


@dataclasses.dataclass(frozen=True)
class Result:
    """What one experiment produced."""

    flows: dict[str, np.ndarray]  # per-flow columns (see ``flow_columns``)
    summary: dict  # scalars: status, error, job and simulated time (µs and ps), windows, packet hops, queues,
    #   buffer overflows (and ``overflow_by_port``: a list of ``overflow_records``)
    port_max_queue_bytes: np.ndarray  # (P,) largest queue of each egress port
    flow_series: dict[str, np.ndarray] | None = None  # time series per (sample, flow); None if not sampled
    tasks: dict[str, np.ndarray] | None = None  # per-task table (``report/timeline.py``); None without a task graph
    port_series: dict[str, np.ndarray] | None = None  # time series per (sample, port)

    @property
    def ok(self) -> bool:
        return self.summary["status"] == "ok"


def overflow_records(topology, events, max_queue_bytes, buffer_bytes, over_buffer_ps) -> list[dict]:
    """One record per egress port whose queue grew past its buffer (arrays (P,) over the
    topology's ports), the largest excess first: the port, its link by node names, how many
    times it rose above the buffer, by how much at most (bytes) and for how long (in all)."""
    port_names = topology.port_names()
    ports = np.flatnonzero(events > 0)
    records = [
        {
            "port": int(p),
            "link": port_names[p],
            "events": int(events[p]),
            "max_excess_bytes": int(max_queue_bytes[p] - buffer_bytes[p]),
            "over_buffer_ps": int(over_buffer_ps[p]),
            "over_buffer_us": float(over_buffer_ps[p] / PS_PER_US),
        }
        for p in ports
    ]
    return sorted(records, key=lambda r: (-r["max_excess_bytes"], r["port"]))


def overflow_text(records: list[dict], shown: int = 3) -> str:
    """The ports of ``overflow_records`` in words (the first ``shown`` by name)."""
    named = ", ".join(f"{r['link']} (port {r['port']}, up to {r['max_excess_bytes']} bytes over)" for r in records[:shown])
    more = f" and {len(records) - shown} more" if len(records) > shown else ""
    return f"egress queue{'s' if len(records) > 1 else ''} {named}{more} exceeded switch.buffer_bytes"


def error_message(error_word: int, overflows: list[dict] | None = None) -> str:
    """The reasons encoded in an experiment's error word, '' if none; a buffer overflow
    names its ports when ``overflows`` (``overflow_records``) are given."""
    messages = []
    for bit, message in ERROR_MESSAGES.items():
        if not error_word & bit:
            continue
        if bit == ERROR_BUFFER_OVERFLOW and overflows:
            message = (
                f"{overflow_text(overflows)} (switch.overflow=error; raise switch.buffer_bytes, lower "
                "switch.pfc_xoff_bytes, or set switch.overflow=report to count overflows and go on, as htsim does)"
            )
        messages.append(message)
    return "; ".join(messages)


def overflow_summary(records: list[dict]) -> dict:
    """The summary's overflow figures: ports, events, largest excess (bytes), time above
    the buffer summed over ports (µs and exact ps), and the records themselves."""
    over_ps = sum(r["over_buffer_ps"] for r in records)
    return {
        "overflow_ports": len(records),
        "overflow_events": sum(r["events"] for r in records),
        "max_excess_bytes": max((r["max_excess_bytes"] for r in records), default=0),
        "over_buffer_us": over_ps / PS_PER_US,
        "over_buffer_ps": over_ps,
        "overflow_by_port": records,
    }


def flow_columns(experiment: Experiment, state: State, e: int) -> dict[str, np.ndarray]:
    """Per-flow results of experiment ``e`` of the batch, in input order.

    Times twice: float64 µs (``start_us``, ``finish_us``, ``rx_finish_us``, ``fct_us``; NaN
    where the event never happened) and the exact int64 ps the simulator kept
    (``start_ps``, ``finish_ps``, ``rx_finish_ps``, ``fct_ps``; ``NOT_YET_PS`` = -1 there).
    """
    flows = experiment.flows
    n = len(flows)
    fs = jax.tree.map(lambda x: np.asarray(x[e, :n]), state.flows)
    begin_ps, finish_ps, rx_finish_ps = fs.flow_begin_ps, fs.flow_finish_ps, fs.flow_rx_finish_ps
    begin, finish, rx_finish = us_from_ps(begin_ps), us_from_ps(finish_ps), us_from_ps(rx_finish_ps)
    completed = (begin_ps != NEVER) & (finish_ps != NEVER)
    marks = np.asarray(state.cc.flow_ecn_marked_packets[e, :n])
    cnps = np.asarray(state.cc.dcqcn.flow_cnps_sent[e, :n])
    flow_level_ps = np.asarray(state.steady.flow_level_ps[e, :n])
    fct_ps = np.where(completed, finish_ps - begin_ps, 0)
    return {
        "id": flows.flow_id,
        "src": flows.src,
        "dst": flows.dst,
        "size_bytes": flows.size_bytes,
        "start_us": begin,
        "finish_us": finish,
        "rx_finish_us": rx_finish,
        "fct_us": finish - begin,
        "start_ps": ps_or_not_yet(begin_ps),
        "finish_ps": ps_or_not_yet(finish_ps),
        "rx_finish_ps": ps_or_not_yet(rx_finish_ps),
        "fct_ps": np.where(completed, finish_ps - begin_ps, NOT_YET_PS).astype(np.int64),
        "rx_bytes": fs.flow_rx_bytes,
        "priority": flows.prio,
        "ecn_marked_packets": marks,
        "cnps": cnps,
        "flow_level_us": flow_level_ps / PS_PER_US,  # time spent frozen, advancing at flow level (sim.mode=hybrid)
        "flow_level_share": np.where(fct_ps > 0, flow_level_ps / np.maximum(fct_ps, 1), 0.0),
        "steady_phases": np.asarray(state.steady.flow_jumps[e, :n]),
        "steady_rate_gbps": np.asarray(state.steady.steady_rate[e, :n]) * 8e3,  # bytes/ps -> Gb/s: its last phase's rate
    }


def _summary(experiment: Experiment, columns: dict, host: dict, e: int) -> dict:
    """Experiment ``e``'s summary scalars from its flow columns and the batch's host arrays."""
    n_ports = experiment.topology.n_links
    port = {name: host[name][e, :n_ports] for name in PORT_FIGURES}
    overflows = overflow_records(
        experiment.topology, port["overflow_events"], port["max_queue"], port["buffer"], port["over_buffer_ps"]
    )
    error = int(host["error"][e])
    fct = columns["fct_us"]
    finished = fct[~np.isnan(fct)]
    return {
        "status": "ok" if error == 0 and bool(host["done"][e]) else "failed",
        "error": error_message(error, overflows),
        "n_flows": len(experiment.flows),
        "flows_finished": int(finished.size),
        "job_time_us": float(np.nanmax(columns["finish_us"])) if finished.size else float("nan"),
        "job_time_ps": int(columns["finish_ps"].max()) if finished.size else NOT_YET_PS,
        "simulated_time_us": float(host["time_ps"][e] / PS_PER_US),
        "simulated_time_ps": int(host["time_ps"][e]),
        "fct_mean_us": float(finished.mean()) if finished.size else float("nan"),
        "fct_p50_us": float(np.percentile(finished, 50)) if finished.size else float("nan"),
        "fct_p99_us": float(np.percentile(finished, 99)) if finished.size else float("nan"),
        "max_queue_bytes": int(port["max_queue"].max()),
        "pfc_pauses": int(port["pauses"].sum()),
        "bytes_on_wire": int(port["tx_bytes"].sum()),
        "n_windows": int(host["n_windows"][e]),
        "n_packet_hops": int(host["n_packet_hops"][e]),
        "mode": str(experiment.sim.mode),
        "packet_hops_skipped": int(host["skipped_hops"][e]),  # estimated: packets jumped times their links
        "steady_entries": int(host["n_freezes"][e]),  # partitions frozen
        "steady_exits": int(host["n_thaws"][e]),
        "restore_added_packets": int(host["restore_added"][e]),  # put back into queues at re-entry
        "restore_drained_packets": int(host["restore_drained"][e]),  # taken off queues (delivered) at re-entry
        "flow_level_share": float(np.sum(columns["flow_level_us"]) / max(np.nansum(fct), 1e-9)) if finished.size else 0.0,
        **overflow_summary(overflows),
        **topology_cost(experiment.topology),  # switches, switch_ports, cables, max_radix
    }


PORT_FIGURES = ("max_queue", "pauses", "tx_bytes", "buffer", "overflow_events", "over_buffer_ps")  # (E, P) host arrays


def results(
    batch: Batch, state: State, timings: dict | None = None, collector: SampleCollector | None = None
) -> list[Result]:
    """Split a finished batch into one Result per experiment."""
    host = jax.device_get(
        {
            "time_ps": state.time_ps,
            "error": state.error,
            "done": state.done,
            "n_windows": state.n_windows,
            "n_packet_hops": state.n_packet_hops,
            "max_queue": state.ports.port_max_queue_bytes,
            "pauses": state.links.pfc_pause_count,
            "tx_bytes": state.ports.port_tx_bytes,
            "buffer": batch.params.ports.port_buffer_bytes,
            "overflow_events": state.ports.port_overflow_events,
            "over_buffer_ps": state.ports.port_over_buffer_ps,
            "task_start": state.tasks.task_start_ps,
            "task_finish": state.tasks.task_finish_ps,
            "skipped_hops": state.steady.skipped_hops,
            "n_freezes": state.steady.n_freezes,
            "n_thaws": state.steady.n_thaws,
            "restore_added": state.steady.restore_added_packets,
            "restore_drained": state.steady.restore_drained_packets,
        }
    )
    out = []
    for e, experiment in enumerate(batch.experiments):
        columns = flow_columns(experiment, state, e)
        summary = _summary(experiment, columns, host, e)
        if timings:
            summary.update({f"batch_{k}": v for k, v in timings.items()})
        tasks = None
        if experiment.tasks is not None:
            n_tasks = len(experiment.tasks)
            tasks = task_columns(experiment.tasks, host["task_start"][e, :n_tasks], host["task_finish"][e, :n_tasks])
            summary.update(iteration_split(tasks, experiment.tasks.n_gpus))
        flow_series = port_series = None
        if collector is not None and experiment.sim.sample_interval_us > 0:
            topo = experiment.topology
            flow_series, port_series = collector.series(e, experiment.flows.flow_id, topo.link_src, topo.link_dst)
            summary["sample_stride"] = int(collector.stride[e])  # > 1: thinned to fit the host budget
        out.append(
            Result(
                flows=columns,
                summary=summary,
                port_max_queue_bytes=host["max_queue"][e, : experiment.topology.n_links],
                flow_series=flow_series,
                port_series=port_series,
                tasks=tasks,
            )
        )
    return out


def simulate(
    experiments,
    *,
    slots_per_host: int = 256,
    steps_per_call: int = STEPS_PER_CALL,
    batching: str = "auto",
    static: Static | None = None,
    on_progress: Callable[[State], None] | None = None,
    devices: int | str | None = None,
    batch_size: int | None = None,
) -> list[Result]:
    """Simulate ``experiments`` (a list of Experiment) as one batched program.

    Experiments with ``sim.sample_interval_us > 0`` (the default, 5 µs) also return their time series.

    ``devices``: ``None`` or ``1`` runs on the default device; ``N > 1`` or ``"all"``
    shards the experiments over N local devices (``engine.run``), with the same
    results, bit for bit. The experiment axis must split evenly, so the batch is padded
    to a multiple of N with copies of the last experiment. A copy starts marked done,
    so it never steps (it costs memory, not time), and its results are discarded: the
    returned list has one Result per given experiment, in order, as without padding.
    ``on_progress`` sees the padded batch.

    ``batch_size``: pad the batch the same way to at least this many experiments, so that
    batches of different sizes share one compiled program (a search's asks, whose valid
    points vary in number).
    """
    experiments = list(experiments)
    n_real = len(experiments)
    engine.split_cpu_into_devices(devices)  # if nothing has started JAX's backend yet
    mesh_devices = engine.resolve_devices(devices)  # fails early on a bad count
    n_devices = 1 if mesh_devices is None else len(mesh_devices)
    target = max(n_real, batch_size or 0)
    padding = target - n_real + (-target % n_devices)
    batch = build_batch(
        experiments, slots_per_host=slots_per_host, static=static, n_samples=steps_per_call, batch_size=n_real + padding
    )
    state = batch.state
    sampling = any(e.sim.sample_interval_us > 0 for e in batch.experiments)
    collector = SampleCollector(n_real + padding) if sampling else None

    def progress(state: State) -> None:
        if collector is not None:
            collector(state)
        if on_progress is not None:
            on_progress(state)

    state, timings = engine.run(
        batch.params, state, steps_per_call=steps_per_call, batching=batching, on_progress=progress, devices=devices
    )
    return results(batch, state, timings, collector)
