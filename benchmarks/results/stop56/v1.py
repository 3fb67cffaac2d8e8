import importlib.util
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
from multiverse_jax.systems import forward, receive, cc
old_forward = load("fo", "/tmp/ab/forward_old.py").set_forward_plan
old_receive = load("ro", "/tmp/ab/receive_old.py").receive
old_cc = load("co", "/tmp/ab/cc_old.py").congestion_control
VARIANTS = {
    "old": {"forward": old_forward, "receive": old_receive, "cc": old_cc},
    "cc": {"forward": old_forward, "receive": old_receive},
    "cc+recv": {"forward": old_forward},
    "all": {},
}
