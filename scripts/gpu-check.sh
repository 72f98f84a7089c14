#!/usr/bin/env bash
# gpu-check.sh: the Vulkan backend on a real GPU in one command: correctness
# tests on the device, a random checkpoint at the real Qwen3.5-9B shapes,
# and decode/prefill timings against the device's copy bandwidth, ending
# with a table (also written to $OUT/gpu-check.txt when $OUT is set).
#
# Two steps:
#
#   1. Here, on a machine with Go (the GPU machine has no Go toolchain):
#
#        scripts/gpu-check.sh prepare
#
#      builds govinfer and the test binaries of compute/vulkan and model
#      from a clean export of HEAD (commit first; PREPARE_FROM=tree builds
#      the working tree instead) into bin/gpucheck/ (gzipped, about 7 MB;
#      bin/ is git-ignored) and
#      downloads the Vulkan loader (libvulkan1 .deb) into .gl/ (listed in
#      .git/info/exclude), which the GPU machine lacks.
#
#   2. On the GPU machine, through the device tool's `run`, from the repo
#      root, with both folders carried:
#
#        run(command="bash scripts/gpu-check.sh", carry=[".gl", "bin/gpucheck"], timeout_s=590)
#
#      The script unpacks .gl/*.deb into / and runs ldconfig when no
#      libvulkan.so.1 is installed, points the loader at the NVIDIA driver
#      (VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json)
#      when no driver list is set, then runs everything. Where `go` is on the
#      PATH it builds from source instead of using bin/gpucheck.
#
# On an H200 (16 cores, 64 GiB disk) it is meant to finish in about 5
# minutes: tests ~1 min, writing the ~18 GB checkpoint ~1-2 min, two bench
# runs (each loads the checkpoint) ~2 min.
#
# Environment overrides (defaults in brackets):
#   SHAPE [qwen3.5-9b]   make-random shape (tiny, small, qwen3.5-9b)
#   LAYERS [32]          layers of the random checkpoint (lowered to fit the disk)
#   PROMPTS ["512 8192"] prompt lengths; one bench run (and model load) each
#   GEN [64]             decode steps per bench repeat
#   REPEAT [3]           bench repeats (medians reported) for prompts under 4096
#   REPEAT_LONG [1]      bench repeats for prompts of 4096 tokens and more
#   SCRATCH [/tmp/govinfer-gpu-check]  where the checkpoint and binaries go
#   SKIP_TESTS [0]       1 skips the correctness tests
#   PREBUILT [auto]      1 uses bin/gpucheck even where go is installed
#   BENCH_TIMEOUT [240]  seconds allowed per bench run
#   DEVICE [0]           Vulkan device index for bench (0: best)
#   COMPARE_COOPMAT [1]  where the device has cooperative matrices, one more
#                        bench of the first prompt length with --no-coopmat
#   PROFILE [1]          one more bench of the first prompt length with
#                        --profile: device time by shader, prefill and decode
#   MOE [1]              also a mixture-of-experts checkpoint (MOE_SHAPE, MOE_LAYERS
#                        [qwen3.5-35b-a3b, 4]; ~8 GB), benched at the first prompt
#                        length on the device (routed there, then routed on the
#                        host: --host-moe-routing) and with its experts on the CPU
#                        (--cpu-moe); MOE_MODEL=DIR benches that checkpoint instead
#                        (testdata/models/moe-tiny on lavapipe)
#
# Testing it without a GPU, on lavapipe (about 2 minutes on 2 cores):
#   VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json \
#     SHAPE=tiny LAYERS=4 PROMPTS="16 64" GEN=8 REPEAT=2 scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."

PREBUILT_DIR=bin/gpucheck
NVIDIA_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json

prepare() {
	set -e
	command -v go >/dev/null || { echo "prepare needs the Go toolchain" >&2; exit 1; }
	mkdir -p "$PREBUILT_DIR"
	local dest src
	dest=$(cd "$PREBUILT_DIR" && pwd)
	# Build from a clean export of HEAD, so work in progress in the tree
	# (ours or anyone's) does not end up in the binaries; PREPARE_FROM=tree
	# builds the working tree as it is.
	if [ "${PREPARE_FROM:-head}" = tree ]; then
		src=$PWD
		echo "working tree at $(git rev-parse --short HEAD) plus uncommitted changes" >"$dest/VERSION.tmp"
	else
		src=$(mktemp -d)
		trap "rm -rf '$src'" EXIT
		git archive HEAD | tar -x -C "$src"
		echo "commit $(git rev-parse --short HEAD)" >"$dest/VERSION.tmp"
	fi
	echo "building $(cat "$dest/VERSION.tmp") into $PREBUILT_DIR ..."
	(
		cd "$src"
		go build -ldflags='-s -w' -o "$dest/govinfer" ./cmd/govinfer
		go test -c -ldflags='-s -w' -o "$dest/vulkan.test" ./compute/vulkan/
		go test -c -ldflags='-s -w' -o "$dest/model.test" ./model/
	)
	gzip -9 -f "$dest/govinfer" "$dest/vulkan.test" "$dest/model.test"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(cat "$dest/VERSION.tmp")" >"$dest/VERSION"
	rm -f "$dest/VERSION.tmp"
	if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
		echo "downloading the Vulkan loader into .gl/ ..."
		grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >>.git/info/exclude
		mkdir -p .gl /tmp/amd64/partial
		o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
		apt-get $o update -qq
		(cd .gl && apt-get $o download libvulkan1)
	fi
	ls -la "$PREBUILT_DIR" .gl
	cat "$PREBUILT_DIR/VERSION"
	echo 'now: run(command="bash scripts/gpu-check.sh", carry=[".gl", "bin/gpucheck"], timeout_s=590)'
}

case "${1:-check}" in
prepare)
	prepare
	exit 0
	;;
check) ;;
*)
	echo "usage: scripts/gpu-check.sh [prepare|check]" >&2
	exit 2
	;;
esac

SHAPE=${SHAPE:-qwen3.5-9b}
LAYERS=${LAYERS:-32}
PROMPTS=${PROMPTS:-512 8192}
GEN=${GEN:-64}
REPEAT=${REPEAT:-3}
REPEAT_LONG=${REPEAT_LONG:-1}
SCRATCH=${SCRATCH:-/tmp/govinfer-gpu-check}
SKIP_TESTS=${SKIP_TESTS:-0}
PREBUILT=${PREBUILT:-auto}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-240}
DEVICE=${DEVICE:-0}
COMPARE_COOPMAT=${COMPARE_COOPMAT:-1}
PROFILE=${PROFILE:-1}
MOE=${MOE:-1}
MOE_SHAPE=${MOE_SHAPE:-qwen3.5-35b-a3b}
MOE_LAYERS=${MOE_LAYERS:-4}

REPORT_DIR=${OUT:-$SCRATCH/report}
mkdir -p "$SCRATCH/bin" "$REPORT_DIR" || exit 1
LOG=$REPORT_DIR/gpu-check.log
TABLE=$REPORT_DIR/gpu-check.txt
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

T0=$(date +%s)
say() { echo "[gpu-check +$(($(date +%s) - T0))s] $*"; }
declare -a ROWS=()
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }

# --- Vulkan loader and driver -------------------------------------------
if ! ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1'; then
	if ls .gl/*.deb >/dev/null 2>&1; then
		say "no libvulkan.so.1 installed: unpacking .gl/*.deb"
		for f in .gl/*.deb; do dpkg -x "$f" /; done
		ldconfig
	else
		say "WARNING: no libvulkan.so.1 and no .gl/*.deb carried (run 'scripts/gpu-check.sh prepare' and carry .gl)"
	fi
fi
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -f "$NVIDIA_ICD" ]; then
	export VK_DRIVER_FILES=$NVIDIA_ICD VK_ICD_FILENAMES=$NVIDIA_ICD
	say "using the NVIDIA Vulkan driver $NVIDIA_ICD"
fi
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
fi

# --- binaries ---------------------------------------------------------------
BIN=$SCRATCH/bin
if [ "$PREBUILT" != 1 ] && command -v go >/dev/null; then
	say "building from source with $(go version)"
	if ! go build -o "$BIN/govinfer" ./cmd/govinfer ||
		! go test -c -o "$BIN/vulkan.test" ./compute/vulkan/ ||
		! go test -c -o "$BIN/model.test" ./model/; then
		say "FAIL: build"
		exit 1
	fi
	BUILT="from source, $(git rev-parse --short HEAD 2>/dev/null || echo 'commit unknown')"
else
	for f in govinfer vulkan.test model.test; do
		if [ ! -f "$PREBUILT_DIR/$f.gz" ]; then
			say "FAIL: no go toolchain and no $PREBUILT_DIR/$f.gz; run 'scripts/gpu-check.sh prepare' first and carry $PREBUILT_DIR"
			exit 1
		fi
		gzip -dc "$PREBUILT_DIR/$f.gz" >"$BIN/$f" && chmod +x "$BIN/$f" || exit 1
	done
	BUILT="prebuilt: $(head -n 2 "$PREBUILT_DIR/VERSION" 2>/dev/null | tr '\n' ' ')"
	say "using $BUILT"
fi
row "binaries" "$BUILT"

# --- correctness on the device ------------------------------------------------
# runtest NAME DIR BINARY ARGS...: runs a test binary in its package folder
# (tests read ../testdata) and records PASS or FAIL.
FAILED=0
runtest() {
	local name=$1 dir=$2 bin=$3
	shift 3
	local t=$(date +%s)
	say "test: $name"
	if (cd "$dir" && GOVINFER_REQUIRE_VULKAN=1 "$bin" "$@"); then
		row "$name" "PASS ($(($(date +%s) - t)) s)"
	else
		row "$name" "FAIL ($(($(date +%s) - t)) s; see gpu-check.log)"
		FAILED=1
	fi
}
if [ "$SKIP_TESTS" != 1 ]; then
	runtest "compute/vulkan tests" compute/vulkan "$BIN/vulkan.test" -test.count=1 -test.timeout=10m
	runtest "model Vulkan goldens" model "$BIN/model.test" -test.run 'Vulkan' -test.count=1 -test.timeout=10m
	# Kernel timings (informative): attention and the delta rule (recurrent vs chunked) at 9B head shapes, matvec/matmul
	# on bf16 weights (MatMul/...) and on Q8_0, Q4_K and Q6_K blocks (MatMulQuant/<shape>_<format>/...), decode and
	# 512-token prefill at the 9B MLP's [12288, 4096].
	say "kernel benchmarks"
	(cd compute/vulkan && "$BIN/vulkan.test" -test.run '^$' -test.bench 'Attention|DeltaRule|MatMul(Quant)?/.*/vulkan' -test.benchtime 5x) |
		tee "$SCRATCH/kernels.txt" || true
	while IFS= read -r line; do
		ROWS+=("$line")
	done < <(awk '/^Benchmark/ {
		name = substr($1, 10); sub(/-[0-9]+$/, "", name); rest = ""
		for (i = 5; i < NF; i += 2) rest = rest sprintf(", %s %s", $i, $(i + 1))
		printf "%-56s %.3f ms%s\n", name, $3 / 1e6, rest }' "$SCRATCH/kernels.txt")
else
	row "correctness tests" "skipped (SKIP_TESTS=1)"
fi

# --- random checkpoint ----------------------------------------------------------
MODEL=$SCRATCH/model-$SHAPE-$LAYERS
if [ "$SHAPE" = qwen3.5-9b ]; then
	# ~4.07 GB of embeddings and lm_head, ~0.44 GB per layer; keep 3 GB spare.
	free_mb=$(df -Pm "$SCRATCH" | awk 'NR==2 {print $4}')
	if [ -f "$MODEL/.complete" ]; then
		have=1
	else
		have=0
		fit=$(((free_mb - 3000 - 4070) / 440))
		if [ "$fit" -lt "$LAYERS" ]; then
			if [ "$fit" -lt 4 ]; then
				say "FAIL: only $free_mb MB free under $SCRATCH; a 4-layer 9B checkpoint needs ~5.8 GB"
				exit 1
			fi
			say "WARNING: $free_mb MB free under $SCRATCH: $fit layers instead of $LAYERS"
			LAYERS=$fit
			MODEL=$SCRATCH/model-$SHAPE-$LAYERS
		fi
	fi
fi
if [ -f "$MODEL/.complete" ]; then
	say "reusing $MODEL"
	row "random checkpoint" "$SHAPE, $LAYERS layers, $(du -sh "$MODEL" | cut -f1) (reused)"
else
	rm -rf "$SCRATCH"/model-*
	t=$(date +%s)
	say "writing a random $SHAPE checkpoint with $LAYERS layers to $MODEL"
	"$BIN/govinfer" make-random --shape "$SHAPE" --layers "$LAYERS" --no-tokenizer --out "$MODEL" >"$SCRATCH/make-random.log" 2>&1
	rc=$?
	tr '\r' '\n' <"$SCRATCH/make-random.log" | grep -v '^writing ' || true
	if [ "$rc" != 0 ]; then
		say "FAIL: make-random exited with $rc"
		exit 1
	fi
	touch "$MODEL/.complete"
	row "random checkpoint" "$SHAPE, $LAYERS layers, $(du -sh "$MODEL" | cut -f1) (written in $(($(date +%s) - t)) s)"
fi

# --- timings ------------------------------------------------------------------------
BENCH_FILES=()
for p in $PROMPTS; do
	out=$REPORT_DIR/bench_$p.json
	t=$(date +%s)
	reps=$REPEAT
	if [ "$p" -ge 4096 ]; then reps=$REPEAT_LONG; fi
	say "bench: prompt $p, $GEN decode steps, $reps repeats"
	if timeout "$BENCH_TIMEOUT" "$BIN/govinfer" bench --backend vulkan --device "$DEVICE" --model "$MODEL" \
		--prompt "$p" --gen "$GEN" --repeat "$reps" --json >"$out"; then
		BENCH_FILES+=("$out")
		say "bench prompt $p done in $(($(date +%s) - t)) s"
	else
		row "bench prompt $p" "FAIL or timeout (${BENCH_TIMEOUT}s; see gpu-check.log)"
		rm -f "$out"
		FAILED=1
	fi
done

# The first prompt length again with the prefill products on the portable
# tiled shader, where the device runs them on cooperative matrices, to
# compare the two.
PORTABLE_FILE=
if [ "$COMPARE_COOPMAT" = 1 ] && grep -q 'cooperative matrix (f16' "$LOG"; then
	p=${PROMPTS%% *}
	out=$REPORT_DIR/bench_${p}_portable.json
	say "bench: prompt $p on the portable tiled shader (--no-coopmat)"
	if timeout "$BENCH_TIMEOUT" "$BIN/govinfer" bench --backend vulkan --device "$DEVICE" --model "$MODEL" \
		--prompt "$p" --gen 8 --repeat "$REPEAT" --no-coopmat --json >"$out"; then
		PORTABLE_FILE=$out
	else
		row "bench prompt $p --no-coopmat" "FAIL or timeout (${BENCH_TIMEOUT}s; see gpu-check.log)"
		rm -f "$out"
		FAILED=1
	fi
fi
# Where the device time of a prefill and of a decode step goes, by shader
# (a separate run: the timestamps would slow the timed ones a little).
PROFILE_TXT=
if [ "$PROFILE" = 1 ]; then
	p=${PROMPTS%% *}
	PROFILE_TXT=$REPORT_DIR/profile_$p.txt
	say "bench: prompt $p with --profile"
	if ! timeout "$BENCH_TIMEOUT" "$BIN/govinfer" bench --backend vulkan --device "$DEVICE" --model "$MODEL" \
		--prompt "$p" --gen 16 --repeat 1 --profile >"$PROFILE_TXT"; then
		row "bench prompt $p --profile" "FAIL or timeout (${BENCH_TIMEOUT}s; see gpu-check.log)"
		PROFILE_TXT=
		FAILED=1
	fi
fi
# A mixture of experts: every expert on the device and routed there, then
# routed on the host (--host-moe-routing: a read-back per MoE layer), then
# the experts on the CPU beside it (llama.cpp's --cpu-moe).
MOE_FILES=()
if [ "$MOE" = 1 ]; then
	MOE_GIVEN=${MOE_MODEL:-}
	if [ -n "$MOE_GIVEN" ]; then
		row "MoE checkpoint" "$MOE_MODEL"
	else
		MOE_MODEL=$SCRATCH/moe-$MOE_SHAPE-$MOE_LAYERS
	fi
	# A random one is written once (.complete marks it whole); a given one
	# is used as it is.
	if [ -z "${MOE_GIVEN:-}" ] && [ ! -f "$MOE_MODEL/.complete" ]; then
		rm -rf "$SCRATCH"/moe-*
		t=$(date +%s)
		say "writing a random $MOE_SHAPE checkpoint with $MOE_LAYERS layers to $MOE_MODEL"
		if "$BIN/govinfer" make-random --shape "$MOE_SHAPE" --layers "$MOE_LAYERS" --no-tokenizer --out "$MOE_MODEL" >"$SCRATCH/make-random-moe.log" 2>&1; then
			touch "$MOE_MODEL/.complete"
			row "random MoE checkpoint" "$MOE_SHAPE, $MOE_LAYERS layers, $(du -sh "$MOE_MODEL" | cut -f1) (written in $(($(date +%s) - t)) s)"
		else
			row "random MoE checkpoint" "FAIL (see $SCRATCH/make-random-moe.log)"
			FAILED=1
		fi
	fi
	if [ -f "$MOE_MODEL/config.json" ]; then
		p=${PROMPTS%% *}
		for mode in device host-route cpu-moe; do
			out=$REPORT_DIR/bench_moe_${mode}.json
			extra=()
			[ "$mode" = cpu-moe ] && extra=(--cpu-moe)
			[ "$mode" = host-route ] && extra=(--host-moe-routing)
			say "bench: MoE, prompt $p, experts on the $mode"
			if timeout "$BENCH_TIMEOUT" "$BIN/govinfer" bench --backend vulkan --device "$DEVICE" --model "$MOE_MODEL" \
				--prompt "$p" --gen 32 --repeat "$REPEAT" --batch 8 --json "${extra[@]}" >"$out"; then
				MOE_FILES+=("$out")
			else
				row "bench MoE $mode" "FAIL or timeout (${BENCH_TIMEOUT}s; see gpu-check.log)"
				rm -f "$out"
				FAILED=1
			fi
		done
	fi
fi
DEVICE_LINE=$(grep -m1 -o 'backend: vulkan: .*' "$LOG" | cut -c10- || true)
[ -n "$DEVICE_LINE" ] && row "device" "$DEVICE_LINE"

# --- table --------------------------------------------------------------------------
{
	echo
	echo "== govinfer GPU check: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(($(date +%s) - T0)) s =="
	for r in "${ROWS[@]}"; do echo "$r"; done
	if [ ${#BENCH_FILES[@]} -gt 0 ]; then
		if command -v python3 >/dev/null; then
			PORTABLE_FILE=$PORTABLE_FILE python3 - "${BENCH_FILES[@]}" <<'EOF'
import json, sys
rs = [json.load(open(f)) for f in sys.argv[1:]]
r0 = rs[0]
print(f"{'backend':34} {r0['backend']}")
print(f"{'copy bandwidth':34} {r0['memory_read_gb_per_second']:.1f} GB/s ({r0['memory_baseline']})")
print(f"{'weight bytes per decode token':34} {r0['decode_bytes_per_token'] / 1e9:.3f} GB")
print(f"{'bandwidth limit':34} {r0['memory_read_gb_per_second'] * 1e9 / r0['decode_bytes_per_token']:.1f} decode tokens/s")
if r0.get('decode_dispatches_per_token'):
    print(f"{'recorded per decode step':34} {r0['decode_dispatches_per_token']:.0f} dispatches, "
          f"{r0['decode_barriers_per_token']:.0f} barriers, {r0['decode_submissions_per_token']:.1f} submissions")
print()
print(f"{'prompt':>7} {'prefill tok/s':>14} {'decode tok/s':>13} {'decode GB/s':>12} {'of bandwidth':>13} {'runs':>5}  (decode: {r0['gen_tokens']} steps after the prompt; medians)")
for r in rs:
    print(f"{r['prompt_tokens']:>7} {r['prefill_tokens_per_second']:>14.1f} {r['decode_tokens_per_second']:>13.2f} "
          f"{r['decode_gb_per_second']:>12.1f} {100 * r['decode_bandwidth_fraction']:>12.1f}% {r['repeat']:>5}")
import os
pf = os.environ.get("PORTABLE_FILE")
if pf:
    p = json.load(open(pf))
    c = next((r for r in rs if r['prompt_tokens'] == p['prompt_tokens']), None)
    if c:
        print(f"\nprefill {p['prompt_tokens']} tokens: cooperative matrix {c['prefill_tokens_per_second']:.1f} tok/s, "
              f"portable tiled shader {p['prefill_tokens_per_second']:.1f} tok/s "
              f"({c['prefill_tokens_per_second'] / p['prefill_tokens_per_second']:.2f}x)")
EOF
		else
			cat "${BENCH_FILES[@]}"
		fi
	fi
	if [ ${#MOE_FILES[@]} -gt 0 ] && command -v python3 >/dev/null; then
		python3 - "${MOE_FILES[@]}" <<'EOF'
import json, sys
print(f"\n{'MoE':10} {'prefill tok/s':>14} {'decode tok/s':>13} {'batch 8 tok/s':>14} {'GB/token':>9} {'in MoE':>7} {'projected':>10}")
for f in sys.argv[1:]:
    r = json.load(open(f))
    mode = 'cpu-moe' if 'cpu-moe' in f else ('host-route' if 'host-route' in f else 'device')
    print(f"{mode:10} {r['prefill_tokens_per_second']:>14.1f} {r['decode_tokens_per_second']:>13.2f} "
          f"{r.get('batch_decode_tokens_per_second', 0):>14.1f} {r['decode_bytes_per_token'] / 1e9:>9.3f} "
          f"{100 * r.get('decode_moe_fraction', 0):>6.0f}% {r.get('projected_decode_tokens_per_second', 0):>10.1f}")
EOF
	fi
	if [ -n "$PROFILE_TXT" ]; then
		sed -n '/profile/,$p' "$PROFILE_TXT"
	fi
	if [ "$FAILED" = 0 ]; then echo "result: PASS"; else echo "result: FAIL"; fi
} | tee "$TABLE"
exit "$FAILED"
