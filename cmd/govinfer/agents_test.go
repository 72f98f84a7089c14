//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/govinfer/govinfer/tokenizer"
)

// agentDir is the coding-agent test project (httpapi/agenttest): the
// pinned agents in its node_modules and their configuration files.
const agentDir = "../../httpapi/agenttest"

// agentsChild, set in the environment, makes TestAgents do its work: the
// parent run re-executes the test binary with it under `unshare -n`.
const agentsChild = "GOVINFER_AGENTS_CHILD"

const (
	agentModel   = "agent-model"                // the served model name every agent asks for
	agentKey     = "sk-govinfer-agenttest-fake" // a fake API key (the server takes any)
	agentPrompt  = "Say hello."                 // the prompt each agent answers
	agentPrompt2 = "Say hello again."           // the second turn's, where an agent runs twice
	agentTimeout = 4 * time.Minute              // hard limit for one agent's run
	childTimeout = 6 * time.Minute              // the whole run in the namespace
	pairMinLCP   = 256                          // tokens two prompts share to be one conversation
	prefillSlack = 64                           // the prefix cache's block: tokens past the LCP it may redo
)

// agentSpec is one coding agent: the program TestAgents runs and how it
// sets up the agent's home and command lines.
type agentSpec struct {
	name  string
	entry string // a file under agentDir the agent needs (node_modules/...)
	// stops serves the checkpoint whose answers end after a token or two
	// (stoppingCheckpoint) rather than make-random's, whose answers never
	// end before the token cap or the end of the context.
	stops bool
	// setup writes the agent's configuration under home and returns the
	// command lines to run one after the other (a later one continues the
	// session of the first) and the environment variables they add.
	setup func(t *testing.T, node, home, url string) (runs [][]string, env []string)
	// minGenerations is the fewest generation requests the runs must make.
	minGenerations int
	// maxModelLen and maxTokens are the server's --max-model-len and
	// --max-tokens (0: none).
	maxModelLen, maxTokens int
	// minLowered is the fewest answers that must run exactly to the end of
	// the context (prompt_tokens + completion_tokens = maxModelLen, finish
	// length): answers asked longer than the room left and lowered to it.
	minLowered int
}

// agentSpecs are the agents TestAgents runs, in order.
var agentSpecs = []agentSpec{
	{
		// Qwen Code talks to /v1/chat/completions. It asks max_tokens 8000,
		// then 64000 once an answer ends at the limit, and the server must
		// lower what passes the room left rather than refuse it (400). Its
		// prompt is some 11,900 tokens: with --max-model-len 13312 and no
		// --max-tokens (whose cap would lower the ask first and hide the
		// room's), every request asks more than the ~1,400 tokens left, the
		// random model's answers run to that end, its second request is
		// the retry with 64000 and three "Output token limit hit" turns
		// follow (each adds some 50 tokens to the prompt).
		name:           "qwen-code",
		entry:          "node_modules/@qwen-code/qwen-code/cli.js",
		setup:          qwenSetup,
		minGenerations: 2,
		maxModelLen:    13312,
		minLowered:     2,
	},
	{
		// Qwen Code again, against the server every agent gets below
		// (--max-tokens 48 --max-model-len 65536): the cap lowers its asks.
		name:           "qwen-code-48",
		entry:          "node_modules/@qwen-code/qwen-code/cli.js",
		setup:          qwenSetup,
		minGenerations: 2,
		maxModelLen:    65536,
		maxTokens:      48,
	},
	{
		// Codex CLI talks to /v1/responses (store: false, reasoning carried
		// back as encrypted_content). It takes an answer cut at the token
		// cap (status incomplete, reason max_output_tokens) for an error,
		// so it gets answers that end; its second turn is a second exec
		// that resumes the session.
		name:  "codex",
		entry: "node_modules/@openai/codex/bin/codex.js",
		stops: true,
		setup: func(t *testing.T, node, home, url string) ([][]string, []string) {
			codexHome := filepath.Join(home, ".codex")
			agentCopyFile(t, filepath.Join(agentDir, "codex", "config.toml"), filepath.Join(codexHome, "config.toml"))
			exec := []string{node, filepath.Join(agentAbs(t), "node_modules/@openai/codex/bin/codex.js"),
				"exec", "--skip-git-repo-check", "--strict-config",
				"-c", fmt.Sprintf("model_providers.govinfer.base_url=%q", url+"/v1")}
			return [][]string{
					append(slices.Clone(exec), agentPrompt),
					append(slices.Clone(exec), "resume", "--last", agentPrompt2),
				},
				[]string{"CODEX_HOME=" + codexHome, "GOVINFER_API_KEY=" + agentKey, "RUST_LOG=warn"}
		},
		minGenerations: 2,
		maxModelLen:    65536,
		maxTokens:      48,
	},
	{
		// Claude Code talks to /v1/messages?beta=true. It takes an answer
		// cut at the token cap (stop_reason max_tokens) for an error once
		// its own retries are spent, so it gets answers that end; an
		// answer with no visible text makes it ask again, and its second
		// run continues the session (--continue).
		name:  "claude-code",
		entry: "node_modules/.bin/claude",
		stops: true,
		setup: func(t *testing.T, node, home, url string) ([][]string, []string) {
			agentCopyFile(t, filepath.Join(agentDir, "claude", "claude.json"), filepath.Join(home, ".claude.json"))
			agentCopyFile(t, filepath.Join(agentDir, "claude", "settings.json"), filepath.Join(home, ".claude", "settings.json"))
			claude := filepath.Join(agentAbs(t), "node_modules/.bin/claude")
			return [][]string{
					{claude, "-p", agentPrompt},
					{claude, "-p", "--continue", agentPrompt2},
				},
				[]string{
					"ANTHROPIC_BASE_URL=" + url,
					"ANTHROPIC_API_KEY=" + agentKey,
					"ANTHROPIC_MODEL=" + agentModel,
					"ANTHROPIC_SMALL_FAST_MODEL=" + agentModel,
					"ANTHROPIC_DEFAULT_HAIKU_MODEL=" + agentModel,
					"ANTHROPIC_DEFAULT_SONNET_MODEL=" + agentModel,
					"ANTHROPIC_DEFAULT_OPUS_MODEL=" + agentModel,
					"CLAUDE_CODE_MAX_RETRIES=0",
					"DISABLE_TELEMETRY=1",
					"DISABLE_ERROR_REPORTING=1",
					"DISABLE_AUTOUPDATER=1",
					"DISABLE_UPDATES=1",
					"DISABLE_GROWTHBOOK=1",
					"DISABLE_INSTALLATION_CHECKS=1",
					"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
					"DISABLE_NON_ESSENTIAL_MODEL_CALLS=1",
					"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
					"CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1",
					"CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1",
				}
		},
		minGenerations: 2,
		maxModelLen:    65536,
		maxTokens:      48,
	},
}

// qwenSetup configures Qwen Code (`qwen -p`) for the server at url.
func qwenSetup(t *testing.T, node, home, url string) ([][]string, []string) {
	agentCopyFile(t, filepath.Join(agentDir, "qwen", "settings.json"), filepath.Join(home, ".qwen", "settings.json"))
	argv := []string{node, filepath.Join(agentAbs(t), "node_modules/@qwen-code/qwen-code/cli.js"), "-p", agentPrompt}
	if rec := os.Getenv("GOVINFER_AGENTS_RECORD"); rec != "" {
		argv = append(argv, "--openai-logging", "--openai-logging-dir", filepath.Join(rec, "qwen-code"))
	}
	return [][]string{argv}, []string{
		"OPENAI_BASE_URL=" + url + "/v1",
		"OPENAI_API_KEY=" + agentKey,
		"OPENAI_MODEL=" + agentModel,
	}
}

// TestAgents runs three real coding agents, pinned in httpapi/agenttest,
// against govinfer serve on a random checkpoint made by make-random: Qwen
// Code (`qwen -p`, chat completions), Codex CLI (`codex exec`, the
// Responses API) and Claude Code (`claude -p`, the Messages API), each
// against a server of its own. Each run of an agent answers one prompt and
// must exit 0 (Codex and Claude Code run twice, the second run continuing
// the session), and every request must be answered 2xx (the server's
// /metrics and request log tell). Qwen Code's answers must have been
// lowered to the room their prompts left (see agentSpecs). For the second
// request of each agent's conversation it checks that the prefix cache
// resumed the first: the tokens prefilled are at most those past the two
// prompts' longest common prefix (tokenized from --log-prompts), plus one
// cache block. A table of the figures closes the log.
//
// The server and the agents run in a network namespace of their own with
// only loopback (the test re-executes itself under `unshare -n`), so
// nothing can reach outside addresses; the agents' telemetry, updates and
// the like are off besides (see httpapi/agenttest). It skips when node, the
// project's node_modules (npm ci in httpapi/agenttest), unshare or ip are
// missing, when unshare -n is not permitted (it needs root or
// CAP_SYS_ADMIN), and in -short mode; CI has them all. It takes some 25s.
// GOVINFER_AGENTS_RECORD=DIR writes the request bodies Qwen Code sends
// under DIR.
func TestAgents(t *testing.T) {
	if os.Getenv(agentsChild) == "1" {
		runAgents(t)
		return
	}
	if testing.Short() {
		t.Skip("-short: the coding-agent test runs three agents against three servers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the coding-agent test needs node 20 or later (CI installs it)")
	}
	for _, a := range agentSpecs {
		if _, err := os.Stat(filepath.Join(agentDir, a.entry)); err != nil {
			t.Skipf("%s/%s is missing: run npm ci in %s (CI does)", agentDir, a.entry, agentDir)
		}
	}
	for _, tool := range []string{"unshare", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the coding-agent test runs in a network namespace of its own (util-linux, iproute2)", tool)
		}
	}
	if out, err := exec.Command("unshare", "-n", "true").CombinedOutput(); err != nil {
		t.Skipf("unshare -n is not permitted here (needs root or CAP_SYS_ADMIN): %v: %s", err, bytes.TrimSpace(out))
	}

	ctx, cancel := context.WithTimeout(context.Background(), childTimeout+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-n", os.Args[0],
		"-test.run=^TestAgents$", "-test.v", "-test.count=1", "-test.timeout="+childTimeout.String())
	cmd.Env = append(os.Environ(), agentsChild+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("the run in its own network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("unshare -n %s -test.run=^TestAgents$: %v", os.Args[0], err)
	}
	if bytes.Contains(out, []byte("--- SKIP: TestAgents")) {
		t.Skip("skipped in the network namespace (see above)")
	}
}

// agentRunResult is what one agent's run came to, for the closing table.
type agentRunResult struct {
	name            string
	exit            int
	secs            float64
	requests, ok2xx int
	generations     int
	lowered         int    // answers that ran exactly to the end of the context
	pair            string // "i,j": the conversation's first two requests (1-based)
	prompt, cached  int
	lcp, target     int
	ttftMS          float64
	pairFound       bool
}

// runAgents is TestAgents inside the network namespace: it brings
// loopback up, makes the checkpoints and runs each agent against a server
// of its own.
func runAgents(t *testing.T) {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny", "--seed", "1",
		"--tokenizer", "../../testdata/tokenizer/qwen3", "--chat-template", "../../testdata/chat/chat_template.jinja"); code != exitOK {
		t.Fatalf("make-random: exit %d: %s", code, errOut)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	stopDir := stoppingCheckpoint(t, dir, tok)

	var results []agentRunResult
	for _, a := range agentSpecs {
		t.Run(a.name, func(t *testing.T) {
			model := dir
			if a.stops {
				model = stopDir
			}
			results = append(results, runAgent(t, a, node, model, tok))
		})
	}

	t.Logf("%-12s %4s %6s %4s %4s %4s %5s %5s %7s %7s %7s %7s %7s %8s",
		"agent", "exit", "secs", "reqs", "2xx", "gens", "lowrd", "pair", "prompt", "cached", "prefill", "lcp", "target", "ttft_ms")
	for _, r := range results {
		row := fmt.Sprintf("%-12s %4d %6.1f %4d %4d %4d %5d", r.name, r.exit, r.secs, r.requests, r.ok2xx, r.generations, r.lowered)
		if r.pairFound {
			row += fmt.Sprintf(" %5s %7d %7d %7d %7d %7d %8.1f", r.pair, r.prompt, r.cached, r.prompt-r.cached, r.lcp, r.target, r.ttftMS)
		} else {
			row += fmt.Sprintf(" %5s", "-")
		}
		t.Log(row)
	}
}

// stoppingCheckpoint copies the checkpoint in dir to one whose answers
// end: its generation_config.json adds every odd ordinary token id to
// eos_token_id, so that generation stops at the first such token sampled
// (half of the answers are empty, and almost none reaches a cap of 48
// tokens). A random model otherwise never samples its end-of-turn token,
// and Codex and Claude Code take an answer cut at the token cap for an
// error.
func stoppingCheckpoint(t *testing.T, dir string, tok *tokenizer.Tokenizer) string {
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		agentCopyFile(t, filepath.Join(dir, e.Name()), filepath.Join(out, e.Name()))
	}
	path := filepath.Join(out, "generation_config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	eos := tok.EOSTokens()
	for id := 1; id < tok.VocabSize(); id += 2 {
		if !tok.IsAdded(id) {
			eos = append(eos, id)
		}
	}
	g["eos_token_id"] = eos
	if b, err = json.Marshal(g); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// runAgent serves model, runs one agent's command lines against it and
// checks the agent's requests in the server's log and metrics.
func runAgent(t *testing.T, a agentSpec, node, model string, tok *tokenizer.Tokenizer) agentRunResult {
	res := agentRunResult{name: a.name}
	args := []string{"--model", model, "--host", "127.0.0.1", "--port", "0", "--served-model-name", agentModel,
		"--max-model-len", strconv.Itoa(a.maxModelLen), "--log-prompts"}
	if a.maxTokens > 0 {
		args = append(args, "--max-tokens", strconv.Itoa(a.maxTokens))
	}
	t.Logf("govinfer serve %s", strings.Join(args, " "))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, stdio{in: strings.NewReader(""), out: &out, err: &errOut}, args)
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("serve exited %d", code)
		}
	}()
	var url string
	for deadline := time.Now().Add(60 * time.Second); url == ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start; stderr: %s", errOut.String())
		}
		if i := strings.Index(out.String(), "http://"); i >= 0 {
			url = strings.Fields(out.String()[i:])[0]
		}
	}

	home, work := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("# hello\n\nA scratch directory for a coding agent.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runs, env := a.setup(t, node, home, url)
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	// A clean environment: the developer's own keys and endpoints must not
	// leak in.
	env = append([]string{"PATH=" + path, "HOME=" + home, "TERM=dumb", "NO_COLOR=1", "CI=1", "LANG=C.UTF-8"}, env...)

	m := &agentMetrics{url: url}
	before := m.codes(t)
	for _, argv := range runs {
		secs, exit := runAgentCommand(t, argv, env, work)
		res.secs += secs
		if exit != 0 {
			res.exit = exit
		}
		m.settle(t, &errOut)
	}
	after := m.codes(t)

	lines := parseAgentServerLog(t, errOut.String())
	for _, rj := range lines.rejected {
		t.Errorf("rejected %s %s: status %d: %s", rj.method, rj.path, rj.status, rj.reason)
	}
	// The codes in /metrics cover the requests the log has no line for
	// (GETs answered 200, 5xx other than 503); the scrapes of m itself are
	// taken off.
	codes := map[int]int{}
	for c, n := range after {
		codes[c] = n - before[c]
	}
	codes[200] -= m.scrapes - 1
	var keys []int
	for c, n := range codes {
		if n != 0 {
			keys = append(keys, c)
		}
	}
	sort.Ints(keys)
	var parts []string
	for _, c := range keys {
		n := codes[c]
		parts = append(parts, fmt.Sprintf("%d×%d", n, c))
		res.requests += n
		if c >= 200 && c < 300 {
			res.ok2xx += n
		} else {
			t.Errorf("%d requests answered %d", n, c)
		}
	}
	res.generations = len(lines.done)
	t.Logf("%s: %d requests (%s), %d generations logged", a.name, res.requests, strings.Join(parts, ", "), res.generations)

	ids := make([][]int, len(lines.done))
	for i, d := range lines.done {
		if d.status < 200 || d.status >= 300 {
			t.Errorf("%s: status %d", d.id, d.status)
		}
		ids[i] = tok.Encode(d.prompt)
		if len(ids[i]) != d.promptTokens {
			t.Errorf("%s: the logged prompt encodes to %d tokens, the log says prompt_tokens=%d", d.id, len(ids[i]), d.promptTokens)
		}
		t.Logf("  #%d %s prompt_tokens=%d cached_tokens=%d completion_tokens=%d ttft_ms=%.1f finish=%s",
			i+1, d.id, d.promptTokens, d.cachedTokens, d.completionTokens, d.ttftMS, d.finish)
		if d.finish == "length" && d.promptTokens+d.completionTokens == a.maxModelLen {
			res.lowered++
		}
	}
	if res.generations < a.minGenerations {
		t.Errorf("%s made %d generation requests, want at least %d", a.name, res.generations, a.minGenerations)
	}
	if res.lowered < a.minLowered {
		t.Errorf("%d answers ran to the end of the %d-token context (lowered to the room their prompt left), want at least %d",
			res.lowered, a.maxModelLen, a.minLowered)
	}

	// The first two requests of the agent's conversation: not always the
	// first two requests it made, as an agent may first ask something
	// unrelated (a title, a quota or token count) with a prompt of its own.
	// They are the first two whose prompts share a long prefix (the
	// agent's tools and system prompt).
	i, j, ok := agentConversationPair(ids)
	if !ok {
		if res.generations >= 2 {
			t.Errorf("no two of the %d requests share %d prompt tokens: no conversation to check the prefix cache on", res.generations, pairMinLCP)
		}
		return res
	}
	d := lines.done[j]
	res.pairFound = true
	res.pair = fmt.Sprintf("%d,%d", i+1, j+1)
	res.prompt, res.cached, res.ttftMS = d.promptTokens, d.cachedTokens, d.ttftMS
	res.lcp = agentLCP(ids[i], ids[j])
	res.target = d.promptTokens - res.lcp + prefillSlack
	if prefilled := d.promptTokens - d.cachedTokens; prefilled > res.target {
		t.Errorf("request #%d prefilled %d tokens (prompt %d, cached %d); its prompt shares %d tokens with request #%d, so at most %d should be",
			j+1, prefilled, d.promptTokens, d.cachedTokens, res.lcp, i+1, res.target)
	}
	return res
}

// runAgentCommand runs one command line of an agent in work with env,
// within agentTimeout (and 30s before the test's deadline), and returns
// how long it took and its exit status.
func runAgentCommand(t *testing.T, argv, env []string, work string) (float64, int) {
	deadline := time.Now().Add(agentTimeout)
	if d, ok := t.Deadline(); ok && d.Add(-30*time.Second).Before(deadline) {
		deadline = d.Add(-30 * time.Second) // killed here rather than orphaned by the test's own timeout
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = work
	cmd.Env = env
	cmd.Stdin = strings.NewReader("")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The agents start helpers of their own (shells, ripgrep): a timeout
	// kills the whole process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	secs := time.Since(start).Seconds()
	exit := -1
	if cmd.ProcessState != nil {
		exit = cmd.ProcessState.ExitCode()
	}
	name := filepath.Base(argv[0])
	if len(argv) > 1 && name == "node" {
		name = filepath.Base(argv[1])
	}
	if err != nil || exit != 0 {
		what := fmt.Sprintf("exit %d", exit)
		if ctx.Err() != nil {
			what = fmt.Sprintf("killed after %.0fs", secs)
		}
		t.Errorf("%s: %s (%v)\nstdout tail:\n%s\nstderr tail:\n%s", strings.Join(argv, " "), what, err,
			agentTail(stdout.String(), 4000), agentTail(stderr.String(), 4000))
	} else {
		t.Logf("%s %s: exit 0 in %.1fs; stdout tail: %q", name, strings.Join(argv[len(argv)-1:], " "), secs, agentTail(stdout.String(), 200))
	}
	return secs, exit
}

// agentConversationPair returns the first two prompts (by the later one's
// position) that share at least pairMinLCP tokens and half the shorter one.
func agentConversationPair(ids [][]int) (int, int, bool) {
	for j := 1; j < len(ids); j++ {
		for i := 0; i < j; i++ {
			l := agentLCP(ids[i], ids[j])
			if l >= pairMinLCP && 2*l >= min(len(ids[i]), len(ids[j])) {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// agentLCP is the length of the longest common prefix of a and b.
func agentLCP(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// agentDoneLine is a request log line of a finished generation.
type agentDoneLine struct {
	id                                           string
	status                                       int
	promptTokens, cachedTokens, completionTokens int
	ttftMS                                       float64
	finish, prompt                               string
}

// agentRejectedLine is a request log line of a refused request.
type agentRejectedLine struct {
	method, path string
	status       int
	reason       string
}

// agentServerLog is the request lines of a stretch of the server's log.
type agentServerLog struct {
	done     []agentDoneLine
	rejected []agentRejectedLine
}

var (
	agentDoneRE     = regexp.MustCompile(`^\S+ (\S+) status=(\d+) prompt_tokens=(\d+) cached_tokens=(\d+) completion_tokens=(\d+) ttft_ms=([0-9.]+) .*? finish=(\S*) prompt=(".*")$`)
	agentRejectedRE = regexp.MustCompile(`^\S+ rejected (\S+) (\S+) status=(\d+) reason=(.*)$`)
)

// parseAgentServerLog reads the request lines of the server's log.
func parseAgentServerLog(t *testing.T, s string) agentServerLog {
	var l agentServerLog
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := agentRejectedRE.FindStringSubmatch(line); m != nil {
			var reason string
			if json.Unmarshal([]byte(m[4]), &reason) != nil {
				reason = m[4]
			}
			l.rejected = append(l.rejected, agentRejectedLine{m[1], m[2], agentAtoi(m[3]), reason})
			continue
		}
		m := agentDoneRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		d := agentDoneLine{id: m[1], status: agentAtoi(m[2]), promptTokens: agentAtoi(m[3]), cachedTokens: agentAtoi(m[4]), completionTokens: agentAtoi(m[5])}
		d.ttftMS, _ = strconv.ParseFloat(m[6], 64)
		d.finish = m[7]
		if err := json.Unmarshal([]byte(m[8]), &d.prompt); err != nil {
			t.Errorf("%s: the logged prompt does not parse: %v", d.id, err)
		}
		l.done = append(l.done, d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return l
}

// agentAtoi is strconv.Atoi for strings the regexps made digits.
func agentAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// agentMetrics reads the server's /metrics, counting its own scrapes
// (each is an HTTP 200 the next scrape counts).
type agentMetrics struct {
	url     string
	scrapes int
}

var (
	agentCodeRE  = regexp.MustCompile(`(?m)^govinfer:http_responses_total\{code="(\d+)"\} (\d+)`)
	agentGaugeRE = regexp.MustCompile(`(?m)^(vllm:num_requests_running|vllm:num_requests_waiting|govinfer:open_sequences) (\S+)`)
)

func (m *agentMetrics) get(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(m.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m.scrapes++
	return string(b)
}

// codes returns the HTTP responses the server has given, by status.
func (m *agentMetrics) codes(t *testing.T) map[int]int {
	c := map[int]int{}
	for _, s := range agentCodeRE.FindAllStringSubmatch(m.get(t), -1) {
		c[agentAtoi(s[1])] = agentAtoi(s[2])
	}
	return c
}

// settle waits until no request runs, waits or holds a sequence, and the
// log has stopped growing: a streamed answer's log line comes after its
// client may have read the end and exited.
func (m *agentMetrics) settle(t *testing.T, log *syncBuffer) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		for _, g := range agentGaugeRE.FindAllStringSubmatch(m.get(t), -1) {
			if v, _ := strconv.ParseFloat(g[2], 64); v != 0 {
				busy = true
			}
		}
		n := len(log.String())
		time.Sleep(200 * time.Millisecond)
		if !busy && len(log.String()) == n {
			return
		}
	}
	t.Errorf("the server still had requests running 30s after the agent exited")
}

// agentAbs returns agentDir as an absolute path (the agents run in a
// directory of their own).
func agentAbs(t *testing.T) string {
	p, err := filepath.Abs(agentDir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// agentCopyFile copies src to dst, making dst's directory.
func agentCopyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// agentTail returns the last n bytes of s.
func agentTail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
