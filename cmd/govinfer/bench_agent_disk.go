package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/llm"
)

// diskReplayOptions configures the prefix cache's disk tier benchmarks:
// "bench --agent-replay --restart" (the server restarted between the
// turns) and "bench --agent-replay --sessions N" (N agent sessions taking
// turns over a state memory that holds about one).
type diskReplayOptions struct {
	agentOptions
	cacheDir    string // --prefix-cache-dir; a temporary directory when empty
	restart     bool
	sessions    int
	stateMemory int64 // --sessions: 0 is about one session's state
	hostMemory  int64 // --prefix-cache-host: the host tier under a device's memory (0: none)
}

// diskTurn is one turn of a disk tier benchmark.
type diskTurn struct {
	Session      int `json:"session"`
	Turn         int `json:"turn"`
	PromptTokens int `json:"prompt_tokens"`
	// CachedTokens were resumed with the disk tier, DiskHitTokens of them
	// read from disk; MemoryCachedTokens were resumed by the memory tier
	// alone (the same state memory, no disk).
	CachedTokens       int `json:"cached_tokens"`
	DiskHitTokens      int `json:"disk_hit_tokens"`
	MemoryCachedTokens int `json:"memory_cached_tokens"`
	// Time to first token with the disk tier, with the memory tier alone,
	// and of a cold prefill (no prefix cache; 0 where not run).
	TTFTDisk   float64 `json:"ttft_disk_s"`
	TTFTMemory float64 `json:"ttft_memory_s"`
	TTFTCold   float64 `json:"ttft_cold_s,omitempty"`
	// TTFTDiskOverCold = TTFTDisk / TTFTCold (target <= 0.3 after a
	// restart).
	TTFTDiskOverCold float64 `json:"ttft_disk_over_cold,omitempty"`
	// Bytes the disk tier wrote (at eviction, and with --restart at the
	// shutdown after the turn) and read for the turn.
	BytesWritten uint64 `json:"bytes_written"`
	BytesRead    uint64 `json:"bytes_read"`
	// With a host tier (--prefix-cache-host): the cached tokens it
	// supplied, and the bytes copied into it from the device's memory and
	// back for the turn.
	HostHitTokens    int    `json:"host_hit_tokens,omitempty"`
	HostBytesWritten uint64 `json:"host_bytes_written,omitempty"`
	HostBytesRead    uint64 `json:"host_bytes_read,omitempty"`
}

// diskReplayResult is what the disk tier benchmarks print with --json.
type diskReplayResult struct {
	Model       string `json:"model"`
	Backend     string `json:"backend"`
	Threads     int    `json:"threads"`
	Mode        string `json:"mode"` // "restart" or "sessions"
	Sessions    int    `json:"sessions"`
	KVCacheType string `json:"kv_cache_type"`
	StateMemory string `json:"state_memory"`
	HostMemory  string `json:"host_memory,omitempty"` // --prefix-cache-host
	// The state of a kept point: KV per token, recurrent state per point.
	KVBytesPerToken        int64      `json:"kv_bytes_per_token"`
	RecurrentBytesPerPoint int64      `json:"recurrent_bytes_per_point"`
	Turns                  []diskTurn `json:"turns"`
	// The store's totals: bytes and seconds of its file writes (from the
	// queue to the renamed file) and reads (open to checked payload).
	WriteBytes   uint64  `json:"write_bytes"`
	WriteSeconds float64 `json:"write_seconds"`
	ReadBytes    uint64  `json:"read_bytes"`
	ReadSeconds  float64 `json:"read_seconds"`
	WriteMBps    float64 `json:"write_mb_per_s"`
	ReadMBps     float64 `json:"read_mb_per_s"`
	Dropped      uint64  `json:"dropped_writes"`
	Corrupt      uint64  `json:"corrupt_files"`
	// Of the turns measured cold, the worst TTFTDiskOverCold from the
	// second turn (or round) on, and the smallest share of a prompt
	// cached there.
	WorstDiskOverCold float64 `json:"worst_ttft_disk_over_cold"`
	WorstCachedShare  float64 `json:"worst_cached_share"`
	// Real9B projects the write and read of one 17k-token prefix state of
	// the real Qwen3.5-9B (32 layers, 8 of them attention: 64 KiB of f32
	// KV per token, or 32 KiB in bf16, and 24 Gated DeltaNet states) at the
	// measured throughput.
	Real9B real9BProjection `json:"real_9b_17k_projection"`
}

type real9BProjection struct {
	Tokens          int     `json:"tokens"`
	KVBytesPerToken int64   `json:"kv_bytes_per_token"`
	RecurrentBytes  int64   `json:"recurrent_bytes"`
	StateBytes      int64   `json:"state_bytes"`
	WriteSeconds    float64 `json:"write_seconds"`
	ReadSeconds     float64 `json:"read_seconds"`
}

// real9B returns the bytes of a 17k-token prefix state of the real 9B
// with the KV cache type kv ("f32", "bf16" or "f16").
func real9B(kv string) real9BProjection {
	const tokens, attnLayers, kvHeads, headDim = 17408, 8, 4, 256
	const linLayers, vHeads, kHeads, dk, dv, convKernel = 24, 32, 16, 128, 128, 4
	elem := int64(4)
	if kv != "f32" {
		elem = 2
	}
	p := real9BProjection{Tokens: tokens, KVBytesPerToken: attnLayers * 2 * kvHeads * headDim * elem}
	convDim := int64(2*kHeads*dk + vHeads*dv)
	p.RecurrentBytes = linLayers * ((convKernel-1)*convDim + vHeads*dk*dv) * 4
	p.StateBytes = tokens*p.KVBytesPerToken + p.RecurrentBytes
	return p
}

// agentDiskReplay runs the disk tier benchmark o asks for.
func agentDiskReplay(ctx context.Context, io stdio, o diskReplayOptions) (*diskReplayResult, error) {
	if o.cacheDir == "" {
		d, err := os.MkdirTemp("", "govinfer-prefix-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		o.cacheDir = d
	}
	open := func(noCache bool, memory int64, disk bool) (*llm.Model, error) {
		opts := llm.Options{Backend: o.backend, NoPrefixCache: noCache, KVCacheType: o.kvType, Quantize: o.quantize, StateMemory: memory,
			PrefixCacheLog: func(f string, a ...any) { fmt.Fprintf(io.err, "govinfer bench: "+f+"\n", a...) }}
		if disk {
			opts.PrefixCacheDir = o.cacheDir
			if !o.restart {
				opts.PrefixCacheHost = o.hostMemory
			}
		}
		return llm.Open(o.dir, opts)
	}
	cold, err := open(true, 0, false)
	if err != nil {
		return nil, err
	}
	defer cold.Close()
	sm := cold.StateMemory()
	res := &diskReplayResult{Model: o.dir, Backend: o.backend.Name(), Threads: o.threads, KVCacheType: strings.ToLower(sm.KVCacheType.String()),
		KVBytesPerToken: sm.PerToken, RecurrentBytesPerPoint: sm.PerSequence, WorstCachedShare: 1}
	params := llm.Params{MaxTokens: o.gen, Temperature: llm.F64(0), IgnoreEOS: true}
	script := agentScript(o.turns)
	var sessions [][]llm.ChatRequest
	nSessions := max(o.sessions, 1)
	for s := range nSessions {
		var reqs []llm.ChatRequest
		for _, msgs := range script.requests {
			msgs = slices.Clone(msgs)
			if s > 0 { // each session its own task after the shared system prompt and tools
				msgs[1].Content = fmt.Sprintf("Session %d. %s", s, msgs[1].Content)
			}
			reqs = append(reqs, llm.ChatRequest{Messages: msgs, Tools: script.tools, Params: params})
		}
		sessions = append(sessions, reqs)
	}
	longest := 0
	for _, reqs := range sessions {
		_, ids, err := cold.ChatPrompt(reqs[len(reqs)-1])
		if err != nil {
			return nil, err
		}
		longest = max(longest, len(ids))
	}
	memory := o.stateMemory
	if o.restart {
		res.Mode = "restart"
		memory = 0
	} else {
		res.Mode = "sessions"
		res.Sessions = nSessions
		if memory == 0 {
			// One request running and about one session's states cached.
			one := sm.PerSequence + int64(longest+o.gen)*sm.PerToken
			memory = 2*one + 2*sm.PerSequence
		}
	}
	mem, err := open(false, memory, false)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	res.StateMemory = mem.StateMemory().String()
	if o.hostMemory > 0 && !o.restart {
		res.HostMemory = engine.FormatBytes(o.hostMemory)
	}
	var tiered *llm.Model
	if !o.restart {
		if tiered, err = open(false, memory, true); err != nil {
			return nil, err
		}
		defer func() { tiered.Close() }()
	}
	var written, read uint64
	var wsec, rsec float64
	var last llm.PrefixDiskUsage
	turns := len(script.requests)
	for k := range turns {
		for s, reqs := range sessions {
			req := reqs[k]
			turn := diskTurn{Session: s + 1, Turn: k + 1}
			if o.restart {
				// A new process: the states come from the directory.
				if tiered, err = open(false, memory, true); err != nil {
					return nil, err
				}
			}
			before := tiered.Stats()
			ttft, u, err := replayChat(ctx, tiered, req)
			if err != nil {
				return nil, fmt.Errorf("turn %d of session %d: %w", k+1, s+1, err)
			}
			after := tiered.Stats()
			if o.restart {
				tiered.Close() // writes what memory holds
				after.PrefixDisk = tiered.Stats().PrefixDisk
			}
			d := after.PrefixDisk
			turn.PromptTokens, turn.CachedTokens, turn.TTFTDisk = u.PromptTokens, u.CachedTokens, ttft
			turn.DiskHitTokens = int(after.PrefixDiskHitTokens - before.PrefixDiskHitTokens)
			turn.HostHitTokens = int(after.PrefixHostHitTokens - before.PrefixHostHitTokens)
			turn.HostBytesWritten = after.PrefixHost.WriteBytes - before.PrefixHost.WriteBytes
			turn.HostBytesRead = after.PrefixHost.ReadBytes - before.PrefixHost.ReadBytes
			turn.BytesWritten, turn.BytesRead = d.WriteBytes-last.WriteBytes, d.ReadBytes-last.ReadBytes
			written += turn.BytesWritten
			read += turn.BytesRead
			wsec += d.WriteSeconds - last.WriteSeconds
			rsec += d.ReadSeconds - last.ReadSeconds
			res.Dropped += d.Dropped - last.Dropped
			res.Corrupt += d.Corrupt - last.Corrupt
			if o.restart {
				last = llm.PrefixDiskUsage{} // the next process counts from zero
			} else {
				last = d
			}
			mt, mu, err := replayChat(ctx, mem, req)
			if err != nil {
				return nil, err
			}
			turn.TTFTMemory, turn.MemoryCachedTokens = mt, mu.CachedTokens
			if o.offTurns == nil && (o.restart || s == 0) || slices.Contains(o.offTurns, k+1) && s == 0 {
				if turn.TTFTCold, _, err = replayChat(ctx, cold, req); err != nil {
					return nil, err
				}
				turn.TTFTDiskOverCold = turn.TTFTDisk / turn.TTFTCold
			}
			if k > 0 {
				res.WorstDiskOverCold = max(res.WorstDiskOverCold, turn.TTFTDiskOverCold)
				res.WorstCachedShare = min(res.WorstCachedShare, float64(turn.CachedTokens)/float64(turn.PromptTokens))
			}
			res.Turns = append(res.Turns, turn)
			fmt.Fprintf(io.err, "session %d turn %2d: prompt %5d, cached %5d (%5d from disk; memory tier alone %5d); TTFT %.2fs with the lower tiers, %.2fs memory alone, %s cold; wrote %s, read %s\n",
				turn.Session, turn.Turn, turn.PromptTokens, turn.CachedTokens, turn.DiskHitTokens, turn.MemoryCachedTokens,
				turn.TTFTDisk, turn.TTFTMemory, fmtSeconds(turn.TTFTCold), engine.FormatBytes(int64(turn.BytesWritten)), engine.FormatBytes(int64(turn.BytesRead)))
			if res.HostMemory != "" {
				fmt.Fprintf(io.err, "    host tier: %5d tokens cached from it; copied in %s, back %s\n", turn.HostHitTokens,
					engine.FormatBytes(int64(turn.HostBytesWritten)), engine.FormatBytes(int64(turn.HostBytesRead)))
			}
		}
	}
	res.WriteBytes, res.ReadBytes, res.WriteSeconds, res.ReadSeconds = written, read, wsec, rsec
	res.Real9B = real9B(res.KVCacheType)
	if wsec > 0 {
		res.WriteMBps = float64(written) / wsec / 1e6
		res.Real9B.WriteSeconds = float64(res.Real9B.StateBytes) / (float64(written) / wsec)
	}
	if rsec > 0 {
		res.ReadMBps = float64(read) / rsec / 1e6
		res.Real9B.ReadSeconds = float64(res.Real9B.StateBytes) / (float64(read) / rsec)
	}
	return res, nil
}

// print writes the result's summary.
func (r *diskReplayResult) print(w stdio) {
	fmt.Fprintf(w.out, "%s, %d turns: worst TTFT with disk / cold %.2f and least share cached %.0f %% after the first turn; wrote %s at %.0f MB/s, read %s at %.0f MB/s; %d writes dropped\n",
		r.Mode, len(r.Turns), r.WorstDiskOverCold, 100*r.WorstCachedShare, engine.FormatBytes(int64(r.WriteBytes)), r.WriteMBps,
		engine.FormatBytes(int64(r.ReadBytes)), r.ReadMBps, r.Dropped)
	p := r.Real9B
	fmt.Fprintf(w.out, "real 9B, %d-token prefix: %s (%s KV per token, %s recurrent): write %.1fs, read %.1fs at these rates\n",
		p.Tokens, engine.FormatBytes(p.StateBytes), engine.FormatBytes(p.KVBytesPerToken), engine.FormatBytes(p.RecurrentBytes), p.WriteSeconds, p.ReadSeconds)
}
