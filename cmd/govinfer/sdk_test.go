package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdkDir is the JavaScript SDK test project (httpapi/sdktest).
const sdkDir = "../../httpapi/sdktest"

// sdkResult is one check of sdk.test.mjs.
type sdkResult struct {
	SDK    string `json:"sdk"`
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	MS     int    `json:"ms"`
	Detail string `json:"detail"`
	Error  string `json:"error"`
}

// sdkScript is a script of httpapi/sdktest with the fewest checks it must
// run.
type sdkScript struct {
	file      string
	minChecks int
}

// sdkScripts are the scripts TestSDKs runs.
var sdkScripts = []sdkScript{
	{"sdk.test.mjs", 25},
	{"responses.test.mjs", 6},
	{"messages.test.mjs", 6},
}

// TestSDKs serves a random checkpoint made by make-random with govinfer
// serve and runs the scripts of httpapi/sdktest against it: sdk.test.mjs
// drives the OpenAI SDK (create, stream, parse, runTools, errors, aborts),
// the Vercel AI SDK (generateText, streamText, tools, a multi-step loop,
// generateObject, abort) and LangChain (invoke, stream, bindTools,
// withStructuredOutput, reasoning_content); responses.test.mjs the OpenAI
// SDK's Responses calls and the OpenAI Agents SDK; messages.test.mjs
// Anthropic's SDK on the Messages API. It skips only when node or the project's
// node_modules (npm ci in httpapi/sdktest) is missing; CI installs both.
// GOVINFER_SDK_RECORD, when set, is passed on as GOVINFER_RECORD (see the
// script) to write the requests the SDKs send.
func TestSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the SDK end-to-end test needs node 20 or later (CI installs it)")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules")); err != nil {
		t.Skipf("%s/node_modules is missing: run npm ci there (CI does)", sdkDir)
	}
	dir := t.TempDir()
	if code, _, errOut := run(t, "", "make-random", "--out", dir, "--shape", "tiny", "--seed", "1",
		"--tokenizer", "../../testdata/tokenizer/qwen3", "--chat-template", "../../testdata/chat/chat_template.jinja"); code != exitOK {
		t.Fatalf("make-random: exit %d: %s", code, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, stdio{in: strings.NewReader(""), out: &out, err: &errOut}, []string{"--model", dir, "--port", "0",
			"--served-model-name", "sdk-model", "--max-model-len", "4096", "--default-chat-template-kwargs", `{"enable_thinking": false}`})
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

	for _, script := range sdkScripts {
		t.Run(script.file, func(t *testing.T) { runSDKScript(t, ctx, node, script, url) })
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("serve exited %d", code)
	}
}

// runSDKScript runs one script of httpapi/sdktest against the server at
// url and reports each of its checks.
func runSDKScript(t *testing.T, ctx context.Context, node string, script sdkScript, url string) {
	nctx, ncancel := context.WithTimeout(ctx, 3*time.Minute)
	defer ncancel()
	cmd := exec.CommandContext(nctx, node, script.file)
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "GOVINFER_BASE_URL="+url, "GOVINFER_MODEL=sdk-model")
	if rec := os.Getenv("GOVINFER_SDK_RECORD"); rec != "" {
		cmd.Env = append(cmd.Env, "GOVINFER_RECORD="+rec)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	runErr := cmd.Run()
	var report struct {
		Results []sdkResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("node %s: %v; output %q; stderr %s", script.file, runErr, stdout.String(), stderr.String())
	}
	for _, r := range report.Results {
		if r.OK {
			t.Logf("ok   %-16s %-40s %5d ms %s", r.SDK, r.Name, r.MS, r.Detail)
		} else {
			t.Errorf("FAIL %-16s %-40s %5d ms %s", r.SDK, r.Name, r.MS, r.Error)
		}
	}
	var exitErr *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exitErr) {
		t.Fatalf("node %s: %v; stderr %s", script.file, runErr, stderr.String())
	}
	if len(report.Results) < script.minChecks {
		t.Errorf("only %d checks ran, want at least %d", len(report.Results), script.minChecks)
	}
	t.Logf("%d checks in %v", len(report.Results), time.Since(start))
}
