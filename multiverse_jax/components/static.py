"""Everything that sets an array shape: ``Params.static``, a compile-time field (aux data of
the ``Params`` pytree, not a leaf), so it is part of the jit cache key as the shapes are.
Systems read sizes from it (``params.static.n_ports``), never from an unrelated array."""

from __future__ import annotations

import dataclasses

RUN_PACKETS = 8  # the packets a port may start in one transmit round where runs pay (``Static.run_packets``)
RUN_PACKETS_SINGLE_CLASS = 15  # the same on a CPU where every port's packets are in one class queue (``rival_classes``)
RUN_PORTS_SINGLE_CLASS = 8  # the ports that may start a run in one round there (``Static.run_ports``)


@dataclasses.dataclass(frozen=True)
class Static:
    """Shapes shared by every experiment of a batch (the largest of the batch, padded)."""

    n_nodes: int  # N: hosts + switches
    n_hosts: int  # H
    n_ports: int  # P: directed links = egress ports
    n_flows: int  # F
    n_triggers: int  # T (>= 1; a dummy trigger when the input has none)
    n_activators: int  # A: most flows that activate one trigger
    route_width: int  # W: most equal-cost next hops of one (node, destination)
    pinned_len: int  # M: longest pinned path, in links (>= 1)
    slots_per_host: int  # S: packet slots owned by each host (its unacknowledged packets)
    pfc_history: int  # L: PFC decisions remembered per link (covers the longest link delay)
    int_hops: int = 1  # Hi: in-band telemetry entries per packet (switch hops of the longest HPCC path, at least
    #   1; 0 when no experiment runs HPCC: no telemetry columns, and transmit records none)
    n_data_classes: int = 1  # C: strict-priority data classes per port (flow priorities 0..C-1)
    n_samples: int = 1  # R: time-series ring size (>= windows per compiled call when sampling)
    n_tasks: int = 1  # T: tasks of the workload's DAG (1 dummy without one)
    task_deps: int = 1  # D: most dependencies of one task
    path_len: int = 1  # Hp: links of the longest data or ACK path of a flow (1 unless flow paths are needed: flow and hybrid modes)
    restorer_history: int = 1  # Hr: depth samples the learned restorer reads (restorer.features.N_HISTORY when an
    #   experiment has hybrid.restore=transformer, else 1: the restorer is compiled out)
    window_bits: int = 40  # bits of the longest window of the batch, in ps (PFC's packed event keys)
    inexact_rates: bool = False  # some link rate does not divide 8e12 bit-ps/s: serialisation needs a division
    int_queue_with_packet: bool = False  # some experiment's HPCC telemetry records the queue with the departing
    #   packet (hpcc.int_queue=with_packet): transmit looks ahead at the packets in flight to each port
    rival_classes: bool = True  # a port may hold packets in two class queues (control-class ACKs, or flow
    #   priorities): runs merge its queues by strict priority. False where every experiment queues ACKs with data
    #   at one priority (htsim's configuration): every port's packets are in one FIFO, its only class queue
    #   (``n_queues``: P, not P (1 + C)), and runs take its closed form
    congestion_control: bool = True  # some experiment runs congestion control (cc other than none); where none
    #   does, the cc system (``systems/cc.py``), which would change nothing, is compiled out
    switch_serial: bool = False  # some experiment has switch.pipeline=serial: transmit ranks the packets that
    #   reach a switch at one instant (a ports x queues comparison per round) and queues sort by a third key
    admit_entries: int = 1  # A: hand-over times kept per flow for a polling sender (hpcc.pacing=ticks;
    #   ``ops/polls.py``): more than the polls of one window; 1 when no experiment polls
    flow_level: bool = False  # the step is the flow-level one (sim.mode=flow): a different compiled program
    steady_window: int = 1  # L: rate samples kept per flow (hybrid.window; 1 when no experiment is hybrid)
    n_link_epochs: int = 1  # K: fabrics between timed link events (1 + most event times of an experiment;
    #   1: no experiment has topology.link_events, and the epoch selection is compiled out)
    prefix_columns: int = 0  # columns per host of the pool prefix windows run on while the packets fit
    #   (``ops/pool.py``; 0: the whole pool always; per host: its places over H). A choice, not a shape an experiment needs
    prefix_inner_columns: tuple[int, ...] = ()  # the prefix's own prefixes, each inside the last (fewer
    #   columns each): the windows on a prefix run on its own while their packets fit there; (): none). A choice, not a shape
    prefix_per_host: bool = False  # the prefixes are per host (``ops/pool.py``): prefix_columns x H places holding each
    #   host's own columns in use and what it may create, not the first prefix_columns columns of every host (and the
    #   inner prefixes likewise, each inside the last). ``build_batch`` sets it by ``sim.live_prefix`` (auto: on a CPU). A choice, not a shape

    run_packets: int = 1  # M: packets one port may start in one transmit round, one after another from its class
    #   queues (``ops/runs.py``; one with int_queue_with_packet). ``build_batch`` gives RUN_PACKETS (on a CPU
    #   without rival_classes RUN_PACKETS_SINGLE_CLASS) unless ``sim.run_packets`` asks for another. A choice, not a shape
    run_ports: int = 0  # K: ports that may start more than one packet in one transmit round (``ops/runs.py``; 0:
    #   max(32, P / 8)). ``build_batch`` gives RUN_PORTS_SINGLE_CLASS on a CPU without rival_classes: a round's runs
    #   cost their K x (M - 1) cells, and a few runners (the ports with the most queued) took the htsim sweep 6 %
    #   less time than 96 (``benchmarks/HISTORY.md``, stop 56). A choice, not a shape
    long_runs: bool = False  # a round may start long single-class runs at a few ports, and single-class runs
    #   at more in the same closed form (``ops/runs.py``, ``follow``'s ways 1 and 2): fewer rounds a window, and
    #   fewer kernels a round, which an accelerator's lockstep batch pays in kernel
    #   latency; in ``map`` on a CPU they cost as much as they save. ``build_batch`` sets it off the CPU unless
    #   ``sim.long_runs`` asks. A choice, not a shape
    fifo_pass: bool = False  # where every port has one class queue, every switch port's departures of a window in one
    #   pass at its start (``ops/fifo_pass.py``), the rounds serving the NICs and the ports it stops at a PFC pause;
    #   the rounds after the last in which a switch port sends run over the NICs' ports alone (``transmit.nic_rounds``).
    #   ``build_batch`` sets it off the CPU unless ``sim.fifo_pass`` asks (as ``long_runs``). A choice, not a shape
    nic_pass: bool = False  # with ``fifo_pass``, every NIC's departures of a window, its new packets among them, in a
    #   fixed number of rows at its start (``ops/nic_pass.py``), the rounds going on where it stops. ``build_batch``
    #   sets it off the CPU unless ``sim.nic_pass`` asks (as ``long_runs``). A choice, not a shape
    lockstep_experiments: int = 0  # B: experiments a vmap batch steps in lockstep at once, in B lanes that each take
    #   the next experiment when theirs stops (``engine.lockstep_lanes``; 0: by backend, the whole batch on an
    #   accelerator, a cache's worth of pools on a CPU). A choice, not a shape

    @property
    def n_slots(self) -> int:
        """Packet pool size per experiment: H * S."""
        return self.n_hosts * self.slots_per_host

    @property
    def first_queued_class(self) -> int:
        """The lowest class a port queues packets in: 0 (control) where some experiment may
        have control packets (``rival_classes``); else 1, as every packet is in its flow's
        data class (``ops/queues.packet_class``) and class 0 would stay empty."""
        return 0 if self.rival_classes else 1

    @property
    def class_queues(self) -> int:
        """The class queues of a port: classes ``first_queued_class`` .. C (one, the port's
        data FIFO, without rival classes: htsim's configuration)."""
        return 1 + self.n_data_classes - self.first_queued_class

    @property
    def n_queues(self) -> int:
        """Q: class queues over every port, P x ``class_queues`` (queue ``class_queues`` p +
        k - ``first_queued_class`` is port p's class k)."""
        return self.n_ports * self.class_queues
