#!/usr/bin/env bash
# Idempotent Docker set-up for the container tests (Debian bookworm, root):
#   - installs Debian's docker.io (daemon, containerd, runc) and debootstrap (to build the ZooKeeper image);
#   - starts dockerd the safe way unless one already answers: no bridge, no iptables rules, so containers can
#     only use host networking (the tests bind 127.0.0.1 only);
#   - removes containers left by kafkatier test sessions whose process is gone.
# Prints one line per action; exits non-zero with a reason when Docker cannot run here.
#   scripts/docker.sh          set up (and leave dockerd running)
#   scripts/docker.sh stop     stop the dockerd this script started
set -euo pipefail

DATA_ROOT=${KAFKATIER_DOCKER_DATA_ROOT:-/var/lib/kafkatier-docker}
LOG=${KAFKATIER_DOCKER_LOG:-/var/log/kafkatier-dockerd.log}
PIDFILE=/var/run/kafkatier-dockerd.pid
SOCKET=/var/run/docker.sock
DOCKER=/usr/bin/docker   # Debian's client, matching the daemon's API (not whatever is first on PATH)

say() { echo "docker.sh: $*"; }
die() { echo "docker.sh: $*" >&2; exit 1; }

if [ "${1:-}" = stop ]; then
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        kill "$(cat "$PIDFILE")"
        for _ in $(seq 1 100); do kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break; sleep 0.1; done
        rm -f "$PIDFILE"
        say "dockerd stopped"
    else
        say "no dockerd started by this script is running"
    fi
    exit 0
fi

[ "$(id -u)" = 0 ] || die "needs root (installs docker.io and starts dockerd)"

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}") >/dev/null || die "could not install ${missing[*]} with apt-get"
fi

daemon_answers() { "$DOCKER" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if daemon_answers; then
    # A daemon is already up: make sure it is one that cannot give containers a bridge or rewrite iptables.
    pid=$(pgrep -xo dockerd || true)
    if [ -n "$pid" ]; then
        cmdline=$(tr '\0' ' ' < "/proc/$pid/cmdline")
        case "$cmdline" in
            *--bridge=none*--iptables=false*|*--iptables=false*--bridge=none*) ;;
            *) die "a dockerd (pid $pid) is running without --bridge=none --iptables=false: $cmdline; stop it" ;;
        esac
    fi
    say "dockerd already running ($("$DOCKER" version --format '{{.Server.Version}}'))"
else
    mkdir -p "$DATA_ROOT" "$(dirname "$LOG")"
    driver=overlay2
    grep -qw overlay /proc/filesystems || driver=vfs
    say "starting dockerd (storage $driver, data root $DATA_ROOT, log $LOG)"
    setsid nohup dockerd --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
        --storage-driver="$driver" --data-root="$DATA_ROOT" --host="unix://$SOCKET" \
        >>"$LOG" 2>&1 < /dev/null &
    echo $! > "$PIDFILE"
    for _ in $(seq 1 300); do
        daemon_answers && break
        kill -0 "$(cat "$PIDFILE")" 2>/dev/null || break
        sleep 0.1
    done
    daemon_answers || die "dockerd did not start; last lines of $LOG:
$(tail -n 15 "$LOG")"
    say "dockerd running ($("$DOCKER" version --format '{{.Server.Version}}'))"
fi

# Containers of test sessions that died without cleaning up (their pid label names a process that is gone).
for id in $("$DOCKER" ps -aq --filter label=kafkatier.testing=1); do
    owner=$("$DOCKER" inspect --format '{{index .Config.Labels "kafkatier.testing.pid"}}' "$id")
    if [ -z "$owner" ] || ! kill -0 "$owner" 2>/dev/null; then
        "$DOCKER" rm -f -v "$id" >/dev/null && say "removed leftover container $id"
    fi
done
