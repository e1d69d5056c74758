#!/bin/sh
# ensure-chromium.sh: Debian's chromium, which graph's browser test drives (make test), installed when missing.
# CI runs make test as root on a bare Debian 12, where this installs it. Without root it says what to run: under
# CI it fails (a run that skipped the browser test proves less); elsewhere the browser test skips, saying why.
set -eu
test -x /usr/bin/chromium && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "ensure-chromium: /usr/bin/chromium is missing; as root: apt-get install -y --no-install-recommends chromium" >&2
  [ -z "${CI:-}" ] || exit 1
  echo "ensure-chromium: the browser test will skip" >&2
  exit 0
fi
echo "ensure-chromium: installing chromium"
# A bare image has no package lists yet.
DEBIAN_FRONTEND=noninteractive apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
test -x /usr/bin/chromium
