#!/usr/bin/env bash
# Installs (from Debian's packages, when absent) and starts the services the fleet and
# its tests need: Redis and PostgreSQL on loopback, and the trace receiver (Jaeger,
# scripts/jaeger.sh, built once into a cache: AETHERIUM_JAEGER below). Idempotent:
# safe to run again.
set -euo pipefail

PGVER=""
need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then need_apt+=(postgresql); fi
# busybox-static builds the local sandbox and GPU stand-in images (no registry here).
dpkg -s busybox-static >/dev/null 2>&1 || need_apt+=(busybox-static)
# The observability tests run a real Prometheus (and promtool) and headless Chromium.
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# web_search's test runs Debian's SearXNG-family server (searx) in a network namespace.
command -v searx-run >/dev/null 2>&1 || need_apt+=(searx)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# scripts/jaeger.sh polls Jaeger's query API and takes a lock for its build.
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v flock >/dev/null 2>&1 || need_apt+=(util-linux)
# The sandbox egress firewall rules (egressproxy, docs/sandboxproxy.md).
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
# Quota workspaces are ext4 images (wsquota, docs/quota.md).
[ -x /sbin/mkfs.ext4 ] || [ -x /usr/sbin/mkfs.ext4 ] || command -v mkfs.ext4 >/dev/null 2>&1 || need_apt+=(e2fsprogs)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "services: installing ${need_apt[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# Redis (AOF on so a restart keeps data).
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /var/lib/aetherium-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --appendonly yes \
    --dir /var/lib/aetherium-redis --save "" >/dev/null
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null || { echo "services: redis did not start" >&2; exit 1; }

# PostgreSQL: Debian's cluster, trusting loopback so the default URL
# postgres://postgres@127.0.0.1:5432/aetherium works without a password.
PGVER=$(ls /usr/lib/postgresql | sort -V | tail -n1)
if [ ! -d "/etc/postgresql/$PGVER/main" ]; then
  pg_createcluster "$PGVER" main >/dev/null
fi
HBA="/etc/postgresql/$PGVER/main/pg_hba.conf"
if ! grep -q '^# aetherium-trust' "$HBA"; then
  tmp=$(mktemp)
  { echo "# aetherium-trust: loopback trusted for the local fleet and its tests";
    echo "host all all 127.0.0.1/32 trust";
    echo "host all all ::1/128 trust";
    cat "$HBA"; } > "$tmp"
  cat "$tmp" > "$HBA"; rm -f "$tmp"
  conf="/etc/postgresql/$PGVER/main/postgresql.conf"
  grep -q '^max_connections = 300' "$conf" || echo "max_connections = 300" >> "$conf"
  pg_ctlcluster --skip-systemctl-redirect "$PGVER" main restart >/dev/null 2>&1 || true
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
  pg_ctlcluster --skip-systemctl-redirect "$PGVER" main start
fi
for _ in $(seq 1 100); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 0.1; done
pg_isready -h 127.0.0.1 -p 5432 -q || { echo "services: postgresql did not start" >&2; exit 1; }
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='aetherium'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE aetherium"
echo "services: redis and postgresql $PGVER are up on 127.0.0.1"
# Jaeger (scripts/jaeger.sh): AETHERIUM_JAEGER=on builds it when it is not built yet (a
# cold build is minutes of CPU) and starts it; auto, the default, starts it when it is
# built and otherwise says how to build it (on under CI=true); off leaves it. The tests
# that need it fail under CI=true without it (and skip elsewhere), so a Jaeger that
# cannot start is reported here, not fatal to the other services.
jaeger_mode="${AETHERIUM_JAEGER:-auto}"
if [ "$jaeger_mode" = auto ] && [ -n "${CI:-}" ]; then jaeger_mode=on; fi
if [ "$jaeger_mode" = auto ] && [ ! -x "$(bash "$(dirname "$0")/jaeger.sh" path)" ]; then
  echo "services: jaeger is not built: scripts/jaeger.sh build (or AETHERIUM_JAEGER=on make services); its tests skip meanwhile"
elif [ "$jaeger_mode" != off ]; then
  bash "$(dirname "$0")/jaeger.sh" start || echo "services: jaeger did not start (scripts/jaeger.sh start)" >&2
fi
