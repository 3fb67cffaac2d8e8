"""Stop 57 (record): compaction into few places by search (the variant, not kept) or by a scatter of
every entry. The search lived in ``segments.compact`` behind SEARCHED_PLACES_PER_ENTRY (1/32;
0 gave the scatter), which main no longer has."""
from multiverse_jax.ops import segments

VARIANTS = {"new": {}, "old": {"__patch__": {(segments, "SEARCHED_PLACES_PER_ENTRY"): 0.0}}}
