"""The learned queue restorer (HyGra §IV-C, Alg. 2): features, dataset, model, training.

``hybrid.restore=transformer`` evaluates the shipped checkpoint (``data/restorer.msgpack``)
inside the jitted step at every re-entry (``ops/restore.py``).
"""
