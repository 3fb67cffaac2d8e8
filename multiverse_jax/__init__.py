"""multiverse-jax: packet-level network simulation of LLM-training clusters, many experiments at once.

Time is a 64-bit integer count of picoseconds, so 64-bit integers are switched on for JAX
when the package is imported.
"""

import jax

jax.config.update("jax_enable_x64", True)

__version__ = "0.1.0"
