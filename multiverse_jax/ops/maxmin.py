"""Max-min fair flow rates by progressive filling (water-filling), strict priority classes
first, optionally weighted.

Within one priority class, every unfrozen flow's rate grows in proportion to its weight
until some link is full; the flows crossing a full link freeze at the rate they reached
(that link is their bottleneck), and the others keep growing over the capacity left. The
result is the weighted max-min fair allocation: no flow can gain without taking rate from
a flow whose rate divided by its weight is no larger (Bertsekas & Gallager, Data Networks,
ch. 6). Classes are served strictly in order, as egress ports serve data classes: class 0
shares the full capacities, class 1 what class 0 left, and so on.

How priorities and weights relate to HyGra (§IV, eq. 2-3): HyGra gives each steady flow a
floor, min(its last measured rate, a guaranteed minimum), and splits a link's residual
capacity in proportion to priority weights ``W_pri``. Here the weights play that part
inside each class (a flow of weight 2 gets twice the share of a flow of weight 1 at a
common bottleneck, and the split is repeated over every link, not one), while the class
number is a strict priority, since that is what the packet engine's ports implement.
There is no floor: a caller that has one can subtract it from ``capacity`` first. With
unit weights (what flow mode uses) this is plain max-min fairness per class.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# A link whose fair level is within this relative distance of the round's smallest level
# saturates in the same round: ties that float rounding splits (a third of a capacity,
# summed back) would otherwise cost an extra round and leave a residue of ~1e-16.
TIE_TOLERANCE = 1e-9


def maxmin_rates(flow_links, active, priority, capacity, weights=None):
    """(F,) max-min fair rate of each flow, in the units of ``capacity``.

    Args:
      flow_links: (F, M) int32 the links (egress port ids) each flow crosses, -1 padded.
      active: (F,) bool flows that want a share; inactive flows get rate 0.
      priority: (F,) int32 strict priority class, 0 highest.
      capacity: (P,) float link capacities (bits/s, bytes/ps: any rate unit).
      weights: (F,) float > 0 share weights within a class (None: all 1).

    An active flow that crosses no link gets rate 0. Static shapes, no host sync: usable
    under jit and vmap. At most P rounds per class (each round fills at least one link,
    and every flow on a full link freezes), and a class loop that ends at the lowest
    priority present.
    """
    capacity = jnp.asarray(capacity)
    weights = jnp.ones(active.shape, capacity.dtype) if weights is None else weights.astype(capacity.dtype)
    on_path = flow_links >= 0
    active = active & jnp.any(on_path, axis=1)
    last_class = jnp.max(jnp.where(active, priority, -1))

    def one_class(carry):
        klass, rates, residual = carry
        rates, residual = _fill(flow_links, active & (priority == klass), weights, rates, residual)
        return klass + 1, rates, residual

    init = (jnp.int32(0), jnp.zeros(active.shape, capacity.dtype), capacity)
    _, rates, _ = jax.lax.while_loop(lambda carry: carry[0] <= last_class, one_class, init)
    return rates


def _fill(flow_links, growing, weights, rates, residual):
    """Progressive filling of the flows ``growing`` (F,) over the ``residual`` (P,)
    capacity: returns their rates added to ``rates`` and the capacity left."""
    n_links = residual.shape[0]
    on_path = flow_links >= 0
    links = jnp.where(on_path, flow_links, n_links)  # padding scatters / gathers out of range

    def round_(carry):
        growing, rates, residual, rounds = carry
        # Weight of the growing flows on each link: the link fills at that many units per unit of level.
        load = jnp.zeros(n_links, residual.dtype).at[links].add(
            jnp.where(on_path & growing[:, None], weights[:, None], 0), mode="drop"
        )
        level = jnp.where(load > 0, residual / jnp.where(load > 0, load, 1), jnp.inf)
        step = jnp.min(level)  # every growing flow gains weight x step; the fullest link is then full
        full = (load > 0) & (level <= step * (1 + TIE_TOLERANCE))
        rates = rates + jnp.where(growing, weights * step, 0)
        residual = jnp.where(full, 0, jnp.maximum(residual - load * step, 0))
        blocked = jnp.any(on_path & full.at[links].get(mode="fill", fill_value=False), axis=1)
        return growing & ~blocked, rates, residual, rounds + 1

    # Each round fills a link that no later round of this class touches (all its flows
    # freeze), so P rounds are enough; the bound also stops the loop on NaN capacities.
    def filling(carry):
        return jnp.any(carry[0]) & (carry[3] < n_links)

    _, rates, residual, _ = jax.lax.while_loop(filling, round_, (growing, rates, residual, jnp.int32(0)))
    return rates, residual
