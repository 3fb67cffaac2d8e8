"""Draining the time-series rings (``components/samples.py``) on the host, between calls.

``SampleCollector`` is called with the batch state after every compiled call; it copies
the samples taken since the last call and, at the end, gives each experiment its series
as two long-format tables (one row per sample and flow, one per sample and port).

What a flow sent: ``tx_bytes`` is the payload its sender's NIC has put on the wire so far
(sampled, like ``rx_bytes``, inside the step); ``tx_gbps`` is what it sent since the
previous sample (from time 0 for the first) over the time between them, so a flow
sends at 0 before it starts and after its last packet, and the sum of ``tx_gbps`` times
the sample spans is its ``tx_bytes`` (its size, once it has sent everything). A packet
counts once its first bit has left, so a sample can read up to one packet over the line
rate. ``rate_gbps`` is congestion control's rate (the line rate under ``cc=none``).

Memory: the host keeps every sample of every flow and port, about (33 x flows + 8 x ports)
bytes per sample, which for a training iteration with thousands of flows over many
milliseconds would grow without bound. So each experiment has a budget
(``max_bytes_per_experiment``, default 256 MiB): when its samples exceed it, every other
sample is dropped and from then on only every 2nd (then 4th, 8th, ...) sample is kept --
the series stays evenly spaced, at a coarser interval (``stride``: kept samples are those
whose number is a multiple of it; the effective interval is ``stride x
sim.sample_interval_us``, reported in the summary as ``sample_stride``).
"""

from __future__ import annotations

import jax
import numpy as np

from multiverse_jax.components.experiment import State
from multiverse_jax.ops.packets import PS_BITS_PER_BYTE
from multiverse_jax.units import BPS_PER_GBPS, PS_PER_US


MAX_BYTES_PER_EXPERIMENT = 256 * 2**20


class SampleCollector:
    def __init__(self, n_experiments: int, max_bytes_per_experiment: int | None = None):
        self.seen = np.zeros(n_experiments, np.int64)
        self.chunks: list[list[tuple]] = [[] for _ in range(n_experiments)]
        self.stride = np.ones(n_experiments, np.int64)  # keep samples whose number % stride == 0
        self.nbytes = np.zeros(n_experiments, np.int64)  # host bytes held per experiment
        self.max_bytes = MAX_BYTES_PER_EXPERIMENT if max_bytes_per_experiment is None else max_bytes_per_experiment

    def _thin(self, e: int) -> None:
        """Halve experiment ``e``'s samples (keep the even multiples of the stride)."""
        self.stride[e] *= 2
        merged = tuple(np.concatenate(parts) for parts in zip(*self.chunks[e]))
        keep = merged[0] % self.stride[e] == 0
        self.chunks[e] = [tuple(column[keep] for column in merged)]
        self.nbytes[e] = sum(column.nbytes for column in self.chunks[e][0])

    def __call__(self, state: State) -> None:
        count = np.asarray(jax.device_get(state.samples.sample_count))
        if np.all(count == self.seen):
            return
        smp = jax.device_get(state.samples)
        ring = smp.sample_time_ps.shape[1]
        for e in np.flatnonzero(count > self.seen):
            if count[e] - self.seen[e] > ring:
                raise RuntimeError(
                    f"experiment {e}: {count[e] - self.seen[e]} samples since the last call overflow the ring of {ring}; "
                    "build the batch with n_samples >= steps_per_call"
                )
            number = np.arange(self.seen[e], count[e])
            number = number[number % self.stride[e] == 0]  # the samples kept at the current stride
            at = number % ring
            chunk = (
                number,
                smp.sample_time_ps[e, at],
                smp.sample_flow_rate_bps[e, at],
                smp.sample_flow_window_bytes[e, at],
                smp.sample_flow_tx_bytes[e, at],
                smp.sample_flow_rx_bytes[e, at],
                smp.sample_port_queue_bytes[e, at],
                smp.sample_flow_steady[e, at],
            )
            self.chunks[e].append(chunk)
            self.nbytes[e] += sum(column.nbytes for column in chunk)
            self.seen[e] = count[e]
            while self.nbytes[e] > self.max_bytes and sum(len(c[0]) for c in self.chunks[e]) > 1:
                self._thin(e)

    def series(self, e: int, flow_ids: np.ndarray, link_src: np.ndarray, link_dst: np.ndarray):
        """(flow table, port table) of experiment ``e``: dicts of equal-length columns."""
        n_flows, n_ports = len(flow_ids), len(link_src)
        if not self.chunks[e]:
            time_ps = np.zeros(0, np.int64)
            rate = window = np.zeros((0, n_flows))
            tx = rx = np.zeros((0, n_flows), np.int64)
            queue = np.zeros((0, n_ports), np.int64)
            steady = np.zeros((0, n_flows), bool)
        else:
            _, time_ps, rate, window, tx, rx, queue, steady = (np.concatenate(parts) for parts in zip(*self.chunks[e]))
            rate, window, tx, rx = rate[:, :n_flows], window[:, :n_flows], tx[:, :n_flows], rx[:, :n_flows]
            queue, steady = queue[:, :n_ports], steady[:, :n_flows]
        n_samples = time_ps.shape[0]
        time_us = time_ps / PS_PER_US
        sent_bytes = np.diff(tx, axis=0, prepend=0)  # (T, F) since the previous sample
        span_ps = np.diff(time_ps, prepend=0)[:, None]  # (T, 1) > 0: sample times strictly increase
        flows = {
            "time_us": np.repeat(time_us, n_flows),
            "flow_id": np.tile(flow_ids, n_samples),
            "rate_gbps": rate.reshape(-1) / BPS_PER_GBPS,
            "window_bytes": window.reshape(-1),
            "rx_bytes": rx.reshape(-1),
            "steady": steady.reshape(-1),
            "tx_bytes": tx.reshape(-1),
            "tx_gbps": (sent_bytes * PS_BITS_PER_BYTE / span_ps).reshape(-1) / BPS_PER_GBPS,
        }
        ports = {
            "time_us": np.repeat(time_us, n_ports),
            "port": np.tile(np.arange(n_ports), n_samples),
            "src_node": np.tile(link_src, n_samples),
            "dst_node": np.tile(link_dst, n_samples),
            "queue_bytes": queue.reshape(-1),
        }
        return flows, ports
