#!/usr/bin/env bash
# Build step of the durable-job-queue territory (run as root inside the layer).
# NixOS gives a unit only coreutils, findutils, grep, sed and systemd on its PATH; the
# arena's units point PATH at this folder of links to exactly those programs, so a start
# file behaves as it would there (a bare `python3` is not found; full paths work).
set -euo pipefail
dir=/usr/lib/aoe-arena/durable-job-queue/unit-path
rm -rf "$dir"
install -d -m 0755 "$dir"
for pkg in coreutils findutils grep sed systemd; do
  dpkg -L "$pkg" | grep -E '^(/usr)?/s?bin/[^/]+$' | while read -r prog; do
    [[ -f "$prog" && -x "$prog" ]] || continue
    [[ -e "$dir/${prog##*/}" ]] || ln -s "$prog" "$dir/${prog##*/}"
  done
done
[[ -x "$dir/cat" && -x "$dir/systemctl" && -x "$dir/grep" && -x "$dir/sed" && -x "$dir/find" ]] || {
  echo "setup.sh: unit PATH folder $dir is incomplete" >&2; exit 1; }
