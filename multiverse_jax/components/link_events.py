"""Link epochs: the fabric between timed link events (``topology/link_events.py``).

Each experiment carries the link rates and ECMP tables of each of its epochs (K =
``Static.n_link_epochs``: 1 + the most distinct event times of an experiment of the
batch). The step reads the epoch its window starts in (``ops/link_events.py``); a batch
without events has K = 1, never reads these arrays, and holds them empty (0 epochs). An experiment with fewer epochs
than K repeats its last one, starting NEVER (so it never begins).

The flow paths of each epoch (hybrid and flow modes; ``batch.with_flow_paths`` fills
them) and which flows an event moves (``epoch_flow_moved``) are per-experiment state a
frozen hybrid partition needs: its steady phase ends at the first event that moves one of
its flows.
"""

from __future__ import annotations

import chex
import numpy as np
from flax import struct

from multiverse_jax.components.padding import pad
from multiverse_jax.components.static import Static
from multiverse_jax.experiment import Experiment
from multiverse_jax.topology.link_events import changed_ports
from multiverse_jax.units import NEVER


@struct.dataclass
class LinkEventParams:
    epoch_start_ps: chex.Array  # (K,) int64 when each epoch begins (epoch 0: 0; padding: NEVER)
    epoch_link_rate_bps: chex.Array  # (K, P) int64 each link's rate in the epoch (padded links: 1)
    epoch_route_next_port: chex.Array  # (K, N, H, W) int32 the epoch's ECMP egress ports (-1 pad)
    epoch_route_n_next: chex.Array  # (K, N, H) int32 valid entries of epoch_route_next_port
    epoch_link_changed: chex.Array  # (K, P) bool the link's state (up, rate) changed when the epoch began
    # Filled by batch.with_flow_paths (hybrid and flow modes), empty (-1, 0, False) otherwise:
    epoch_flow_data_path: chex.Array  # (K, F, Hp) int32 each flow's data path in the epoch (-1 pad)
    epoch_flow_ack_path: chex.Array  # (K, F, Hp) int32 each flow's ACK path in the epoch
    epoch_flow_data_tail_ps: chex.Array  # (K, F) int64 ``FlowParams.flow_data_tail_ps`` in the epoch
    epoch_flow_ack_path_ps: chex.Array  # (K, F) int64 ``FlowParams.flow_ack_path_ps`` in the epoch
    epoch_flow_moved: chex.Array  # (K, F) bool the epoch's start changes the flow's paths or a link on them


def link_event_params(exp: Experiment, s: Static) -> LinkEventParams:
    """The experiment's epochs, padded to ``s`` (K epochs; none stored when K = 1)."""
    if s.n_link_epochs == 1:
        return _no_epochs(s)
    k, epochs, routing = s.n_link_epochs, exp.epochs, exp.epoch_routing
    last = len(epochs) - 1
    pick = [min(i, last) for i in range(k)]  # padding epochs repeat the last one
    start = np.array([epochs[i].start_ps if i <= last else NEVER for i in range(k)], np.int64)
    rates = np.stack([pad(epochs[i].topology.link_rate_bps.astype(np.int64), (s.n_ports,), 1) for i in pick])
    tables = [routing[i] for i in pick]
    changed = np.zeros((k, s.n_ports), bool)
    for i in range(1, len(epochs)):
        changed[i, : epochs[i].topology.n_links] = changed_ports(epochs[i - 1].topology, epochs[i].topology)
    paths = np.full((k, s.n_flows, s.path_len), -1, np.int32)
    return LinkEventParams(
        epoch_start_ps=start,
        epoch_link_rate_bps=rates,
        epoch_route_next_port=np.stack([pad(t.next_port, (s.n_nodes, s.n_hosts, s.route_width), -1) for t in tables]),
        epoch_route_n_next=np.stack([pad(t.n_next, (s.n_nodes, s.n_hosts), 0) for t in tables]),
        epoch_link_changed=changed,
        epoch_flow_data_path=paths,
        epoch_flow_ack_path=paths.copy(),
        epoch_flow_data_tail_ps=np.zeros((k, s.n_flows), np.int64),
        epoch_flow_ack_path_ps=np.zeros((k, s.n_flows), np.int64),
        epoch_flow_moved=np.zeros((k, s.n_flows), bool),
    )


def _no_epochs(s: Static) -> LinkEventParams:
    """Arrays of 0 epochs: a batch without link events carries nothing."""
    f, p = s.n_flows, s.n_ports
    return LinkEventParams(
        epoch_start_ps=np.zeros(0, np.int64),
        epoch_link_rate_bps=np.zeros((0, p), np.int64),
        epoch_route_next_port=np.zeros((0, s.n_nodes, s.n_hosts, s.route_width), np.int32),
        epoch_route_n_next=np.zeros((0, s.n_nodes, s.n_hosts), np.int32),
        epoch_link_changed=np.zeros((0, p), bool),
        epoch_flow_data_path=np.zeros((0, f, s.path_len), np.int32),
        epoch_flow_ack_path=np.zeros((0, f, s.path_len), np.int32),
        epoch_flow_data_tail_ps=np.zeros((0, f), np.int64),
        epoch_flow_ack_path_ps=np.zeros((0, f), np.int64),
        epoch_flow_moved=np.zeros((0, f), bool),
    )
