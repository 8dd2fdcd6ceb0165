#!/bin/sh
# Refreshes the live view's charting library, uPlot (MIT), in
# coordinator/ui/static/vendor/uplot: its minified script, style sheet and
# licence, from the npm registry. The page's CSP allows only its own
# origin, so the files are served from the coordinator's embedded assets.
#   scripts/vendor/uplot.sh [VERSION]
set -eu
version=${1:-1.6.32}
dest=$(cd "$(dirname "$0")/../.." && pwd)/coordinator/ui/static/vendor/uplot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null && tar xzf "uplot-$version.tgz")
mkdir -p "$dest"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$dest/"
echo "$version" >"$dest/VERSION"
echo "uPlot $version vendored in $dest"
