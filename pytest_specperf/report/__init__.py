"""Reports: analysis, the cost model, sweeps, terminal/Markdown, JSON and plots."""
