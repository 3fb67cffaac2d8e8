"""Stop 57: 64 windows a call (the default) against 256."""
VARIANTS = {"c64": {}, "c256": {"__kwargs__": {"steps_per_call": 256}}}
