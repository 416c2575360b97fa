#!/bin/sh
# The Debian packages the test suite drives for real (it never mocks them). Installed when missing
# and this runs as root with apt-get (a fresh CI machine); elsewhere, say which ones to install.
# Each line: the command the tests run, then the Debian package that provides it.
set -u
missing=""
while read -r command package; do
  command -v "$command" >/dev/null 2>&1 || missing="$missing $package"
done <<'PACKAGES'
git git
tmux tmux
chromium chromium
nginx nginx-light
fcgiwrap fcgiwrap
dot graphviz
PACKAGES
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing the Debian packages the tests use:$missing" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "the tests need these Debian packages:$missing (install them, e.g. sudo apt-get install$missing)" >&2
  exit 1
fi
