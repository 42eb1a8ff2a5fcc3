#!/usr/bin/env bash
# netns-exec.sh COMMAND [ARGS...]
#
# Runs COMMAND in a new, empty network namespace whose loopback is up, the
# way the e2e tests run (see test/vm.EnterNetNS): servers it starts on
# 127.0.0.1 and QEMU user networking inside it (the guest reaches that
# loopback as 10.0.2.2) see nothing of the host's network. Needs root.
# Example: hack/netns-exec.sh go test -tags e2e ./test/e2e
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARGS...]" >&2
  exit 2
fi
exec unshare --net -- sh -c 'ip link set lo up && exec "$@"' netns-exec "$@"
