"""Stop 57: receive's far NIC gathered from a per-port array computed apart (new) or two
dependent gathers per slot (old: ``receive_old.py`` beside this)."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("receive_old", Path(__file__).parent / "receive_old.py")
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
VARIANTS = {"new": {}, "old": {"receive": old.receive}}
