"""`specperf bisect`: which difference between a good and a bad run made the key slower.

A REGRESSION lists what changed in the environment; with a dozen changed variables, flags and
packages, which one did it is the detective work the seed's engineer did by hand. Bisect does it by
measuring: it starts the key's server with subsets of the differences applied to the good setup and
judges each start against the good setup measured on the same node tonight.

- `differences`: the two runs' fingerprints compared, each difference placed where a start sets it
  (an environment variable; a launch flag in `args` or in the simulator's `sim_args`) or only
  listed (a flag written from a config key, a package version, the driver);
- `search`: the order of starts and what an answer may claim, pure (the bad setup reproduced
  first; binary search with one start per level; a pair that only acts together named only when
  each member alone is confidently good; an answer resting on an uncertain start says so);
- `runner`: real server starts through the plugin's own pool and measurer.
"""
