"""Stop 57: forward's size switch as one-trip loops (in place) and arrived_by's search carry
packed in one (3, Q) array, against the versions before (the old module files beside this)."""
import importlib.util
from pathlib import Path
from multiverse_jax.ops import queues
from multiverse_jax.systems import forward

HERE = Path(__file__).parent


def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


old_forward, old_queues = load("forward_old"), load("queues_old")
OLD_SEARCH = {(queues, "arrived_by"): old_queues.arrived_by}
OLD_FORWARD = {(forward, "forwarded"): old_forward.forwarded}
VARIANTS = {
    "new": {},
    "old": {"__patch__": {**OLD_SEARCH, **OLD_FORWARD}},
    "old_search": {"__patch__": OLD_SEARCH},
    "old_forward": {"__patch__": OLD_FORWARD},
}
