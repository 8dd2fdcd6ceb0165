#!/bin/sh
# Refreshes docs/liveview-node.png and docs/liveview-cluster.png: runs the
# live view's browser test (root, eBPF, chromium), which saves the pages
# it checked.
#   sudo scripts/ui-screenshots.sh
set -eu
docs=$(cd "$(dirname "$0")/../docs" && pwd)
cd "$(dirname "$0")/../e2e"
SLACKLINE_UI_SCREENSHOTS=$docs go test -count=1 -run 'TestLiveView$' .
ls -l "$docs"/liveview-*.png
