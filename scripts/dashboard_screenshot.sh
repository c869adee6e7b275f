#!/usr/bin/env bash
# The manual's dashboard screenshot (docs/dashboard.md), docs/images/dashboard.png: the example suite's
# committed history (example_suite/.specperf) drawn by `specperf dashboard`, photographed by headless
# Chromium at 1280x900.
#
#   bash scripts/dashboard_screenshot.sh [STORE] [PNG] [PAGE]     (from the repository root)
#
# Needs the package installed (`pip install -e .`, or SPECPERF=.venv/bin/specperf) and Chromium
# (Debian: apt-get install -y chromium). PAGE is suite.html (a panel per key, the default) or index.html.
set -euo pipefail
store=${1:-example_suite/.specperf}
png=${2:-docs/images/dashboard.png}
page=${3:-suite.html}
specperf=${SPECPERF:-specperf}
chromium=$(command -v chromium || command -v chromium-browser) || { echo "Chromium is not installed" >&2; exit 2; }
site=$(mktemp -d)
profile=$(mktemp -d)
trap 'rm -rf "$site" "$profile"' EXIT
"$specperf" dashboard --store "$store" -o "$site"
# the flags a closed network needs: no background connections, a fresh profile
"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --hide-scrollbars --user-data-dir="$profile" --window-size=1280,900 \
    --screenshot="$(realpath -m "$png")" "file://$site/$page" 2>/dev/null
echo "wrote $png"
