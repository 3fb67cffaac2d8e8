"""Congestion-control algorithms: each module holds one algorithm's update rules as pure,
vectorised functions of per-flow arrays (``CcState`` in, ``CcState`` out). The CC system
(``systems/cc.py``) feeds them ACKs and timer events in time order."""
