"""Congestion-control algorithms: each module holds one algorithm's update rules as pure,
vectorised functions of per-flow arrays: ``CcState`` in, ``CcState`` out, reading and
writing the shared rate and window and the algorithm's own state (``CcState.dcqcn``,
``.dctcp``, ``.hpcc``, ``.timely``; ``components/cc.py``). The CC system
(``systems/cc.py``) feeds them ACKs and timer events in time order."""
