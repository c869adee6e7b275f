"""Verdicts: statistics, markers, checks, fingerprints and the baseline store."""
