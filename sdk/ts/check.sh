#!/usr/bin/env bash
# `make sdk-check`: generate a TypeScript client from openapi.yaml with the
# npm packages pinned in package-lock.json (nothing installed globally),
# type-check check.ts against it, start a gateway (memory backend) on a free
# loopback port, run check.ts against it, and stop the gateway.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
root=$(cd ../.. && pwd)
GO=${GO:-go}

for tool in node npm; do
	if ! command -v "$tool" >/dev/null; then
		echo "sdk-check: $tool not found; install Node.js 20 or later (Debian: apt-get install nodejs npm)" >&2
		exit 1
	fi
done

npm ci --no-audit --no-fund --loglevel=error
npm run --silent generate
npm run --silent build

tmp=$(mktemp -d)
pid=
cleanup() {
	if [[ -n "$pid" ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd "$root" && "$GO" build -o "$tmp/lockgateway" ./cmd/lockgateway)

# Port 0: the kernel picks a free port, and the gateway logs the one it got.
LOCKGW_ADDR=127.0.0.1:0 LOCKGW_BACKEND=memory LOCKGW_LOG_FORMAT=json \
	"$tmp/lockgateway" >"$tmp/log" 2>&1 &
pid=$!

url=
for _ in $(seq 100); do
	addr=$(sed -n 's/.*"addr":"\([^"]*\)".*"lockgateway listening".*/\1/p' "$tmp/log" | head -n 1)
	if [[ -n "$addr" ]] && node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "http://$addr/healthz"; then
		url=http://$addr
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "sdk-check: the gateway exited:" >&2
		cat "$tmp/log" >&2
		exit 1
	fi
	sleep 0.1
done
if [[ -z "$url" ]]; then
	echo "sdk-check: the gateway did not answer /healthz in 10s:" >&2
	cat "$tmp/log" >&2
	exit 1
fi

LOCKGW_URL=$url node build/check.js
