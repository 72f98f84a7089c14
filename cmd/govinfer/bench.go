package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	goio "io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/profile"
	"github.com/govinfer/govinfer/compute/vulkan"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/internal/machine"
	"github.com/govinfer/govinfer/model"
)

// benchResult is what "govinfer bench --json" prints.
type benchResult struct {
	Model   string `json:"model"`
	Backend string `json:"backend"`
	Threads int    `json:"threads"`
	Prompt  int    `json:"prompt_tokens"`
	Gen     int    `json:"gen_tokens"`
	Repeat  int    `json:"repeat"`
	// Medians over the repeats.
	PrefillTokensPerSecond float64 `json:"prefill_tokens_per_second"`
	DecodeTokensPerSecond  float64 `json:"decode_tokens_per_second"`
	DecodeGBPerSecond      float64 `json:"decode_gb_per_second"`
	DecodeBytesPerToken    int64   `json:"decode_bytes_per_token"`
	// MemoryReadGBPerSecond is the bandwidth baseline measured in the same
	// run: the host read loop at the bench's threads (ReadGBPerSecond), or,
	// for backends that measure their device (Vulkan), the device's
	// buffer-copy bandwidth.
	MemoryReadGBPerSecond float64 `json:"memory_read_gb_per_second"`
	// MemoryBaseline says how MemoryReadGBPerSecond was measured: a host
	// read loop, or the device's own copy bandwidth (Vulkan).
	MemoryBaseline string `json:"memory_baseline"`
	// DecodeBandwidthFraction is DecodeGBPerSecond / MemoryReadGBPerSecond.
	DecodeBandwidthFraction float64 `json:"decode_bandwidth_fraction"`
	// With --profile: time by operation, per prefilled prompt and per
	// decoded token (averaged over the repeats): device time on Vulkan,
	// wall time of each (synchronous) operation on the CPU.
	PrefillProfile []profileRow `json:"prefill_profile,omitempty"`
	DecodeProfile  []profileRow `json:"decode_profile,omitempty"`
	// BatchDecodeProfile (--profile with --batch > 1) is the same per step
	// of the batch, all its sequences together.
	BatchDecodeProfile []profileRow `json:"batch_decode_profile,omitempty"`
	// Vulkan: what a decode step records, averaged over the steps.
	DecodeDispatchesPerToken  float64 `json:"decode_dispatches_per_token,omitempty"`
	DecodeBarriersPerToken    float64 `json:"decode_barriers_per_token,omitempty"`
	DecodeSubmissionsPerToken float64 `json:"decode_submissions_per_token,omitempty"`

	// The machine (internal/machine), measured in the same run.
	CPUModel    string   `json:"cpu_model"`
	CPUFeatures []string `json:"cpu_features"`
	// Cache sizes as cpuid reports them (0: unknown), and the CPUs this
	// process may use.
	CPUL1DBytes int `json:"cpu_l1d_bytes"`
	CPUL2Bytes  int `json:"cpu_l2_bytes"`
	CPUL3Bytes  int `json:"cpu_l3_bytes"`
	CPULogical  int `json:"cpu_logical_cpus"`
	// Kernels names the CPU kernel set ("avx2", "avx512", "avx512bf16",
	// with "-vnni" where the packed quantized products run and "-amx"
	// where bf16 matrices run on AMX tiles, "neon", "neondot", "go");
	// empty on other backends.
	Kernels string `json:"kernels,omitempty"`
	// CPU backend: a plain read loop over --mem-mib at 1 thread and at the
	// bench's threads, best of up to 4 passes, and the loop that measured
	// it.
	ReadGBPerSecond1Thread float64 `json:"read_gb_per_second_1_thread,omitempty"`
	ReadGBPerSecond        float64 `json:"read_gb_per_second,omitempty"`
	ReadProbe              string  `json:"read_probe,omitempty"`
	// CPU backend on Linux: the same loop at the bench's threads over a
	// buffer in transparent huge pages, as weights mapped from files that
	// fit in memory are read, and the share of that buffer the kernel did
	// back with them.
	ReadGBPerSecondHugePages float64 `json:"read_gb_per_second_huge_pages,omitempty"`
	ReadHugePageShare        float64 `json:"read_huge_page_share,omitempty"`
	// CPU backend: register-only multiply-add peaks (a multiply-add is two
	// flops), at 1 thread and at the bench's threads; bf16 (VDPBF16PS) only
	// where the CPU has it.
	FMAF32GFLOPS1Thread  float64 `json:"fma_f32_gflops_1_thread,omitempty"`
	FMAF32GFLOPS         float64 `json:"fma_f32_gflops,omitempty"`
	FMAProbe             string  `json:"fma_probe,omitempty"`
	DotBF16GFLOPS1Thread float64 `json:"dot_bf16_gflops_1_thread,omitempty"`
	DotBF16GFLOPS        float64 `json:"dot_bf16_gflops,omitempty"`
	DotInt8GOPS1Thread   float64 `json:"dot_int8_gops_1_thread,omitempty"`
	DotInt8GOPS          float64 `json:"dot_int8_gops,omitempty"`
	// AMXBF16GFLOPS1Thread and AMXBF16GFLOPS are the AMX bf16 tile peaks
	// (TDPBF16PS), where the CPU has AMX and the operating system allows it.
	AMXBF16GFLOPS1Thread float64 `json:"amx_bf16_gflops_1_thread,omitempty"`
	AMXBF16GFLOPS        float64 `json:"amx_bf16_gflops,omitempty"`
	// MachineProbeSeconds is how long the measurements above took.
	MachineProbeSeconds float64 `json:"machine_probe_seconds,omitempty"`
	// PrefillFLOPs is the work of one prompt's prefill (see prefillFLOPs),
	// PrefillGFLOPS the rate the median prefill reached.
	PrefillFLOPs  float64 `json:"prefill_flops"`
	PrefillGFLOPS float64 `json:"prefill_gflops"`
	// CPU backend: PrefillPeak names the peak the prefill kernels can reach
	// ("dot_bf16" with --bf16-inputs on the avx512bf16 kernels, whose
	// products of bf16 weights then run on VDPBF16PS; "amx_bf16" with
	// --amx-tiles on AMX, the tile peak over the three bf16 parts of each
	// input, or one with --bf16-inputs; "dot_int8" for a quantized model;
	// else "fma_f32"), PrefillPeakFraction is PrefillGFLOPS over it at the
	// bench's threads.
	PrefillPeak         string  `json:"prefill_peak,omitempty"`
	PrefillPeakFraction float64 `json:"prefill_peak_fraction,omitempty"`
	// DecodeReadFraction is DecodeGBPerSecond / ReadGBPerSecond (CPU), and
	// DecodeReadFractionHugePages the same over ReadGBPerSecondHugePages.
	DecodeReadFraction          float64 `json:"decode_read_fraction,omitempty"`
	DecodeReadFractionHugePages float64 `json:"decode_read_fraction_huge_pages,omitempty"`
	// Batch is --batch; with more than one, BatchDecodeTokensPerSecond is
	// the median rate of decoding that many sequences together (tokens of
	// all sequences per second) and BatchDecodeSpeedup its ratio to
	// DecodeTokensPerSecond.
	Batch                      int     `json:"batch"`
	BatchDecodeTokensPerSecond float64 `json:"batch_decode_tokens_per_second,omitempty"`
	BatchDecodeSpeedup         float64 `json:"batch_decode_speedup,omitempty"`
	moeResult
	specResult
}

// benchJSONKeys is the --json help: the keys beyond the basic timings.
const benchJSONKeys = "print one JSON object instead of a table. Keys: model, backend, threads, prompt_tokens, gen_tokens, repeat, " +
	"prefill_tokens_per_second, decode_tokens_per_second, decode_gb_per_second, decode_bytes_per_token, " +
	"memory_read_gb_per_second, memory_baseline, decode_bandwidth_fraction, " +
	"cpu_model, cpu_features, cpu_l1d_bytes, cpu_l2_bytes, cpu_l3_bytes, cpu_logical_cpus, kernels, read_gb_per_second_1_thread, read_gb_per_second, read_probe, " +
	"read_gb_per_second_huge_pages, read_huge_page_share (Linux), " +
	"fma_f32_gflops_1_thread, fma_f32_gflops, fma_probe, dot_bf16_gflops_1_thread, dot_bf16_gflops (AVX512_BF16 only), dot_int8_gops_1_thread, dot_int8_gops (VPDPBUSD on AVX512_VNNI, else on ymm with AVX-VNNI, else VPMADDUBSW+VPMADDWD on AVX2), amx_bf16_gflops_1_thread, amx_bf16_gflops (AMX-BF16 only), machine_probe_seconds, " +
	"prefill_flops (per prompt), prefill_gflops, prefill_peak (fma_f32, dot_bf16, amx_bf16 or dot_int8), prefill_peak_fraction, decode_read_fraction, decode_read_fraction_huge_pages, " +
	"batch, batch_decode_tokens_per_second, batch_decode_speedup (--batch > 1), " +
	"prefill_profile, decode_profile, batch_decode_profile (--profile: rows of op, count and ms per prompt, token or batch step), " +
	"decode_dispatches_per_token, decode_barriers_per_token, decode_submissions_per_token (Vulkan), " + moeJSONKeys + specJSONKeys + "; " + imageBenchKeys

// recordStats is a backend that counts what it records (Vulkan).
type recordStats interface{ Stats() vulkan.Stats }

// profileRow is one operation's share of a prefill or a decode step.
type profileRow struct {
	Op    string  `json:"op"`
	Count float64 `json:"count"` // dispatches, transfers or calls per prompt or token
	MS    float64 `json:"ms"`    // milliseconds per prompt or token
}

// opTime is the total count and time of one operation.
type opTime struct {
	Op    string
	Count int
	Time  time.Duration
}

// opProfiler times a backend's operations: take returns what ran since the
// last take and starts afresh.
type opProfiler interface {
	take() []opTime
	// what says what the times are, for the table's title.
	what() string
}

// deviceProfiler is a backend that times its operations (Vulkan with
// Options.Profile).
type deviceProfiler interface {
	Profile() []vulkan.ProfileEntry
	ResetProfile()
}

// vulkanProfiler reads a Vulkan backend's device timestamps.
type vulkanProfiler struct{ p deviceProfiler }

func (v vulkanProfiler) take() []opTime {
	var out []opTime
	for _, e := range v.p.Profile() {
		out = append(out, opTime{e.Op, e.Count, e.Time})
	}
	v.p.ResetProfile()
	return out
}

func (vulkanProfiler) what() string { return "device time" }

// hostProfiler reads the compute/profile wrapper's wall-clock times.
type hostProfiler struct{ p *profile.Backend }

func (h hostProfiler) take() []opTime {
	var out []opTime
	for _, e := range h.p.Profile() {
		out = append(out, opTime{e.Op, e.Count, e.Time})
	}
	h.p.ResetProfile()
	return out
}

func (hostProfiler) what() string { return "wall time" }

// profileRows divides a profile by the number of prompts or tokens it
// covers.
func profileRows(p []opTime, per int) []profileRow {
	rows := make([]profileRow, 0, len(p))
	for _, e := range p {
		rows = append(rows, profileRow{Op: e.Op, Count: float64(e.Count) / float64(per), MS: e.Time.Seconds() * 1e3 / float64(per)})
	}
	return rows
}

// printProfile writes a profile as a table with each operation's share.
func printProfile(w goio.Writer, title, what string, rows []profileRow) {
	var total float64
	for _, r := range rows {
		total += r.MS
	}
	fmt.Fprintf(w, "\n%s: %.3f ms of %s\n", title, total, what)
	fmt.Fprintf(w, "  %-20s %10s %10s %7s\n", "op", "count", "ms", "share")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-20s %10.1f %10.3f %6.1f%%\n", r.Op, r.Count, r.MS, 100*r.MS/max(total, 1e-12))
	}
}

// runBench implements "govinfer bench": prefill and decode speed, and
// what the machine can do, measured in the same run.
func runBench(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "bench", "bench --model DIR [--prompt N] [--gen N] [--batch N] [--threads N] [--repeat N] [--backend cpu|vulkan] [--bf16-inputs] [--amx-tiles] [--fma-tiles] [--profile] [--quantize q8_0|q4_k_m|q5_k_m] [--speculative-config JSON] [--json]\n\n"+
		"With --speculative-config it also decodes one request through the engine with and without\n"+
		"speculation (greedy, --gen tokens, --repeat times) and reports both rates and the drafts,\n"+
		"the measured costs of a verify step and of a draft step, the speedup they predict, and the\n"+
		"speedup they project for a real Qwen3.5-9B in the run's weight formats (draft steps reading\n"+
		"16 % of its decode bytes in BF16) at 80 % acceptance; --draft-acceptance P sets the\n"+
		"acceptance (random weights accept nothing). The engine backs off as when serving: a\n"+
		fmt.Sprintf("window of %d rounds that commits fewer tokens than it costs pauses speculation, which at a\n", engine.BackoffWindow)+
		"set acceptance turns on a window's luck; add \"backoff\": false to the config to time the\n"+
		"rounds alone, as the predicted speedup assumes.")
	dir := fs.String("model", "", "checkpoint `DIR`, or a GGUF file")
	prompt := fs.Int("prompt", 512, "prompt tokens to prefill")
	gen := fs.Int("gen", 128, "tokens to decode after the prompt")
	batch := fs.Int("batch", 1, "also decode `N` sequences together (each after prefilling its own prompt) and report the total tokens/s and the speedup over one sequence")
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	cpuMoE := cpuMoEFlags(fs.FlagSet)
	hostRoute := fs.Bool("host-moe-routing", false, hostRoutingUsage)
	device := fs.Int("device", 0, "Vulkan device: 0 picks the best (discrete GPU first), N the Nth of the list")
	noCoopmat := fs.Bool("no-coopmat", false, "Vulkan: run prefill products on the portable tiled shader even where the device has VK_KHR_cooperative_matrix")
	bf16In := bf16InputsFlag(fs.FlagSet)
	amxTiles := amxTilesFlag(fs.FlagSet)
	fmaTiles := fmaTilesFlag(fs.FlagSet)
	kernelSet := cpuKernelsFlag(fs.FlagSet)
	repeat := fs.Int("repeat", 5, "timed runs, after one untimed warm-up (the prompt and one decoded token), which pages the weights in and touches the activations' memory; medians are reported")
	be := fs.String("backend", "cpu", "compute backend: "+backendNames)
	asJSON := fs.Bool("json", false, benchJSONKeys)
	profileOps := fs.Bool("profile", false, "time every operation and print where prefill and decode spend it, matrix products per weight (Vulkan: device timestamps; CPU: wall time of each operation)")
	quantize := quantizeFlag(fs.FlagSet)
	memMiB := fs.Int("mem-mib", 0, "size of the memory-read baseline in MiB (0: four times all the L3 caches, 512 to 2048 MiB)")
	agent := fs.Bool("agent-replay", false, "replay a scripted 10-turn agent conversation (2k-token system prompt with tools, reasoning, tool calls and results) through the engine with the prefix cache and without, and report per turn the prompt and prefilled tokens and the time to first token; --gen is the tokens generated per turn (needs a checkpoint with a tokenizer and chat template)")
	turns := fs.Int("turns", 10, "--agent-replay: turns to replay")
	offTurns := fs.String("no-cache-turns", "", "--agent-replay: comma-separated turns also run without the prefix cache (default all; those are full prefills)")
	restart := fs.Bool("restart", false, "--agent-replay: with the prefix cache's disk tier, restart the model between the turns (each turn opens it on --prefix-cache-dir, closing writes its states), and report per turn the time to first token against the memory tier and a cold prefill, and the bytes written and read")
	sessions := fs.Int("sessions", 0, "--agent-replay: run `N` sessions of the conversation taking turns, over a state memory holding about one (or --state-memory), with the disk tier and without")
	benchDir := fs.String("prefix-cache-dir", "", "--restart, --sessions: the disk tier's directory (default: a temporary one)")
	benchMem := sizeFlag(fs.FlagSet, "state-memory", int64(0), "--sessions: the state memory (default: about one session's state)")
	benchHost := sizeFlag(fs.FlagSet, "prefix-cache-host", int64(0), "--sessions with --backend vulkan: host memory between the device's state memory and the disk tier (default: none), whose hits and bytes each turn reports")
	specConfig := fs.String("speculative-config", "", specConfigHelp)
	acceptance := fs.Float64("draft-acceptance", -1, "with --speculative-config, for the benchmark only: replace each draft by the true next token (from a plain greedy run of the same request beforehand) with probability `P` (0 to 1), by another token otherwise, to time speculation at the acceptance real weights give")
	kvType := fs.String("kv-cache-dtype", "f32", "--agent-replay: KV cache element type (f32, bf16, f16)")
	grammarFile := fs.String("grammar", "", "`FILE`: a GBNF grammar (Lark when it ends in .lark); "+benchGrammarHelp)
	schemaFile := fs.String("json-schema", "", "`FILE`: a JSON schema, as --grammar")
	regexArg := fs.String("regex", "", "`RE`: a regular expression, as --grammar")
	imageTokens := fs.Int("image-tokens", 0, "instead of the text benchmark: encode one random image of `N` merged tokens with the checkpoint's vision tower (encoder only; 1024 is a 1024x1024 image at Qwen3.5's 16-pixel patches), and prefill a prompt holding it against a text prompt of the same length (encoding --repeat times, each followed by two prefills of each prompt, in turns)")
	loraDir := fs.String("lora", "", "instead of the text benchmark: measure the LoRA adapter in `DIR` (PEFT's layout; make-random --lora-for makes one) against the base in the same run: prefill and decode with it and without, --batch sequences (8 if 1) over 4 adapters against over one, decoding with it merged into the weights against the base, and its load time")
	benchMergeFormat := mergeFormatFlag(fs.FlagSet)
	noMerged := fs.Bool("lora-no-merged", false, "--lora: skip the merged measurement (which loads the model a second time)")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(io.err, "govinfer bench: "+format+"\n", a...)
		return code
	}
	// report ends a run with its result: as JSON with --json, else as
	// printText writes it.
	report := func(res any, printText func()) int {
		if *asJSON {
			if err := printIndentedJSON(io.out, res); err != nil {
				return fail(exitError, "%v", err)
			}
			return exitOK
		}
		printText()
		return exitOK
	}
	switch {
	case *dir == "":
		return fail(exitUsage, "--model is required")
	case *prompt <= 0 || *gen <= 0 || *repeat <= 0 || *batch <= 0:
		return fail(exitUsage, "--prompt, --gen, --batch and --repeat must be positive")
	case checkQuantize(*quantize) != nil:
		return fail(exitUsage, "%v", checkQuantize(*quantize))
	case *memMiB < 0:
		return fail(exitUsage, "--mem-mib must not be negative")
	case *imageTokens < 0:
		return fail(exitUsage, "--image-tokens must not be negative")
	}
	ck, err := resolveModel(io, "--model", *dir, false)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	*dir = ck.Path
	spec, err := parseSpeculativeConfig(*specConfig, true)
	if err != nil {
		return fail(exitUsage, "--speculative-config: %v", err)
	}
	if spec.Method != "" && *agent {
		return fail(exitUsage, "--speculative-config does not apply to --agent-replay")
	}
	if *acceptance != -1 && (spec.Method == "" || *acceptance < 0 || *acceptance > 1 || *acceptance != *acceptance) {
		return fail(exitUsage, "--draft-acceptance must be from 0 to 1 and needs --speculative-config, got %v", *acceptance)
	}
	var off []int
	if *agent {
		if *turns <= 0 {
			return fail(exitUsage, "--turns must be positive")
		}
		for _, f := range strings.FieldsFunc(*offTurns, func(r rune) bool { return r == ',' }) {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > *turns {
				return fail(exitUsage, "--no-cache-turns: %q is not a turn between 1 and %d", f, *turns)
			}
			off = append(off, n)
		}
		if *offTurns == "" {
			off = nil
		} else if off == nil {
			off = []int{} // none
		}
	}
	inner, err := newBackend(backendOptions{name: *be, threads: *threads, device: *device, noCoopmat: *noCoopmat, profile: *profileOps, bf16Inputs: *bf16In, noAMXTiles: !*amxTiles, noFMATiles: !*fmaTiles, kernels: *kernelSet, log: io.err})
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer inner.Close()
	if *loraDir != "" {
		n := *batch
		if n == 1 {
			n = 8
		}
		res, err := benchLoRA(ctx, loraBenchOptions{dir: *dir, quantize: *quantize, backend: inner, adapter: *loraDir,
			prompt: *prompt, gen: *gen, repeat: *repeat, batch: n, noMerged: *noMerged, mergeFormat: *benchMergeFormat}, io.err)
		if err != nil {
			return fail(exitError, "%v", err)
		}
		return report(res, func() { res.print(io.out) })
	}
	if *grammarFile != "" || *schemaFile != "" || *regexArg != "" {
		res, err := benchGrammar(ctx, grammarBenchOptions{dir: *dir, backend: inner, gen: *gen, repeat: *repeat,
			grammar: *grammarFile, schema: *schemaFile, regex: *regexArg})
		if err != nil {
			return fail(exitError, "%v", err)
		}
		return report(res, func() { res.print(io.out) })
	}
	if *agent && (*restart || *sessions > 0) {
		nThreads := *threads
		if nThreads <= 0 {
			nThreads = runtimeThreads()
		}
		res, err := agentDiskReplay(ctx, io, diskReplayOptions{agentOptions: agentOptions{dir: *dir, backend: inner, threads: nThreads, gen: *gen, turns: *turns,
			offTurns: off, kvType: *kvType, quantize: *quantize}, cacheDir: *benchDir, restart: *restart, sessions: *sessions, stateMemory: *benchMem, hostMemory: *benchHost})
		if err != nil {
			return fail(exitError, "--agent-replay: %v", err)
		}
		return report(res, func() { res.print(io) })
	}
	if *agent {
		nThreads := *threads
		if nThreads <= 0 {
			nThreads = runtimeThreads()
		}
		res, err := agentReplay(ctx, io, agentOptions{dir: *dir, backend: inner, threads: nThreads, gen: *gen, turns: *turns,
			offTurns: off, kvType: *kvType, quantize: *quantize})
		if err != nil {
			return fail(exitError, "--agent-replay: %v", err)
		}
		return report(res, func() {
			fmt.Fprintf(io.out, "%d turns: %d prompt tokens, %d prefilled with the prefix cache; TTFT %.2fs with it, %.2fs without over %d turns; worst TTFT / fresh %.2f; short prompt: %d of %d cached the second time\n",
				len(res.Turns), res.PromptTokens, res.PrefilledTokens, res.TTFTCacheSeconds, res.TTFTNoCacheSeconds, res.NoCacheTurns,
				res.WorstTTFTRatio, res.ShortPromptCachedSecond, res.ShortPromptTokens)
		})
	}
	backend := inner
	var prof opProfiler
	if *profileOps {
		if dp, ok := inner.(deviceProfiler); ok {
			prof = vulkanProfiler{dp}
		} else {
			pb := profile.New(inner)
			prof, backend = hostProfiler{pb}, pb
		}
	}
	moeLayers, err := cpuMoE()
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	experts := expertBackend(moeLayers, inner, *threads)
	if experts != nil {
		defer experts.Close()
	}
	m, err := model.OpenContext(ctx, *dir, model.Options{Backend: backend, MaxStepTokens: max(*prompt, *imageTokens+2), ExpertBackend: experts, CPUMoELayers: moeLayers,
		HostMoERouting: *hostRoute, Quantize: *quantize, MTP: spec.Method == "mtp", DraftQuantize: spec.DraftQuantize, Progress: quietProgress(io, *dir, *quantize)})
	if err != nil {
		if ctx.Err() != nil {
			return fail(exitError, "interrupted while loading")
		}
		if spec.Method == "mtp" {
			return fail(exitUsage, "--speculative-config: method mtp needs the checkpoint's MTP head (mtp.* tensors): %s", firstLine(err))
		}
		return fail(exitUsage, "%v", err)
	}
	defer m.Close()
	if *prompt+*gen > m.Config().MaxContext() {
		return fail(exitUsage, "--prompt + --gen exceed the model's context of %d", m.Config().MaxContext())
	}
	nThreads := *threads
	if nThreads <= 0 {
		nThreads = runtimeThreads()
	}
	if *imageTokens > 0 {
		res, err := benchImage(ctx, m, backend, *dir, *imageTokens, *repeat, nThreads)
		if err != nil {
			return fail(exitError, "--image-tokens: %v", err)
		}
		res.Model = *dir
		return report(res, func() { res.print(io.out) })
	}
	res := benchResult{Model: *dir, Backend: inner.Name(), Threads: nThreads, Prompt: *prompt, Gen: *gen,
		Repeat: *repeat, DecodeBytesPerToken: m.DecodeBytes(), Batch: *batch}
	ids := benchPrompt(m.Config(), *prompt, 0)
	var prefill, decode, batched []float64
	var prefillProf, decodeProf, batchProf []opTime
	var decodeStats vulkan.Stats
	var decodeMoE, batchMoE moeWork
	// Warm up, so that the first timed run does not pay for paging the
	// weights in, starting the workers or the first touch of the
	// activations sized for the whole prompt: after a warm-up of 32 tokens
	// the first prefill of 512 ran about 6 % below the next ones (4-layer
	// 9B-width Q8_0, 2 threads: 170 against 180-182 tok/s).
	if _, _, err := benchOnce(ctx, m, ids, 1, nil, new([]opTime), new([]opTime), new(vulkan.Stats), new(moeWork)); err != nil {
		return fail(exitError, "warm-up: %v", err)
	}
	for r := 0; r < *repeat; r++ {
		p, d, err := benchOnce(ctx, m, ids, *gen, prof, &prefillProf, &decodeProf, &decodeStats, &decodeMoE)
		if err != nil {
			return fail(exitError, "%v", err)
		}
		prefill, decode = append(prefill, p), append(decode, d)
		line := fmt.Sprintf("run %d/%d: prefill %.2f tokens/s, decode %.2f tokens/s", r+1, *repeat, p, d)
		if *batch > 1 {
			b, err := benchBatch(ctx, m, *batch, *prompt, *gen, prof, &batchProf, &batchMoE, nil)
			if err != nil {
				return fail(exitError, "batch of %d: %v", *batch, err)
			}
			batched = append(batched, b)
			line += fmt.Sprintf(", batch of %d %.2f tokens/s", *batch, b)
		}
		if !*asJSON {
			fmt.Fprintln(io.err, line)
		}
	}
	if spec.Method != "" {
		if err := benchSpec(ctx, m, ids, *gen, *repeat, spec, *acceptance, prof, &res.specResult); err != nil {
			return fail(exitError, "--speculative-config: %v", err)
		}
	}
	if steps := float64(*repeat * *gen); decodeStats.Dispatches > 0 {
		res.DecodeDispatchesPerToken = float64(decodeStats.Dispatches) / steps
		res.DecodeBarriersPerToken = float64(decodeStats.Barriers) / steps
		res.DecodeSubmissionsPerToken = float64(decodeStats.Submissions) / steps
	}
	if prof != nil {
		res.PrefillProfile = profileRows(prefillProf, *repeat)
		res.DecodeProfile = profileRows(decodeProf, *repeat**gen)
		if *batch > 1 {
			res.BatchDecodeProfile = profileRows(batchProf, *repeat**gen)
		}
	}
	res.PrefillTokensPerSecond = median(prefill)
	res.DecodeTokensPerSecond = median(decode)
	res.DecodeGBPerSecond = res.DecodeTokensPerSecond * float64(res.DecodeBytesPerToken) / 1e9
	if len(batched) > 0 {
		res.BatchDecodeTokensPerSecond = median(batched)
		res.BatchDecodeSpeedup = res.BatchDecodeTokensPerSecond / res.DecodeTokensPerSecond
	}
	res.setMoE(m, decodeMoE, batchMoE)
	res.PrefillFLOPs = prefillFLOPs(m.Config(), *prompt)
	res.PrefillGFLOPS = res.PrefillFLOPs * res.PrefillTokensPerSecond / float64(*prompt) / 1e9
	cpuInfo := machine.DetectCPU()
	res.CPUModel, res.CPUFeatures = cpuInfo.Model, cpuInfo.Features
	res.CPUL1DBytes, res.CPUL2Bytes, res.CPUL3Bytes, res.CPULogical = cpuInfo.L1D, cpuInfo.L2, cpuInfo.L3, cpuInfo.LogicalCPUs
	if meter, ok := inner.(bandwidthMeter); ok {
		gbps, err := meter.MemoryBandwidth(ctx)
		if err != nil {
			return fail(exitError, "measuring device bandwidth: %v", err)
		}
		res.MemoryReadGBPerSecond, res.MemoryBaseline = gbps, "device buffer copy, bytes read + written"
	} else {
		kernels := backendKernels(inner)
		rep := machine.Measure(machine.Options{Threads: nThreads, ReadBytes: *memMiB << 20, Int8AVX2: !kernels.Features().AVX512VNNI,
			Int8AVXVNNI: kernels.Features().AVXVNNI, AVX2Only: kernels.Features().AVX2 && !kernels.Features().AVX512,
			HugePages: true})
		res.setMachine(rep, kernels, *bf16In, *amxTiles, 2*m.BlockFormatBytes() > m.WeightBytes())
	}
	if res.MemoryReadGBPerSecond > 0 {
		res.DecodeBandwidthFraction = res.DecodeGBPerSecond / res.MemoryReadGBPerSecond
	}
	if *asJSON {
		if err := printIndentedJSON(io.out, res); err != nil {
			return fail(exitError, "%v", err)
		}
		return exitOK
	}
	res.print(io.out)
	if prof != nil {
		printProfile(io.out, fmt.Sprintf("prefill profile (per %d-token prompt)", *prompt), prof.what(), res.PrefillProfile)
		printProfile(io.out, "decode profile (per token)", prof.what(), res.DecodeProfile)
		if res.BatchDecodeProfile != nil {
			printProfile(io.out, fmt.Sprintf("batch decode profile (per step of %d sequences)", *batch), prof.what(), res.BatchDecodeProfile)
		}
		if res.SpecVerifyStepProfile != nil {
			printProfile(io.out, "speculation: plain decode step (cost measurement, per step)", prof.what(), res.SpecPlainStepProfile)
			printProfile(io.out, fmt.Sprintf("speculation: verify step of %d positions (per step)", res.SpecK+1), prof.what(), res.SpecVerifyStepProfile)
		}
		if res.SpecDraftStepProfile != nil {
			printProfile(io.out, "speculation: draft step (per step)", prof.what(), res.SpecDraftStepProfile)
		}
	}
	return exitOK
}

// printIndentedJSON writes v to w as indented JSON, as bench --json prints
// its results.
func printIndentedJSON(w goio.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// setMachine fills in the host measurements of rep and what follows from
// them for a CPU backend running kernels.
//
// The prefill peak is the one of the kernels that run most of the
// products: dot_bf16 for bf16 weights with --bf16-inputs on AVX512_BF16,
// amx_bf16 for bf16 weights with --amx-tiles on AMX (the tile peak over
// the inputs' bf16 parts: three, or one with --bf16-inputs), dot_int8 for
// a model mostly in block formats on AVX512_VNNI or AVX2 (whose packed
// products are VPDPBUSD, or VPMADDUBSW and VPMADDWD), else fma_f32.
func (res *benchResult) setMachine(rep machine.Report, kernels *asm.Kernels, bf16Inputs, amxTiles, quantized bool) {
	res.Kernels = kernels.Name()
	if kernels.TilesBF16() && !amxTiles {
		res.Kernels = strings.TrimSuffix(res.Kernels, "-amx")
	}
	res.ReadGBPerSecond1Thread, res.ReadGBPerSecond, res.ReadProbe = rep.ReadOne.Value, rep.Read.Value, rep.Read.Probe
	res.ReadGBPerSecondHugePages, res.ReadHugePageShare = rep.ReadHuge.Value, rep.ReadHugeShare
	res.MemoryReadGBPerSecond = rep.Read.Value
	res.MemoryBaseline = fmt.Sprintf("plain read loop, %d threads, %s", rep.Read.Threads, rep.Read.Probe)
	res.FMAF32GFLOPS1Thread, res.FMAF32GFLOPS, res.FMAProbe = rep.FMAOne.Value, rep.FMA.Value, rep.FMA.Probe
	if rep.BF16 {
		res.DotBF16GFLOPS1Thread, res.DotBF16GFLOPS = rep.DotBF16One.Value, rep.DotBF16.Value
	}
	if rep.Int8 {
		res.DotInt8GOPS1Thread, res.DotInt8GOPS = rep.DotInt8One.Value, rep.DotInt8.Value
	}
	if rep.AMX {
		res.AMXBF16GFLOPS1Thread, res.AMXBF16GFLOPS = rep.TileBF16One.Value, rep.TileBF16.Value
	}
	res.MachineProbeSeconds = rep.Elapsed.Seconds()
	peak := res.FMAF32GFLOPS
	res.PrefillPeak = "fma_f32"
	if bf16Inputs && kernels.Features().AVX512BF16 && rep.BF16 {
		peak, res.PrefillPeak = res.DotBF16GFLOPS, "dot_bf16"
	}
	if amxTiles && kernels.TilesBF16() && rep.AMX {
		parts := asm.MaxTileParts
		if bf16Inputs {
			parts = 1
		}
		peak, res.PrefillPeak = res.AMXBF16GFLOPS/float64(parts), "amx_bf16"
	}
	if quantized && (kernels.Features().AVX512VNNI || kernels.Features().AVX2) && rep.Int8 {
		peak, res.PrefillPeak = res.DotInt8GOPS, "dot_int8"
	}
	if peak > 0 {
		res.PrefillPeakFraction = res.PrefillGFLOPS / peak
	}
	if res.ReadGBPerSecond > 0 {
		res.DecodeReadFraction = res.DecodeGBPerSecond / res.ReadGBPerSecond
	}
	if res.ReadGBPerSecondHugePages > 0 {
		res.DecodeReadFractionHugePages = res.DecodeGBPerSecond / res.ReadGBPerSecondHugePages
	}
}

// print writes the result as a table.
func (res *benchResult) print(w goio.Writer) {
	fmt.Fprintf(w, "model      %s\nbackend    %s\n", res.Model, res.Backend)
	fmt.Fprintf(w, "cpu        %s (%s; L1d %s, L2 %s, L3 %s; %d CPUs)\n", res.CPUModel, strings.Join(res.CPUFeatures, " "),
		sizeText(res.CPUL1DBytes), sizeText(res.CPUL2Bytes), sizeText(res.CPUL3Bytes), res.CPULogical)
	if res.Kernels != "" {
		fmt.Fprintf(w, "kernels    %s\n", res.Kernels)
		fmt.Fprintf(w, "read loop  %8.2f GB/s     at 1 thread, %.2f GB/s at %d (%s)\n",
			res.ReadGBPerSecond1Thread, res.ReadGBPerSecond, res.Threads, res.ReadProbe)
		fmt.Fprintf(w, "f32 fma    %8.1f GFLOP/s  at 1 thread, %.1f GFLOP/s at %d (%s)\n",
			res.FMAF32GFLOPS1Thread, res.FMAF32GFLOPS, res.Threads, res.FMAProbe)
		if res.DotBF16GFLOPS > 0 {
			fmt.Fprintf(w, "bf16 dot   %8.1f GFLOP/s  at 1 thread, %.1f GFLOP/s at %d (VDPBF16PS zmm)\n",
				res.DotBF16GFLOPS1Thread, res.DotBF16GFLOPS, res.Threads)
		}
		if res.DotInt8GOPS > 0 {
			probe := "VPDPBUSD zmm"
			switch {
			case strings.Contains(res.Kernels, "-avxvnni"):
				probe = "VPDPBUSD ymm, AVX-VNNI"
			case !strings.Contains(res.Kernels, "-vnni"):
				probe = "VPMADDUBSW+VPMADDWD ymm"
			}
			fmt.Fprintf(w, "int8 dot   %8.1f GOP/s    at 1 thread, %.1f GOP/s at %d (%s)\n",
				res.DotInt8GOPS1Thread, res.DotInt8GOPS, res.Threads, probe)
		}
		if res.AMXBF16GFLOPS > 0 {
			fmt.Fprintf(w, "amx bf16   %8.1f GFLOP/s  at 1 thread, %.1f GFLOP/s at %d (TDPBF16PS tiles)\n",
				res.AMXBF16GFLOPS1Thread, res.AMXBF16GFLOPS, res.Threads)
		}
	}
	fmt.Fprintf(w, "prefill    %8.2f tokens/s  (%d-token prompt, median of %d)\n", res.PrefillTokensPerSecond, res.Prompt, res.Repeat)
	fmt.Fprintf(w, "           %8.1f GFLOP/s  (%.3g GFLOP per prompt", res.PrefillGFLOPS, res.PrefillFLOPs/1e9)
	if res.PrefillPeak != "" {
		fmt.Fprintf(w, "; %.0f%% of the %s peak", 100*res.PrefillPeakFraction, strings.ReplaceAll(res.PrefillPeak, "_", " "))
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintf(w, "decode     %8.2f tokens/s  (%d tokens, median of %d)\n", res.DecodeTokensPerSecond, res.Gen, res.Repeat)
	fmt.Fprintf(w, "weights    %8.2f GB/s     (%.3f GB read per decode step)\n", res.DecodeGBPerSecond, float64(res.DecodeBytesPerToken)/1e9)
	fmt.Fprintf(w, "memory     %8.2f GB/s     (%s; decode reaches %.0f%%)\n",
		res.MemoryReadGBPerSecond, res.MemoryBaseline, 100*res.DecodeBandwidthFraction)
	if res.ReadGBPerSecondHugePages > 0 {
		fmt.Fprintf(w, "huge pages %8.2f GB/s     (the same loop over 2 MiB pages, %.0f%% of the buffer in them, as weights that fit in memory are mapped; decode reaches %.0f%%)\n",
			res.ReadGBPerSecondHugePages, 100*res.ReadHugePageShare, 100*res.DecodeReadFractionHugePages)
	}
	if res.BatchDecodeTokensPerSecond > 0 {
		fmt.Fprintf(w, "batch      %8.2f tokens/s  (%d sequences decoding together, %.2fx one sequence)\n",
			res.BatchDecodeTokensPerSecond, res.Batch, res.BatchDecodeSpeedup)
	}
	res.moeResult.print(w)
	if res.SpecMethod != "" {
		fmt.Fprintf(w, "spec       %8.2f tokens/s  (%s, %d drafts per round, %.2fx the engine's plain %.2f tokens/s; %.2f accepted per round)\n",
			res.SpecDecodeTokensPerSecond, res.SpecMethod, res.SpecK, res.SpecSpeedup, res.SpecPlainTokensPerSecond, res.SpecAcceptedPerRound)
		fmt.Fprintf(w, "spec cost  verify of %d positions %.2f, draft %.2f plain steps; predicted %.2fx; a real 9B at 80%% acceptance: %.2fx\n",
			res.SpecK+1, res.SpecVerifyCost, res.SpecDraftCost, res.SpecPredictedSpeedup, res.SpecProjected9BSpeedup)
	}
	if res.DecodeDispatchesPerToken > 0 {
		fmt.Fprintf(w, "recorded   %8.1f dispatches, %.1f barriers, %.1f submissions per decode step\n",
			res.DecodeDispatchesPerToken, res.DecodeBarriersPerToken, res.DecodeSubmissionsPerToken)
	}
}

// sizeText formats a cache size in KiB or MiB ("?" when unknown).
func sizeText(n int) string {
	switch {
	case n <= 0:
		return "?"
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// backendKernels returns the kernel set a CPU backend runs: its own where
// it says (a Kernels method), else the set cpu.New picks by default.
func backendKernels(be compute.Backend) *asm.Kernels {
	if k, ok := be.(interface{ Kernels() *asm.Kernels }); ok {
		return k.Kernels()
	}
	return asm.Detect()
}

// prefillFLOPs returns the floating-point operations (a multiply-add
// counts as two) of prefilling a prompt of n tokens in one step: every
// matrix weight of every layer once per token, the attention products
// (q·k and p·v, 4 × heads × head_dim per cached position) of the
// full-attention layers, and the output matrix for the last position only,
// less the last layer's work after its mixer's state updates for all
// positions but the last (the model computes that for the rows it reads
// only). The Gated DeltaNet recurrence, the convolution, norms and
// activations are left out (well under 1% at the real widths).
func prefillFLOPs(c *model.Config, n int) float64 {
	h := float64(c.HiddenSize)
	var perToken, lastOnly, attn float64
	for _, kind := range c.LayerTypes {
		mlp := 3 * h * float64(c.IntermediateSize) // gate, up, down
		if c.MoE() {
			// The router and the shared expert's gate, the k experts a
			// token chooses and the shared expert.
			mlp = h*float64(c.NumExperts+1) + 3*h*float64(c.NumExpertsPerTok*c.MoEIntermediateSize+c.SharedExpertIntermediateSize)
		}
		perToken += mlp
		if kind == model.LinearAttention {
			nv, vd := float64(c.LinearNumValueHeads), float64(c.ValueDim())
			perToken += h * (float64(c.ConvDim()) + 2*vd + 2*nv) // in_proj_qkv, in_proj_z, out_proj, in_proj_a, in_proj_b
			lastOnly = mlp + 2*h*vd                              // in_proj_z, out_proj
			continue
		}
		qd, kvd := float64(c.NumHeads*c.HeadDim), float64(c.NumKVHeads*c.HeadDim)
		perToken += h * (2*qd + 2*kvd + qd) // q_proj (with its gate), k_proj, v_proj, o_proj
		lastOnly = mlp + h*qd               // o_proj
		// Token i attends over i+1 positions: sum = n(n+1)/2.
		attn += 4 * qd * float64(n) * float64(n+1) / 2
	}
	return 2*perToken*float64(n) - 2*lastOnly*float64(n-1) + attn + 2*h*float64(c.VocabSize)
}

// benchPrompt returns n token ids, a different sequence for each seed.
func benchPrompt(c *model.Config, n, seed int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = (i*7919 + 13 + seed*104729) % c.VocabSize
	}
	return ids
}

// benchOnce prefills ids into a new sequence in one step, then decodes gen
// tokens greedily one step each, and returns both rates. With prof, it
// adds the profiles of the prefill and of the decode steps to prefillProf
// and decodeProf.
func benchOnce(ctx context.Context, m *model.Model, ids []int, gen int, prof opProfiler, prefillProf, decodeProf *[]opTime, decodeStats *vulkan.Stats, moe *moeWork) (prefill, decode float64, err error) {
	seq, err := m.NewSequence()
	if err != nil {
		return 0, 0, err
	}
	defer seq.Close()
	// Room for every token up front, as the engine reserves a request's
	// prompt plus max_tokens: otherwise the first decode step would double
	// the KV caches, copying them, and count that as decoding.
	if err := seq.Reserve(min(len(ids)+gen, m.Config().MaxContext())); err != nil {
		return 0, 0, err
	}
	if prof != nil {
		prof.take()
	}
	start := time.Now()
	out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: ids}})
	if err != nil {
		return 0, 0, err
	}
	prefill = float64(len(ids)) / time.Since(start).Seconds()
	if prof != nil {
		*prefillProf = addProfile(*prefillProf, prof.take())
	}
	tok := compute.Argmax(out[0].Logits)
	counter, _ := m.Backend().(recordStats)
	var s0 vulkan.Stats
	if counter != nil {
		s0 = counter.Stats()
	}
	moe0 := m.MoEStats()
	start = time.Now()
	for i := 0; i < gen; i++ {
		// Greedy decode: the backend returns the argmax, not the logits.
		out, err = m.Step(ctx, []model.Input{{Seq: seq, Tokens: []int{tok}, Logits: model.LastArgmax, Decode: true}})
		if err != nil {
			return 0, 0, err
		}
		tok = out[0].Argmax
	}
	elapsed := time.Since(start)
	decode = float64(gen) / elapsed.Seconds()
	moe.add(moe0, m.MoEStats(), gen, elapsed)
	if counter != nil {
		s1 := counter.Stats()
		decodeStats.Dispatches += s1.Dispatches - s0.Dispatches
		decodeStats.Barriers += s1.Barriers - s0.Barriers
		decodeStats.Submissions += s1.Submissions - s0.Submissions
	}
	if prof != nil {
		*decodeProf = addProfile(*decodeProf, prof.take())
	}
	return prefill, decode, nil
}

// benchBatch prefills a different prompt of the given length into each of
// n new sequences (one step each), then decodes gen tokens greedily for
// all of them together, one step per token, and returns the decode rate in
// tokens of all sequences per second. With prof, it adds the decode steps'
// operations to batchProf. uses, when not nil, gives sequence i's LoRA
// adapters.
func benchBatch(ctx context.Context, m *model.Model, n, prompt, gen int, prof opProfiler, batchProf *[]opTime, moe *moeWork, uses func(int) []model.AdapterUse) (float64, error) {
	seqs := make([]*model.Sequence, n)
	for i := range seqs {
		s, err := m.NewSequence()
		if err != nil {
			return 0, err
		}
		defer s.Close()
		if err := s.Reserve(min(prompt+gen, m.Config().MaxContext())); err != nil {
			return 0, err
		}
		if uses != nil {
			if err := s.SetAdapters(uses(i)); err != nil {
				return 0, err
			}
		}
		seqs[i] = s
	}
	in := make([]model.Input, n)
	for i, s := range seqs {
		out, err := m.Step(ctx, []model.Input{{Seq: s, Tokens: benchPrompt(m.Config(), prompt, i+1)}})
		if err != nil {
			return 0, err
		}
		in[i] = model.Input{Seq: s, Tokens: []int{compute.Argmax(out[0].Logits)}, Logits: model.LastArgmax, Decode: true}
	}
	if prof != nil {
		prof.take()
	}
	moe0 := m.MoEStats()
	start := time.Now()
	for range gen {
		out, err := m.Step(ctx, in)
		if err != nil {
			return 0, err
		}
		for i := range in {
			in[i].Tokens = []int{out[i].Argmax}
		}
	}
	elapsed := time.Since(start)
	rate := float64(n*gen) / elapsed.Seconds()
	moe.add(moe0, m.MoEStats(), gen, elapsed)
	if prof != nil {
		*batchProf = addProfile(*batchProf, prof.take())
	}
	return rate, nil
}

// addProfile adds the entries of b to those of a with the same Op, keeping
// the result sorted by time, largest first.
func addProfile(a, b []opTime) []opTime {
	for _, e := range b {
		i := slices.IndexFunc(a, func(x opTime) bool { return x.Op == e.Op })
		if i < 0 {
			a = append(a, e)
			continue
		}
		a[i].Count += e.Count
		a[i].Time += e.Time
	}
	slices.SortStableFunc(a, func(x, y opTime) int { return cmp.Compare(y.Time, x.Time) })
	return a
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
