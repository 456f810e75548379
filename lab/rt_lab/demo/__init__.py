"""``rt demo``: the whole data path on one machine, narrated for a newcomer."""
