# Sourced by ../test.sh: makes Debian's chromium available for the live
# page's rendering test (tests/tests/live_page.rs), which takes
# screenshots of the scheduler's statement page and of an EXPLAIN SVG in
# headless chromium.
#
# - chromium on PATH: nothing to install.
# - Missing and run as root (as in CI): Debian's `chromium` package is
#   installed with apt-get (about a minute, once).
# - Either way with chromium there, ICEMERGE_REQUIRE_CHROMIUM=1 is
#   exported: the test then fails rather than skips if it cannot find it.
#   Missing and not root: the test is skipped, saying so.

if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "chromium for tests: installing Debian's chromium package..." >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if command -v chromium >/dev/null 2>&1; then
  export ICEMERGE_REQUIRE_CHROMIUM=1
else
  echo "chromium for tests: not installed and not root: the live page's rendering test is skipped" >&2
fi
