"""`specperf bisect`: which difference between a good and a bad run made the key slower.

A REGRESSION lists what changed in the environment; with a dozen changed variables, flags and
packages, which one did it is the detective work the seed's engineer did by hand. Bisect does it by
measuring: it starts the key's server with subsets of the differences applied to the good setup and
judges each start against the good setup measured on the same node tonight.

- `differences`: the two runs' fingerprints compared, each difference marked as applicable (an
  environment variable, a launch flag) or only listed (a package version, the driver);
- `search`: the order of starts, pure (binary search with one start per level; a pair of
  differences that only act together is found as a pair);
- `runner`: real server starts through the plugin's own pool and measurer.
"""
