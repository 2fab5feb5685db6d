#!/usr/bin/env bash
# System packages the test suite needs: an OpenSSH server (jobs over real SSH), rsync (model
# syncs between simulated nodes), Chromium
# (browser tests), docker-compose (offline validation of docker-compose.yml) and the
# PostgreSQL server binaries (a throwaway database when none answers, scripts/test-services.sh).
set -euo pipefail
missing=()
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v docker-compose >/dev/null || missing+=(docker-compose)
command -v ssh-keygen >/dev/null || missing+=(openssh-client)
command -v rsync >/dev/null || missing+=(rsync)  # model syncs between (simulated) nodes
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "Installing system packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "Missing system packages. Run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
