#!/usr/bin/env bash
# `make sdk-check`: with the npm packages pinned in package-lock.json
# (nothing installed globally), lint openapi.yaml with Redocly's recommended
# rules (redocly.yaml), generate a TypeScript client from it, type-check
# check.ts against it, start a gateway (memory backend) on a free loopback
# port, run check.ts against it; then run docs/clients.md's TypeScript example as
# a newcomer would, in a new project, against the same gateway; and stop the
# gateway.
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

# redocly exits 0 on warnings; here a warning fails as an error does.
lint() { REDOCLY_SUPPRESS_UPDATE_NOTICE=true npm run --silent lint -- "$@"; }
if ! lint --format=json 2>/dev/null | node -e '
	let s = "";
	process.stdin.on("data", (d) => (s += d)).on("end", () => {
		const { errors, warnings } = JSON.parse(s).totals;
		process.exit(errors + warnings === 0 ? 0 : 1);
	});'; then
	lint --format=stylish >&2 || true
	echo "sdk-check: openapi.yaml is not lint clean (rules: redocly.yaml, the recommended set)" >&2
	exit 1
fi
echo "ok   openapi.yaml: redocly lint, recommended rules"

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

# docs/clients.md's TypeScript example, exactly as a newcomer runs it. Each block
# after a <!-- sdk-check: NAME --> line in docs/clients.md is taken as it is, with
# only the gateway's address put for http://127.0.0.1:8080.
readme_block() {
	local text
	text=$(awk -v marker="<!-- sdk-check: $1 -->" '
		$0 == marker { state = 1; next }
		state == 1 && /^```/ { state = 2; next }
		state == 1 { exit }
		state == 2 && /^```/ { exit }
		state == 2 { print }
	' "$root/docs/clients.md")
	if [[ -z "$text" ]]; then
		echo "sdk-check: docs/clients.md has no \`\`\` block right after <!-- sdk-check: $1 -->" >&2
		exit 1
	fi
	printf '%s\n' "${text//http:\/\/127.0.0.1:8080/$url}"
}
setup=$(readme_block setup)
tsconfig=$(readme_block tsconfig.json)
index=$(readme_block index.ts)
run=$(readme_block run)
want=$(readme_block output)
hold=$(readme_block hold.ts)
hold_run=$(readme_block hold-run)
hold_want=$(readme_block hold-output)
for name in index hold; do
	if [[ "${!name}" != *"$url"* ]]; then
		echo "sdk-check: docs/clients.md's $name.ts does not name http://127.0.0.1:8080, so it would not reach this gateway" >&2
		exit 1
	fi
done

project=$tmp/readme-project
mkdir -p "$project" "$tmp/bin"
# npm as the page's commands meet it, run as written; pinned-npm only checks
# that each `npm install` names package-lock.json's versions. npx may run only
# what the project installed.
ln -s "$PWD/pinned-npm" "$tmp/bin/npm"
readme_env=(env "PATH=$tmp/bin:$PATH" "REAL_NPM=$(command -v npm)" "PINS=$PWD/package-lock.json" npm_config_yes=false)
cd "$project"
if ! "${readme_env[@]}" bash -euo pipefail -c "$setup" >"$tmp/readme.log" 2>&1; then
	echo "sdk-check: docs/clients.md's TypeScript setup failed:" >&2
	cat "$tmp/readme.log" >&2
	exit 1
fi
printf '%s\n' "$tsconfig" >tsconfig.json
printf '%s\n' "$index" >index.ts
if ! "${readme_env[@]}" bash -euo pipefail -c "$run" >"$tmp/readme.out" 2>"$tmp/readme.log"; then
	echo "sdk-check: docs/clients.md's TypeScript example failed:" >&2
	cat "$tmp/readme.out" "$tmp/readme.log" >&2
	exit 1
fi
# What it printed must be what the page shows, any fence (and for the hold,
# any number of renewals).
matches() {
	node -e '
		const [want, got] = process.argv.slice(1);
		const escaped = want.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
		const pattern = escaped.replace(/fence \d+/g, "fence [1-9]\\d*").replace(/through \d+ renewals/g, "through \\d+ renewals");
		process.exit(new RegExp("^" + pattern + "$").test(got) ? 0 : 1);
	' "$1" "$2"
}
if ! matches "$want" "$(cat "$tmp/readme.out")"; then
	echo "sdk-check: docs/clients.md's TypeScript example printed" >&2
	cat "$tmp/readme.out" >&2
	echo "where docs/clients.md shows (any fence)" >&2
	printf '%s\n' "$want" >&2
	exit 1
fi
echo "ok   docs/clients.md TypeScript example: $(cat "$tmp/readme.out")"

# The hold example, in the same project: a hold through a fetch stream.
printf '%s\n' "$hold" >hold.ts
if ! "${readme_env[@]}" bash -euo pipefail -c "$hold_run" >"$tmp/hold.out" 2>"$tmp/hold.log"; then
	echo "sdk-check: docs/clients.md's TypeScript hold example failed:" >&2
	cat "$tmp/hold.out" "$tmp/hold.log" >&2
	exit 1
fi
if ! matches "$hold_want" "$(cat "$tmp/hold.out")"; then
	echo "sdk-check: docs/clients.md's TypeScript hold example printed" >&2
	cat "$tmp/hold.out" >&2
	echo "where docs/clients.md shows (any fence, any number of renewals)" >&2
	printf '%s\n' "$hold_want" >&2
	exit 1
fi
echo "ok   docs/clients.md TypeScript hold example: $(cat "$tmp/hold.out")"
