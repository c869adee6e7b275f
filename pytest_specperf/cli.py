"""The `specperf` command."""

import sys


def main(argv: list[str] | None = None) -> int:
    print("usage: specperf {show,diff,merge} ...", file=sys.stderr)
    return 2
