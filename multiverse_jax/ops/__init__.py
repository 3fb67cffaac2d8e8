"""Operations the systems share: pure functions of ``Params`` and ``State`` arrays.

``systems/`` holds the step's systems (one per file, ``f(params, state, window_end_ps) ->
state``); what several of them need lives here, and nothing here imports a system:

* ``segments``: per-segment reductions (FIFO head, count or sum, latest time);
* ``hashing``: the 32-bit hash behind ECMP, flow hashes and RED's coin;
* ``packets``: the pool's arrivals of a window, its queued packets, bytes queued per
  port, serialisation time;
* ``marking``: RED/ECN marks and in-band telemetry at switch egress;
* ``pfc``: when a paused port may start a data packet;
* ``cc``: what the NIC and the clock ask congestion control (window gate, pacing,
  DCQCN's byte counter and timers);
* ``nic``: what each NIC offers per data class, and the packets it puts on the wire;
* ``routing``: the egress port a packet takes at a node (pinned path or ECMP);
* ``paths``: each flow's whole data and ACK path, as routing gives it;
* ``maxmin``: max-min fair flow rates by progressive filling (priority classes, weights);
* ``steady``: the steady-state test on a flow's rate rings (hybrid mode);
* ``partitions``: flows that share a port, as connected components (hybrid mode);
* ``freeze``: moving a partition's times out of reach and back (hybrid mode's jumps);
* ``restore``: the queue depths a thawing partition is rebuilt to, and the rebuild.
"""
