"""`specperf tune`: find the best speculative config in a few server starts.

Every server start on a big GPU node costs 15 minutes or more, so trying every speculative setting
(draft steps, tree width, draft tokens, ...) one start each wastes a day. `specperf tune` measures the
reference and a few informative configs, fits the cost model (cycle = fixed + per draft token + per
draft step) and the acceptance model (per-position acceptance from the servers' histograms), predicts
every untried config with an interval, starts the one with the largest expected improvement, and stops
when one config per concurrency level is ahead of every other with the configured confidence.

Modules, one per concept:

- `space`: the `[specperf.tune]` table, validated before any start, and the candidate configs it spans;
- `acceptance`: per-position acceptance fitted to histograms (pure);
- `cost`: the cycle-time fit (pure);
- `observe`: what one measurement tells the models (pure);
- `model`: predictions with intervals, leaders, expected improvement (pure);
- `search`: the loop (initial design, expected improvement, successive halving, stop rule);
- `runner`: starts servers and measures them with the plugin's own pool and measurer;
- `output`: progress lines, the plan, the ranking table, the ready-to-paste block, JSON;
- `plot`: predicted against measured (needs the `plot` extra);
- `command`: the `specperf tune` subcommand.
"""
