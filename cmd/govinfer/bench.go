package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	goio "io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/govinfer/govinfer/asm"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/vulkan"
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
	// run (best of 5): a plain read loop over --mem-mib with the same
	// threads, or, for backends that measure their device (Vulkan), the
	// device's buffer-copy bandwidth.
	MemoryReadGBPerSecond float64 `json:"memory_read_gb_per_second"`
	// MemoryBaseline says how MemoryReadGBPerSecond was measured: a host
	// read loop, or the device's own copy bandwidth (Vulkan).
	MemoryBaseline string `json:"memory_baseline"`
	// DecodeBandwidthFraction is DecodeGBPerSecond / MemoryReadGBPerSecond.
	DecodeBandwidthFraction float64 `json:"decode_bandwidth_fraction"`
	// With --profile: device time by operation, per prefilled prompt and
	// per decoded token (averaged over the repeats).
	PrefillProfile []profileRow `json:"prefill_profile,omitempty"`
	DecodeProfile  []profileRow `json:"decode_profile,omitempty"`
	// Vulkan: what a decode step records, averaged over the steps.
	DecodeDispatchesPerToken  float64 `json:"decode_dispatches_per_token,omitempty"`
	DecodeBarriersPerToken    float64 `json:"decode_barriers_per_token,omitempty"`
	DecodeSubmissionsPerToken float64 `json:"decode_submissions_per_token,omitempty"`
}

// recordStats is a backend that counts what it records (Vulkan).
type recordStats interface{ Stats() vulkan.Stats }

// profileRow is one operation's share of a prefill or a decode step.
type profileRow struct {
	Op    string  `json:"op"`
	Count float64 `json:"count"` // dispatches (or transfers) per prompt or token
	MS    float64 `json:"ms"`    // device milliseconds per prompt or token
}

// deviceProfiler is a backend that times its operations (Vulkan with
// Options.Profile).
type deviceProfiler interface {
	Profile() []vulkan.ProfileEntry
	ResetProfile()
}

// profileRows divides a profile by the number of prompts or tokens it
// covers.
func profileRows(p []vulkan.ProfileEntry, per int) []profileRow {
	rows := make([]profileRow, 0, len(p))
	for _, e := range p {
		rows = append(rows, profileRow{Op: e.Op, Count: float64(e.Count) / float64(per), MS: e.Time.Seconds() * 1e3 / float64(per)})
	}
	return rows
}

// printProfile writes a profile as a table with each operation's share.
func printProfile(w goio.Writer, title string, rows []profileRow) {
	var total float64
	for _, r := range rows {
		total += r.MS
	}
	fmt.Fprintf(w, "\n%s: %.3f ms of device time\n", title, total)
	fmt.Fprintf(w, "  %-12s %10s %10s %7s\n", "op", "count", "ms", "share")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-12s %10.1f %10.3f %6.1f%%\n", r.Op, r.Count, r.MS, 100*r.MS/max(total, 1e-12))
	}
}

// runBench implements "govinfer bench": prefill and decode speed.
func runBench(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "bench", "bench --model DIR [--prompt N] [--gen N] [--threads N] [--repeat N] [--backend cpu|vulkan] [--profile] [--json]")
	dir := fs.String("model", "", "`DIR` holding the checkpoint")
	prompt := fs.Int("prompt", 512, "prompt tokens to prefill")
	gen := fs.Int("gen", 128, "tokens to decode after the prompt")
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	device := fs.Int("device", 0, "Vulkan device: 0 picks the best (discrete GPU first), N the Nth of the list")
	noCoopmat := fs.Bool("no-coopmat", false, "Vulkan: run prefill products on the portable tiled shader even where the device has VK_KHR_cooperative_matrix")
	repeat := fs.Int("repeat", 5, "runs; medians are reported")
	be := fs.String("backend", "cpu", "compute backend: "+backendNames)
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	profile := fs.Bool("profile", false, "Vulkan: time every operation on the device and print where prefill and decode spend it (timestamps slow the run a little)")
	memMiB := fs.Int("mem-mib", 1024, "size of the memory-read baseline in MiB")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(io.err, "govinfer bench: "+format+"\n", a...)
		return code
	}
	switch {
	case *dir == "":
		return fail(exitUsage, "--model is required")
	case *prompt <= 0 || *gen <= 0 || *repeat <= 0 || *memMiB <= 0:
		return fail(exitUsage, "--prompt, --gen, --repeat and --mem-mib must be positive")
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fail(exitUsage, "--model %s: not a directory", *dir)
	}
	if *profile && *be != "vulkan" {
		return fail(exitUsage, "--profile needs --backend vulkan")
	}
	backend, err := newBackend(backendOptions{name: *be, threads: *threads, device: *device, noCoopmat: *noCoopmat, profile: *profile, log: io.err})
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer backend.Close()
	var prof deviceProfiler
	if *profile {
		if prof, _ = backend.(deviceProfiler); prof == nil {
			return fail(exitUsage, "--profile: backend %s cannot time its operations", backend.Name())
		}
	}
	m, err := model.Open(*dir, model.Options{Backend: backend, MaxStepTokens: *prompt})
	if err != nil {
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
	res := benchResult{Model: *dir, Backend: backend.Name(), Threads: nThreads, Prompt: *prompt, Gen: *gen,
		Repeat: *repeat, DecodeBytesPerToken: m.DecodeBytes()}
	ids := make([]int, *prompt)
	for i := range ids {
		ids[i] = (i*7919 + 13) % m.Config().VocabSize
	}
	var prefill, decode []float64
	var prefillProf, decodeProf []vulkan.ProfileEntry
	var decodeStats vulkan.Stats
	for r := 0; r < *repeat; r++ {
		p, d, err := benchOnce(ctx, m, ids, *gen, prof, &prefillProf, &decodeProf, &decodeStats)
		if err != nil {
			return fail(exitError, "%v", err)
		}
		prefill, decode = append(prefill, p), append(decode, d)
		if !*asJSON {
			fmt.Fprintf(io.err, "run %d/%d: prefill %.2f tokens/s, decode %.2f tokens/s\n", r+1, *repeat, p, d)
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
	}
	res.PrefillTokensPerSecond = median(prefill)
	res.DecodeTokensPerSecond = median(decode)
	res.DecodeGBPerSecond = res.DecodeTokensPerSecond * float64(res.DecodeBytesPerToken) / 1e9
	baseline, how, err := benchBaseline(ctx, backend, nThreads, *memMiB<<20)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	res.MemoryReadGBPerSecond, res.MemoryBaseline = baseline, how
	if res.MemoryReadGBPerSecond > 0 {
		res.DecodeBandwidthFraction = res.DecodeGBPerSecond / res.MemoryReadGBPerSecond
	}
	if *asJSON {
		enc := json.NewEncoder(io.out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fail(exitError, "%v", err)
		}
		return exitOK
	}
	fmt.Fprintf(io.out, "model      %s\nbackend    %s\n", res.Model, res.Backend)
	fmt.Fprintf(io.out, "prefill    %8.2f tokens/s  (%d-token prompt, median of %d)\n", res.PrefillTokensPerSecond, *prompt, *repeat)
	fmt.Fprintf(io.out, "decode     %8.2f tokens/s  (%d tokens, median of %d)\n", res.DecodeTokensPerSecond, *gen, *repeat)
	fmt.Fprintf(io.out, "weights    %8.2f GB/s     (%.3f GB read per decode step)\n", res.DecodeGBPerSecond, float64(res.DecodeBytesPerToken)/1e9)
	fmt.Fprintf(io.out, "memory     %8.2f GB/s     (%s; decode reaches %.0f%%)\n",
		res.MemoryReadGBPerSecond, res.MemoryBaseline, 100*res.DecodeBandwidthFraction)
	if res.DecodeDispatchesPerToken > 0 {
		fmt.Fprintf(io.out, "recorded   %8.1f dispatches, %.1f barriers, %.1f submissions per decode step\n",
			res.DecodeDispatchesPerToken, res.DecodeBarriersPerToken, res.DecodeSubmissionsPerToken)
	}
	if prof != nil {
		printProfile(io.out, fmt.Sprintf("prefill profile (per %d-token prompt)", *prompt), res.PrefillProfile)
		printProfile(io.out, "decode profile (per token)", res.DecodeProfile)
	}
	return exitOK
}

// benchOnce prefills ids into a new sequence in one step, then decodes gen
// tokens greedily one step each, and returns both rates. With prof, it
// adds the device profiles of the prefill and of the decode steps to
// prefillProf and decodeProf.
func benchOnce(ctx context.Context, m *model.Model, ids []int, gen int, prof deviceProfiler, prefillProf, decodeProf *[]vulkan.ProfileEntry, decodeStats *vulkan.Stats) (prefill, decode float64, err error) {
	seq, err := m.NewSequence()
	if err != nil {
		return 0, 0, err
	}
	defer seq.Close()
	if prof != nil {
		prof.ResetProfile()
	}
	start := time.Now()
	out, err := m.Step(ctx, []model.Input{{Seq: seq, Tokens: ids}})
	if err != nil {
		return 0, 0, err
	}
	prefill = float64(len(ids)) / time.Since(start).Seconds()
	if prof != nil {
		*prefillProf = addProfile(*prefillProf, prof.Profile())
		prof.ResetProfile()
	}
	tok := compute.Argmax(out[0].Logits)
	counter, _ := m.Backend().(recordStats)
	var s0 vulkan.Stats
	if counter != nil {
		s0 = counter.Stats()
	}
	start = time.Now()
	for i := 0; i < gen; i++ {
		// Greedy decode: the backend returns the argmax, not the logits.
		out, err = m.Step(ctx, []model.Input{{Seq: seq, Tokens: []int{tok}, Logits: model.LastArgmax}})
		if err != nil {
			return 0, 0, err
		}
		tok = out[0].Argmax
	}
	decode = float64(gen) / time.Since(start).Seconds()
	if counter != nil {
		s1 := counter.Stats()
		decodeStats.Dispatches += s1.Dispatches - s0.Dispatches
		decodeStats.Barriers += s1.Barriers - s0.Barriers
		decodeStats.Submissions += s1.Submissions - s0.Submissions
	}
	if prof != nil {
		*decodeProf = addProfile(*decodeProf, prof.Profile())
	}
	return prefill, decode, nil
}

// addProfile adds the entries of b to those of a with the same Op, keeping
// the result sorted by time, largest first.
func addProfile(a, b []vulkan.ProfileEntry) []vulkan.ProfileEntry {
	for _, e := range b {
		i := slices.IndexFunc(a, func(x vulkan.ProfileEntry) bool { return x.Op == e.Op })
		if i < 0 {
			a = append(a, e)
			continue
		}
		a[i].Count += e.Count
		a[i].Time += e.Time
	}
	slices.SortStableFunc(a, func(x, y vulkan.ProfileEntry) int { return cmp.Compare(y.Time, x.Time) })
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

// memoryReadGBps measures how fast threads goroutines can read size bytes of
// memory with the vector kernels (a float32 dot product of the buffer with
// itself, which loads each element once), best of 5: the bandwidth a decode
// step, which streams every weight once, can at most reach.
func memoryReadGBps(threads, size int) float64 {
	buf := make([]float32, size/4)
	for i := range buf {
		buf[i] = float32(i & 1023)
	}
	k := asm.Detect()
	best := 0.0
	for r := 0; r < 5; r++ {
		var wg sync.WaitGroup
		chunk := len(buf) / threads
		sums := make([]float32, threads)
		start := time.Now()
		for t := 0; t < threads; t++ {
			wg.Add(1)
			go func(t int) {
				defer wg.Done()
				part := buf[t*chunk : (t+1)*chunk]
				sums[t] = k.DotF32(part, part)
			}(t)
		}
		wg.Wait()
		gbps := float64(chunk*threads*4) / time.Since(start).Seconds() / 1e9
		best = max(best, gbps)
	}
	return best
}
