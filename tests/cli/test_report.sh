#!/usr/bin/env bash
# `attnlab report` on the committed tests/data/compare_results.json (tests/data/compare_fixture.toml:
# a 3-variant × 2-seed tiny grid with analyze, a length sweep and the passkey and needle tasks:
# RoPE, XSA+GOAT, DAR, with two [primary] comparisons): the page is self-contained and has every figure; when Debian's
# chromium is installed (scripts/install_deps.sh test), it is loaded headless: no console errors,
# every figure element in the rendered DOM, and a screenshot (kept with ATTNLAB_KEEP_SCREENSHOT=F).
# Usage: test_report.sh ATTNLAB_BINARY SOURCE_DIR
source "$(dirname "$0")/lib.sh"

H="$WORK/report.html"
"$BIN" report "$SRC/tests/data/compare_results.json" --out "$H" >"$WORK/report.log" 2>&1
check "attnlab report renders the committed results" '[ $? = 0 ] && [ -s "$H" ]'
check "no script, stylesheet link or external reference" '! grep -qiE "<script|<link |src=\"https?:|href=\"https?:|url\(" "$H"'
figs=(fig-val-loss fig-train-loss fig-lengths fig-task-passkey fig-task-needle fig-similarity fig-goat fig-depth results-table primary-table)
for id in "${figs[@]}"; do check "page has #$id" 'grep -q "id=\"$id\"" "$H"'; done
check "one seed band per variant in the loss figures" '[ "$(grep -c "class=\"band\"" "$H")" -ge 6 ]'
check "the table has the paired test, computed from the runs" 'grep -q "p (paired)" "$H" && grep -qE "<td class=\"n\">[+-][0-9.]+ \(2\)</td>" "$H"'
check "table rows for every variant" 'grep -q ">rope<\|> rope<" "$H" && grep -q "xsa+goat" "$H" && grep -q "dar" "$H"'

printf '{"schema":"attnlab.compare","version":1,"grid":{},"runs":[{}]}' >"$WORK/broken.json"
"$BIN" report "$WORK/broken.json" --out "$WORK/broken.html" >"$WORK/broken.log" 2>&1
check "a document with malformed runs is refused, naming the file" '[ $? = 1 ] && grep -q "results file .*broken.json" "$WORK/broken.log" && [ ! -e "$WORK/broken.html" ]'

printf '{"schema":"other"}' >"$WORK/bad.json"
"$BIN" report "$WORK/bad.json" --out "$WORK/bad.html" >"$WORK/bad.log" 2>&1
check "a foreign document is refused" '[ $? = 1 ] && grep -q "schema" "$WORK/bad.log"'

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
  echo "SKIP: headless browser check: chromium is not installed (scripts/install_deps.sh test installs Debian's chromium)"
else
  flags=(--headless --disable-gpu --no-sandbox --no-first-run --user-data-dir="$WORK/profile" --window-size=1200,2000)
  timeout 120 "$CHROME" "${flags[@]}" --enable-logging=stderr --v=0 --dump-dom "file://$H" >"$WORK/dom.html" 2>"$WORK/console.log"
  check "chromium loads the page" '[ $? = 0 ] && [ -s "$WORK/dom.html" ]'
  # Page errors are logged as CONSOLE(...) lines, failed loads as net::ERR_*.
  check "no console errors or failed loads" '! grep -E "CONSOLE|Uncaught|net::ERR_" "$WORK/console.log"'
  for id in "${figs[@]}"; do check "rendered DOM has #$id with content" 'grep -q "id=\"$id\"" "$WORK/dom.html"'; done
  check "rendered DOM has the SVG figures" '[ "$(grep -o "<svg" "$WORK/dom.html" | wc -l)" -ge 14 ]'
  shot=${ATTNLAB_KEEP_SCREENSHOT:-$WORK/shot.png}
  timeout 120 "$CHROME" "${flags[@]}" --hide-scrollbars --screenshot="$shot" "file://$H" >/dev/null 2>"$WORK/shot.log"
  check "screenshot written" '[ -s "$shot" ]'
fi

finish
