"""One experiment seen on a subset of its ports: the NICs', where a window's last transmit
rounds serve only them.

With the FIFO pass (``ops/fifo_pass.py``) every switch port's departures of a window are on
the wire before its rounds start, so in the htsim sweep's busy windows every round serves
NICs only (their new packets, one a round, and the ACKs queued behind them), yet each
ran over every port: 768 at k=8, for 128 NICs. A round in which no switch port sends
changes nothing at a switch port, and nothing a NIC does in a window lets a switch port
send in it (what a NIC sends arrives after the window), so once no switch port can send,
the window's remaining rounds are the same rounds over the NICs' ports alone: this view
(``systems.transmit.nic_rounds``).

The view's port i is host i's NIC port (``NicParams.nic_port``); its port-sized arrays
(``PortParams``, ``LinkParams``, ``PortState``, ``LinkState``, each round's per-port
values) are the experiment's at those ports, its class queues those ports' (``queues``),
and ``Static.n_ports`` is H. A port keeps its own index in ``PortParams.port_id``, which
is what the pool's ``pkt_port`` holds. A padding host (no NIC: its ``nic_port`` is 0,
another port's) becomes a port of no host with its queues empty, which never sends, and
its entries are never written back (``real``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from multiverse_jax.components.experiment import Params
from multiverse_jax.ops import queues, runs


def nic_ports(params: Params):
    """(H,) int32 the port of each view port (host h's NIC port), (H,) bool a real NIC (not padding)."""
    nic_port = params.nics.nic_port
    real = params.ports.port_host[nic_port] == jnp.arange(params.static.n_hosts)
    return nic_port, real


def view_queues(static, ports):
    """(K class_queues,) int32 the experiment's class queues of ``ports`` (K,), in the view's
    order (``queues.queue_of_class`` over the view's ports)."""
    return queues.port_queues(static, ports)[0].reshape(-1)


def take(tree, index):
    """Every leaf's entries ``index`` along its leading (port) axis."""
    return jax.tree.map(lambda x: x[index], tree)


def put(tree, view_tree, index, real):
    """``tree`` with the entries ``index`` (K,) of every leaf replaced by ``view_tree``'s,
    where ``real`` (K,) (a port's entries are written once, from its own view port)."""

    def write(x, v):
        return x.at[jnp.where(real, index, x.shape[0])].set(v, mode="drop")  # past the end: dropped

    return jax.tree.map(write, tree, view_tree)


def view_params(params: Params, ports, real) -> Params:
    """The experiment's ``Params`` on its ports ``ports`` (K,) (host i's NIC at view port i;
    ``real`` (K,) False for padding hosts: ports of no host)."""
    static = params.static
    view_static = dataclasses.replace(static, n_ports=ports.shape[0], run_ports=runs.run_ports(static))
    port_params = take(params.ports, ports)
    port_params = port_params.replace(port_host=jnp.where(real, port_params.port_host, -1))
    return params.replace(
        static=view_static,
        ports=port_params,
        links=take(params.links, ports),
        nics=params.nics.replace(nic_port=jnp.arange(ports.shape[0], dtype=params.nics.nic_port.dtype)),
    )


def view_order(order: queues.ServiceOrder, view_queue) -> queues.ServiceOrder:
    """The window's service order with its per-queue arrays taken at ``view_queue`` (the
    positions, and so every packet's place, are the experiment's)."""
    arrived_before = None if order.arrived_before is None else order.arrived_before[view_queue]
    return order._replace(queue_end=order.queue_end[view_queue], arrived_before=arrived_before)
