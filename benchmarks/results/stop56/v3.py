VARIANTS = {
    "off": {},
    "long": {"__static__": {"long_runs": True}},
}
