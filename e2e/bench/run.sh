#!/usr/bin/env bash
# e2e/bench/run.sh: moat gateway throughput against direct, measured in one run.
#
# An upstream (e2e/bench/upstream) runs in a fresh network namespace on
# 198.18.X.2, reached over a veth from 198.18.X.1. Each measurement is made
# twice, direct and through the gateway, and the ratio through/direct printed:
#   - wrk, 1 KiB GETs, plain-HTTP forwarding (absolute-form requests, proxy.lua)
#   - curl, 100 MiB download, through a CONNECT tunnel (curl -p -x)
# Needs root, iproute2, flock, wrk, curl and go. See README.md.
set -euo pipefail

# --- knobs ------------------------------------------------------------------
# The gateway command line, evaluated at run time: $MOAT (the built binary),
# $PROXY_PORT and $SETTINGS (the temporary settings file) are filled in.
GATEWAY_CMD=${GATEWAY_CMD:-'"$MOAT" gateway --no-auth --listen "127.0.0.1:$PROXY_PORT" --settings "$SETTINGS"'}
PROXY_PORT=${PROXY_PORT:-18128}
WRK_THREADS=${WRK_THREADS:-2}
WRK_CONNS=${WRK_CONNS:-64}
WRK_DURATION=${WRK_DURATION:-10s}
SMALL_BYTES=${SMALL_BYTES:-1024}
BIG_BYTES=${BIG_BYTES:-104857600} # 100 MiB
CURL_RUNS=${CURL_RUNS:-5}         # median of N for each download
MOAT_BIN=${MOAT_BIN:-}            # a prebuilt moat binary; empty: build ./cmd/moat

# --- setup ------------------------------------------------------------------
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/../.." && pwd)
# Only this script decides where traffic goes.
unset http_proxy https_proxy all_proxy no_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY NO_PROXY

die() { echo "run.sh: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (ip netns)"
for tool in ip flock wrk curl go awk; do
	command -v "$tool" >/dev/null || die "$tool is not installed"
done

WORK=$(mktemp -d /tmp/moat-bench.XXXXXX)
NS=""
HOSTLINK=""
UPSTREAM_PID=""
GATEWAY_PID=""
cleanup() {
	local rc=$?
	set +e # tear everything down even if one step fails
	[[ -n $GATEWAY_PID ]] && kill "$GATEWAY_PID" 2>/dev/null && wait "$GATEWAY_PID" 2>/dev/null
	[[ -n $UPSTREAM_PID ]] && kill "$UPSTREAM_PID" 2>/dev/null && wait "$UPSTREAM_PID" 2>/dev/null
	# Delete the host end first: it frees the /24 at once, while a namespace
	# is torn down asynchronously.
	[[ -n $HOSTLINK ]] && ip link del "$HOSTLINK" 2>/dev/null
	[[ -n $NS ]] && ip netns del "$NS" 2>/dev/null
	rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== build"
if [[ -n $MOAT_BIN ]]; then
	MOAT=$MOAT_BIN
else
	[[ -d $REPO/cmd/moat ]] || die "$REPO/cmd/moat does not exist yet: nothing to benchmark"
	(cd "$REPO" && go build -o "$WORK/moat" ./cmd/moat) || die "go build ./cmd/moat failed"
	MOAT=$WORK/moat
fi
(cd "$REPO" && go build -o "$WORK/upstream" ./e2e/bench/upstream) || die "go build ./e2e/bench/upstream failed"

# Pick 198.18.X.0/24 under the same lock files as e2e/testnet, so a
# concurrent `go test ./e2e/...` never gets the same subnet. The lock fd
# stays open until this script exits.
mkdir -p /run/moat-testnet
X=""
for x in $(seq 200 254) $(seq 1 199); do
	if ip -4 -o addr show | grep -q " 198\.18\.$x\."; then
		continue # already on a host interface
	fi
	exec {LOCKFD}>"/run/moat-testnet/$x.lock"
	if flock -n "$LOCKFD"; then
		X=$x
		break
	fi
	exec {LOCKFD}>&-
done
[[ -n $X ]] || die "no free 198.18.X.0/24"
HOST_IP=198.18.$X.1
UP=198.18.$X.2

echo "== netns moat-bench-$$ on 198.18.$X.0/24"
NS=moat-bench-$$
ip netns add "$NS"
HOSTLINK=moatbn$X
ip link add "$HOSTLINK" type veth peer name eth0 netns "$NS"
ip addr add "$HOST_IP/24" dev "$HOSTLINK"
ip link set "$HOSTLINK" up
ip -n "$NS" addr add "$UP/24" dev eth0
ip -n "$NS" link set eth0 up
ip -n "$NS" link set lo up

ip netns exec "$NS" "$WORK/upstream" -listen "$UP:80" >"$WORK/upstream.log" 2>&1 &
UPSTREAM_PID=$!
ready=""
for _ in $(seq 1 100); do # at most ~10 s
	if curl -sf --noproxy '*' -o /dev/null "http://$UP/bytes/1"; then ready=1; break; fi
	kill -0 "$UPSTREAM_PID" 2>/dev/null || break
	sleep 0.1
done
[[ -n $ready ]] || { cat "$WORK/upstream.log" >&2; die "upstream did not start"; }

SETTINGS=$WORK/settings.yaml
cat >"$SETTINGS" <<YAML
network:
  allowedDomains: ["$UP"]
YAML

echo "== gateway: $(eval "echo $GATEWAY_CMD")"
(
	export MOAT_SETTINGS=$SETTINGS
	eval "exec $GATEWAY_CMD"
) >"$WORK/gateway.log" 2>&1 &
GATEWAY_PID=$!
ready=""
for _ in $(seq 1 100); do # at most ~10 s
	code=$(curl -s -o /dev/null -w '%{http_code}' -x "http://127.0.0.1:$PROXY_PORT" "http://$UP/bytes/1" || true)
	if [[ $code == 200 ]]; then ready=1; break; fi
	kill -0 "$GATEWAY_PID" 2>/dev/null || break
	sleep 0.1
done
[[ -n $ready ]] || { cat "$WORK/gateway.log" >&2; die "gateway did not forward http://$UP/bytes/1 (last status ${code:-none})"; }

# --- measurements -----------------------------------------------------------
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }'; }

# wrk_rps LABEL ARGS... prints requests/s; fails on errors or non-2xx, which
# would otherwise be fast and flatter the gateway.
wrk_rps() {
	local label=$1; shift
	local out
	out=$(wrk -t "$WRK_THREADS" -c "$WRK_CONNS" -d "$WRK_DURATION" "$@")
	echo "$out" | sed "s/^/  [$label] /" >&2
	if grep -qE 'Non-2xx or 3xx responses|Socket errors' <<<"$out"; then
		die "wrk $label: errors or non-2xx responses (see above)"
	fi
	awk '/^Requests\/sec:/ { print $2 }' <<<"$out"
}

# curl_once LABEL ARGS... prints one download speed (bytes/s), checking
# status and size.
curl_once() {
	local label=$1; shift
	local out code size speed
	out=$(curl -s -o /dev/null -w '%{http_code} %{size_download} %{speed_download}' "$@" || true)
	read -r code size speed <<<"$out"
	[[ $code == 200 && $size == "$BIG_BYTES" ]] || die "curl $label: status $code, $size bytes (want 200, $BIG_BYTES)"
	echo "  [$label] $(awk -v s="$speed" 'BEGIN { printf "%.1f MiB/s", s / 1048576 }')" >&2
	echo "$speed"
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "== wrk: $SMALL_BYTES-byte GETs, -t $WRK_THREADS -c $WRK_CONNS -d $WRK_DURATION"
direct_rps=$(wrk_rps direct "http://$UP/bytes/$SMALL_BYTES")
through_rps=$(TARGET_URL="http://$UP/bytes/$SMALL_BYTES" wrk_rps gateway -s "$BENCH/proxy.lua" "http://127.0.0.1:$PROXY_PORT/")

echo "== curl: $BIG_BYTES-byte download, median of $CURL_RUNS, direct and tunnel interleaved"
d_all=() t_all=()
for _ in $(seq 1 "$CURL_RUNS"); do
	d_all+=("$(curl_once direct --noproxy '*' "http://$UP/bytes/$BIG_BYTES")")
	t_all+=("$(curl_once connect -p -x "http://127.0.0.1:$PROXY_PORT" "http://$UP/bytes/$BIG_BYTES")")
done
direct_bps=$(printf '%s\n' "${d_all[@]}" | median)
through_bps=$(printf '%s\n' "${t_all[@]}" | median)

echo
echo "== results (through/direct, same run)"
printf '%-28s %14s %14s %8s\n' "" direct gateway ratio
printf '%-28s %14.0f %14.0f %8s\n' "1 KiB GET, requests/s" "$direct_rps" "$through_rps" "$(ratio "$through_rps" "$direct_rps")"
printf '%-28s %14.1f %14.1f %8s\n' "100 MiB CONNECT, MiB/s" \
	"$(awk -v s="$direct_bps" 'BEGIN { print s / 1048576 }')" \
	"$(awk -v s="$through_bps" 'BEGIN { print s / 1048576 }')" \
	"$(ratio "$through_bps" "$direct_bps")"

# --- sandbox (moat run) -------------------------------------------------------
# Whole-process start-up of `moat run -- true` against `bash -c true` (and
# srt, when `srt` is on PATH: install it outside CI with
# `npm i -g @anthropic-ai/sandbox-runtime@0.0.83` plus bubblewrap, socat and
# ripgrep from apt), then a download from inside the sandbox against direct.
STARTUP_RUNS=${STARTUP_RUNS:-31}
if [[ ${SANDBOX:-1} == 1 ]]; then
	PROJ=$WORK/project
	mkdir -p "$PROJ"
	# time_ms CMD... prints the median wall time in ms of STARTUP_RUNS runs.
	# No subshell around the command: its fork would be counted too.
	time_ms() {
		local t0 t1 i all=()
		pushd "$PROJ" >/dev/null
		for ((i = 0; i < STARTUP_RUNS; i++)); do
			t0=$EPOCHREALTIME
			"$@" >/dev/null 2>&1 || die "$* failed"
			t1=$EPOCHREALTIME
			all+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) * 1000 }')")
		done
		popd >/dev/null
		printf '%s\n' "${all[@]}" | median | awk '{ printf "%.2f", $1 }'
	}
	echo "== start-up, median of $STARTUP_RUNS"
	bash_ms=$(time_ms bash -c true)
	moat_ms=$(time_ms "$MOAT" run --settings "$SETTINGS" -- true)
	srt_ms=""
	if command -v srt >/dev/null; then srt_ms=$(time_ms srt -c true); fi

	echo "== 100 MiB download inside moat run, median of $CURL_RUNS"
	d_all=() p_all=() c_all=()
	for _ in $(seq 1 "$CURL_RUNS"); do
		d_all+=("$(curl_once direct --noproxy '*' "http://$UP/bytes/$BIG_BYTES")")
		p_all+=("$(cd "$PROJ" && "$MOAT" run --settings "$SETTINGS" -- curl -s -o /dev/null -w '%{speed_download}' "http://$UP/bytes/$BIG_BYTES")")
		c_all+=("$(cd "$PROJ" && "$MOAT" run --settings "$SETTINGS" -- curl -s -p -o /dev/null -w '%{speed_download}' "http://$UP/bytes/$BIG_BYTES")")
	done
	sd=$(printf '%s\n' "${d_all[@]}" | median)
	sp=$(printf '%s\n' "${p_all[@]}" | median)
	sc=$(printf '%s\n' "${c_all[@]}" | median)
	echo
	echo "== sandbox results (same run)"
	printf '%-40s %10s ms\n' "bash -c true" "$bash_ms"
	printf '%-40s %10s ms  (%sx bash)\n' "moat run -- true" "$moat_ms" "$(ratio "$moat_ms" "$bash_ms")"
	if [[ -n $srt_ms ]]; then
		printf '%-40s %10s ms  (moat is %sx faster)\n' "srt -c true" "$srt_ms" "$(ratio "$srt_ms" "$moat_ms")"
	else
		echo "srt -c true                              (srt not installed: skipped)"
	fi
	printf '%-40s %10s\n' "download in sandbox, plain proxy / direct" "$(ratio "$sp" "$sd")"
	printf '%-40s %10s\n' "download in sandbox, CONNECT / direct" "$(ratio "$sc" "$sd")"
fi
