package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/llm"
	"github.com/govinfer/govinfer/outparse"
)

// agentOptions configures "govinfer bench --agent-replay".
type agentOptions struct {
	dir      string
	backend  compute.Backend
	threads  int
	gen      int    // tokens generated per turn
	turns    int    // turns replayed
	offTurns []int  // turns also run without the prefix cache (nil: all)
	kvType   string // --kv-cache-dtype
	quantize string
}

// agentTurn is one turn of the replay.
type agentTurn struct {
	Turn         int `json:"turn"`
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// PrefilledTokens = PromptTokens - CachedTokens, computed this turn.
	PrefilledTokens int `json:"prefilled_tokens"`
	// NewTokens are the prompt's tokens after the longest prefix it shares
	// with an earlier turn's prompt: the previous answer as the template
	// renders it, and the new messages. PrefillBound is NewTokens plus one
	// chunk, the target for PrefilledTokens.
	NewTokens    int `json:"new_tokens"`
	PrefillBound int `json:"prefill_bound"`
	// Time to first token with the prefix cache, without it, and of a
	// fresh prompt made of just the tokens this turn prefilled (on an
	// empty cache; the turn itself when it reused nothing); TTFTRatio =
	// TTFTCache / TTFTFresh (target <= 1.2).
	TTFTCache   float64 `json:"ttft_cache_s"`
	TTFTNoCache float64 `json:"ttft_no_cache_s,omitempty"`
	TTFTFresh   float64 `json:"ttft_fresh_s"`
	TTFTRatio   float64 `json:"ttft_cache_over_fresh"`
}

// agentResult is what "govinfer bench --agent-replay --json" prints.
type agentResult struct {
	Model        string `json:"model"`
	Backend      string `json:"backend"`
	Threads      int    `json:"threads"`
	GenPerTurn   int    `json:"gen_tokens_per_turn"`
	KVCacheType  string `json:"kv_cache_type"`
	StateMemory  string `json:"state_memory"`
	SystemTokens int    `json:"system_prompt_tokens"`
	// The prefix cache's memory: the recurrent state of one kept point and
	// the KV of one 64-token block (shared by every point of a prefix);
	// what the cache held after the replay.
	RecurrentBytesPerPoint int64       `json:"recurrent_bytes_per_point"`
	KVBytesPerBlock        int64       `json:"kv_bytes_per_block"`
	CacheBytesAfter        int64       `json:"cache_bytes_after"`
	CachedPointsAfter      int         `json:"cached_points_after"`
	Turns                  []agentTurn `json:"turns"`
	// A prompt shorter than vLLM's 528-token blocks, sent twice: the second
	// resumes before its last partial chunk.
	ShortPromptTokens       int `json:"short_prompt_tokens"`
	ShortPromptCachedSecond int `json:"short_prompt_cached_second"`
	// Sums over the turns.
	PromptTokens            int     `json:"total_prompt_tokens"`
	PrefilledTokens         int     `json:"total_prefilled_tokens"`
	TTFTCacheSeconds        float64 `json:"total_ttft_cache_s"`
	TTFTNoCacheSeconds      float64 `json:"total_ttft_no_cache_s"`
	NoCacheTurns            int     `json:"no_cache_turns"`
	TargetPrefillWithin     bool    `json:"target_prefill_within_bound"`
	TargetTTFTWithin        bool    `json:"target_ttft_within_1_2x_fresh"`
	TargetShortPromptHits   bool    `json:"target_short_prompt_hits"`
	WorstTTFTRatio          float64 `json:"worst_ttft_cache_over_fresh"`
	TTFTRatioExcludingFirst float64 `json:"worst_ttft_cache_over_fresh_after_turn_1"`
}

// agentReplay replays a scripted agent conversation turn by turn through
// llm, with the prefix cache and without, and measures each turn.
func agentReplay(ctx context.Context, io stdio, o agentOptions) (*agentResult, error) {
	open := func(noCache bool) (*llm.Model, error) {
		return llm.Open(o.dir, llm.Options{Backend: o.backend, NoPrefixCache: noCache, KVCacheType: o.kvType, Quantize: o.quantize})
	}
	warm, err := open(false)
	if err != nil {
		return nil, err
	}
	defer warm.Close()
	cold, err := open(true)
	if err != nil {
		return nil, err
	}
	defer cold.Close()
	sm := warm.StateMemory()
	res := &agentResult{Model: o.dir, Backend: o.backend.Name(), Threads: o.threads, GenPerTurn: o.gen,
		KVCacheType: strings.ToLower(sm.KVCacheType.String()), StateMemory: sm.String(),
		RecurrentBytesPerPoint: sm.PerSequence, KVBytesPerBlock: engine.PrefixBlock * sm.PerToken,
		TargetPrefillWithin: true, TargetTTFTWithin: true}
	script := agentScript(o.turns)
	var earlier [][]int
	params := llm.Params{MaxTokens: o.gen, Temperature: llm.F64(0), IgnoreEOS: true}
	for k, msgs := range script.requests {
		req := llm.ChatRequest{Messages: msgs, Tools: script.tools, Params: params}
		_, ids, err := warm.ChatPrompt(req)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", k+1, err)
		}
		if turns := outparse.TurnPositions(warm.Tokenizer(), ids); k == 0 && len(turns) > 0 {
			res.SystemTokens = turns[0] // where the first user message starts
		}
		turn := agentTurn{Turn: k + 1, PromptTokens: len(ids)}
		shared := 0
		for _, e := range earlier {
			shared = max(shared, commonPrefix(e, ids))
		}
		earlier = append(earlier, ids)
		turn.NewTokens = len(ids) - shared
		turn.PrefillBound = turn.NewTokens + engine.PrefixBlock
		ttft, u, err := replayChat(ctx, warm, req)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", k+1, err)
		}
		turn.TTFTCache, turn.CachedTokens = ttft, u.CachedTokens
		turn.PrefilledTokens = u.PromptTokens - u.CachedTokens
		if o.offTurns == nil || slices.Contains(o.offTurns, k+1) {
			if turn.TTFTNoCache, _, err = replayChat(ctx, cold, req); err != nil {
				return nil, fmt.Errorf("turn %d without the cache: %w", k+1, err)
			}
			res.NoCacheTurns++
			res.TTFTNoCacheSeconds += turn.TTFTNoCache
		}
		if turn.CachedTokens == 0 {
			turn.TTFTFresh = turn.TTFTCache // nothing reused: the turn is a fresh prompt
		} else if turn.TTFTFresh, err = runFresh(ctx, cold, ids[turn.CachedTokens:], o.gen); err != nil {
			return nil, fmt.Errorf("turn %d fresh prompt: %w", k+1, err)
		}
		turn.TTFTRatio = turn.TTFTCache / turn.TTFTFresh
		res.Turns = append(res.Turns, turn)
		res.PromptTokens += turn.PromptTokens
		res.PrefilledTokens += turn.PrefilledTokens
		res.TTFTCacheSeconds += turn.TTFTCache
		res.TargetPrefillWithin = res.TargetPrefillWithin && turn.PrefilledTokens <= turn.PrefillBound
		res.TargetTTFTWithin = res.TargetTTFTWithin && turn.TTFTRatio <= 1.2
		res.WorstTTFTRatio = max(res.WorstTTFTRatio, turn.TTFTRatio)
		if k > 0 {
			res.TTFTRatioExcludingFirst = max(res.TTFTRatioExcludingFirst, turn.TTFTRatio)
		}
		fmt.Fprintf(io.err, "turn %2d: prompt %5d, cached %5d, prefilled %4d (bound %4d), TTFT %.2fs cached, %.2fs fresh %d tokens, %s without the cache\n",
			turn.Turn, turn.PromptTokens, turn.CachedTokens, turn.PrefilledTokens, turn.PrefillBound, turn.TTFTCache,
			turn.TTFTFresh, turn.PrefilledTokens, fmtSeconds(turn.TTFTNoCache))
	}
	// A short prompt seen before hits all but its last partial chunk.
	short := script.short
	res.ShortPromptTokens = len(short)
	for range 2 {
		st, err := warm.Complete(ctx, llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: short}}, Params: params})
		if err != nil {
			return nil, err
		}
		for range st.Events() {
		}
		res.ShortPromptCachedSecond = st.Usage().CachedTokens
	}
	res.TargetShortPromptHits = res.ShortPromptCachedSecond == (len(short)-1)/engine.PrefixBlock*engine.PrefixBlock
	su := warm.Engine().StateUsage()
	res.CacheBytesAfter, res.CachedPointsAfter = su.Cached, su.CachedPoints
	return res, nil
}

func fmtSeconds(s float64) string {
	if s == 0 {
		return "not run"
	}
	return fmt.Sprintf("%.2fs", s)
}

// replayChat runs a chat request to its end and returns its time to first
// token and usage.
func replayChat(ctx context.Context, m *llm.Model, req llm.ChatRequest) (float64, llm.Usage, error) {
	st, err := m.Chat(ctx, req)
	if err != nil {
		return 0, llm.Usage{}, err
	}
	defer st.Close()
	for ev := range st.Events() {
		if ev.Kind == llm.KindFinish && ev.Err != nil {
			return 0, llm.Usage{}, ev.Err
		}
	}
	return st.TimeToFirstToken().Seconds(), st.Usage(), nil
}

// runFresh returns the time to first token of a completion of ids on m.
func runFresh(ctx context.Context, m *llm.Model, ids []int, gen int) (float64, error) {
	st, err := m.Complete(ctx, llm.CompletionRequest{Prompts: []llm.Prompt{{IDs: ids}},
		Params: llm.Params{MaxTokens: gen, Temperature: llm.F64(0), IgnoreEOS: true}})
	if err != nil {
		return 0, err
	}
	defer st.Close()
	for range st.Events() {
	}
	return st.TimeToFirstToken().Seconds(), nil
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// agentConversation is the replayed conversation: the messages of each
// turn's request, the tools, and a short prompt.
type agentConversation struct {
	tools    []llm.Tool
	requests [][]llm.Message
	short    []int
}

// agentScript returns a coding agent's conversation of the given number of
// turns: a system prompt of about 2k tokens with six tool definitions, a
// user task, and per turn an assistant message with reasoning and a tool
// call followed by the tool's result; every fourth turn the user adds a
// message (after which the template drops earlier reasoning).
func agentScript(turns int) agentConversation {
	var sys strings.Builder
	sys.WriteString("You are a coding agent working in a Go repository. Follow these rules.\n")
	rules := []string{
		"Read the code before you change it; never guess at an API.",
		"Keep every change small and explain it in one sentence.",
		"Run the tests of the packages you touch after every edit.",
		"Prefer the standard library; add no dependency without asking.",
		"Errors are wrapped with context and never ignored.",
		"Exported names have doc comments that start with the name.",
		"Never print secrets, tokens or credentials found in files.",
		"When a test fails, read its output completely before acting.",
		"Do not reformat code you do not otherwise change.",
		"Ask the user when the task is ambiguous instead of guessing.",
	}
	for rep := range 5 {
		for i, r := range rules {
			fmt.Fprintf(&sys, "%d.%d %s Check rule %d again before answering.\n", rep+1, i+1, r, i+1)
		}
	}
	tool := func(name, desc, params string) llm.Tool {
		return llm.Tool{Name: name, Description: desc, Parameters: json.RawMessage(params)}
	}
	tools := []llm.Tool{
		tool("read_file", "Read a file of the repository, optionally a range of its lines. Returns the lines with their numbers.",
			`{"type":"object","properties":{"path":{"type":"string","description":"path relative to the repository root"},"start_line":{"type":"integer","description":"first line, 1-based"},"end_line":{"type":"integer","description":"last line, inclusive"}},"required":["path"]}`),
		tool("list_dir", "List the entries of a directory of the repository, directories first, with sizes.",
			`{"type":"object","properties":{"path":{"type":"string","description":"directory relative to the repository root"}},"required":["path"]}`),
		tool("search", "Search the repository for a regular expression and return matching lines with their files and line numbers.",
			`{"type":"object","properties":{"pattern":{"type":"string","description":"RE2 regular expression"},"path":{"type":"string","description":"directory to search, default the root"},"max_results":{"type":"integer"}},"required":["pattern"]}`),
		tool("edit_file", "Replace an exact, unique piece of text in a file with new text. Fails when the old text is missing or not unique.",
			`{"type":"object","properties":{"path":{"type":"string"},"old_text":{"type":"string","description":"text to replace, exactly as in the file"},"new_text":{"type":"string"}},"required":["path","old_text","new_text"]}`),
		tool("run_tests", "Run go test on packages and return the output, truncated to the last 200 lines.",
			`{"type":"object","properties":{"packages":{"type":"array","items":{"type":"string"},"description":"package patterns such as ./engine/..."},"run":{"type":"string","description":"-run regular expression"}},"required":["packages"]}`),
		tool("run_command", "Run a shell command in the repository root with a time limit and return its output and exit status.",
			`{"type":"object","properties":{"command":{"type":"string"},"timeout_seconds":{"type":"integer"}},"required":["command"]}`),
	}
	msgs := []llm.Message{
		{Role: "system", Content: sys.String()},
		{Role: "user", Content: "The engine sometimes prefills a prompt twice when two requests share a system prompt. Find where prefill is scheduled and make the second request reuse the first one's work. Keep the change small."},
	}
	calls := []struct{ name, args, thought string }{
		{"list_dir", `{"path": "engine"}`, "I should look at the engine package first to see its files."},
		{"read_file", `{"path": "engine/engine.go", "start_line": 1, "end_line": 80}`, "The scheduler is probably in engine.go; read its top."},
		{"search", `{"pattern": "func \\(e \\*Engine\\) admit"}`, "Admission decides when a request starts; find it."},
		{"read_file", `{"path": "engine/engine.go", "start_line": 380, "end_line": 460}`, "Read admit and the step that feeds prompt chunks."},
		{"search", `{"pattern": "PrefixCache", "path": "engine"}`, "Check whether a prefix cache exists already."},
		{"read_file", `{"path": "engine/prefixcache.go", "start_line": 1, "end_line": 60}`, "Read how the prefix cache stores points."},
		{"edit_file", `{"path": "engine/engine.go", "old_text": "if e.awaitsPrefix(s, run) {", "new_text": "if e.cache != nil && e.awaitsPrefix(s, run) {"}`, "Guard the wait so it only applies with the cache on."},
		{"run_tests", `{"packages": ["./engine/..."], "run": "Prefix"}`, "Run the prefix cache tests of the engine."},
		{"run_tests", `{"packages": ["./engine/...", "./llm/..."]}`, "Run the whole engine and llm tests."},
		{"run_command", `{"command": "go vet ./... && gofmt -l .", "timeout_seconds": 120}`, "Vet and format check before reporting."},
	}
	var requests [][]llm.Message
	for k := 0; k < turns; k++ {
		requests = append(requests, slices.Clone(msgs))
		c := calls[k%len(calls)]
		id := fmt.Sprintf("call_%02d", k)
		msgs = append(msgs,
			llm.Message{Role: "assistant", Reasoning: c.thought + " " + strings.Repeat("Let me be careful about the exact lines. ", 2+k%3),
				ToolCalls: []llm.ToolCall{{ID: id, Name: c.name, Arguments: c.args}}},
			llm.Message{Role: "tool", ToolCallID: id, Content: toolOutput(k)})
		if k%4 == 3 {
			msgs = append(msgs, llm.Message{Role: "user", Content: fmt.Sprintf("Good progress. Also keep the metrics right (step %d).", k+1)})
		}
	}
	short := make([]int, 300)
	for i := range short {
		short[i] = 1000 + 37*i%5000
	}
	return agentConversation{tools: tools, requests: requests, short: short}
}

// toolOutput returns the scripted result of turn k's tool call: a listing
// of Go source lines of a few hundred tokens.
func toolOutput(k int) string {
	var b strings.Builder
	for i := range 6 + 2*(k%3) {
		fmt.Fprintf(&b, "%4d\tfunc step%d_%d(r *running, budget int) int { return min(budget, r.fed+%d) } // chunk %d\n", 100+i, k, i, 64*(i+1), i)
	}
	return b.String()
}
