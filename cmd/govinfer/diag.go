package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/govinfer/govinfer/diag"
	"github.com/govinfer/govinfer/httpapi"
	"github.com/govinfer/govinfer/llm"
)

// exitRunBroken is diag's exit code when the server could not be reached or
// requests broke; the report is still written. It shares its value with
// exitUsage.
const exitRunBroken = 2

// runDiag implements "govinfer diag": it exercises an OpenAI-compatible
// server (or, with --model-dir, govinfer's own server started in-process),
// writes the JSON report and prints a summary; with --compare it prints two
// reports side by side.
func runDiag(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "diag", "diag (--base-url URL | --model-dir DIR) [flags]\n"+
		"       govinfer diag --compare a.json b.json\n\n"+
		"Exercises an OpenAI-compatible server and writes a JSON report. Exit status: 0 when\n"+
		"the run completed (whatever passed), 1 with --fail-on-check when a check failed,\n"+
		"2 when the server could not be reached or the run broke (the report is still\n"+
		"written, with status and error).")
	var (
		baseURL     = fs.String("base-url", "", "root URL of a running OpenAI-compatible server, e.g. http://127.0.0.1:8000")
		modelDir    = fs.String("model-dir", "", "serve this checkpoint (a directory or a GGUF file) in-process on a loopback port and exercise it")
		model       = fs.String("model", "", "model id to request (default: the first one /v1/models lists)")
		reportPath  = fs.String("report", "diag-report.json", "where to write the JSON report")
		only        = fs.String("only", "", "comma-separated parts to run: behavior,long_context,decode,isolation (default all)")
		longTokens  = fs.Int("long-context-tokens", 0, "long-context prompt length (default: max_model_len minus a margin, at most 8192)")
		timeout     = fs.Duration("timeout", diag.DefaultTimeout, "limit for each request, a whole stream included")
		apiKey      = fs.String("api-key", "", "bearer token to send")
		failOnCheck = fs.Bool("fail-on-check", false, "exit 1 when a check fails")
		seed        = fs.Uint64("seed", 1, "seed for the placement of the long-context fact")
		compare     = fs.Bool("compare", false, "print the two report files given as arguments side by side")
		backendName = fs.String("backend", "cpu", "with --model-dir: compute backend, "+backendNames)
		threads     = fs.Int("threads", 0, "with --model-dir: CPU threads (0: all cores)")
		device      = fs.Int("device", 0, "with --model-dir: Vulkan device (0: the best)")
		bf16In      = bf16InputsFlag(fs.FlagSet)
		amxTiles    = amxTilesFlag(fs.FlagSet)
		fmaTiles    = fmaTilesFlag(fs.FlagSet)
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.usage()
			return exitOK
		}
		fmt.Fprintf(io.err, "govinfer diag: %v (see govinfer diag --help)\n", err)
		return exitUsage
	}

	if *compare {
		if fs.NArg() != 2 {
			fmt.Fprintln(io.err, "govinfer diag: --compare takes two report files")
			return exitUsage
		}
		return diagCompare(io, fs.Arg(0), fs.Arg(1))
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(io.err, "govinfer diag: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	if (*baseURL == "") == (*modelDir == "") {
		fmt.Fprintln(io.err, "govinfer diag: give exactly one of --base-url and --model-dir")
		return exitUsage
	}
	parts, err := diag.ParseParts(*only)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer diag: --only: %v\n", err)
		return exitUsage
	}
	if *longTokens < 0 {
		fmt.Fprintln(io.err, "govinfer diag: --long-context-tokens must be positive")
		return exitUsage
	}
	if *timeout <= 0 {
		fmt.Fprintln(io.err, "govinfer diag: --timeout must be positive")
		return exitUsage
	}

	opts := diag.Options{
		BaseURL:           *baseURL,
		Model:             *model,
		APIKey:            *apiKey,
		Only:              parts,
		LongContextTokens: *longTokens,
		Timeout:           *timeout,
		Progress:          io.err,
		Seed:              *seed,
	}
	var (
		rep    *diag.Report
		runErr error
	)
	if *modelDir != "" {
		url, stop, err := startInProcessServer(ctx, *modelDir, backendOptions{name: *backendName, threads: *threads, device: *device, bf16Inputs: *bf16In, noAMXTiles: !*amxTiles, noFMATiles: !*fmaTiles, log: io.err}, io)
		if err != nil {
			runErr = fmt.Errorf("start the in-process server: %w", err)
			rep = &diag.Report{Status: diag.StatusFailed, Error: runErr.Error(), Scope: diag.Scope,
				Model: *model, Behavior: []diag.CheckResult{}, LongContext: []diag.LongContextResult{},
				DecodeRuns: []diag.DecodeRun{}}
		} else {
			defer stop()
			opts.BaseURL = url
		}
	}
	if rep == nil {
		rep, runErr = diag.Run(ctx, opts)
	}

	if err := rep.WriteFile(*reportPath); err != nil {
		fmt.Fprintf(io.err, "govinfer diag: %v\n", err)
		return exitError
	}
	if err := diag.WriteSummary(io.out, rep); err != nil {
		fmt.Fprintf(io.err, "govinfer diag: %v\n", err)
		return exitError
	}
	fmt.Fprintf(io.out, "\nreport written to %s\n", *reportPath)
	if runErr != nil {
		fmt.Fprintf(io.err, "govinfer diag: %v\n", runErr)
		return exitRunBroken
	}
	if failed := rep.FailedChecks(parts); *failOnCheck && len(failed) > 0 {
		fmt.Fprintf(io.err, "govinfer diag: failed checks: %s\n", strings.Join(failed, ", "))
		return exitError
	}
	return exitOK
}

// diagCompare prints two reports side by side.
func diagCompare(io stdio, pathA, pathB string) int {
	a, err := diag.ReadFile(pathA)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer diag: %v\n", err)
		return exitUsage
	}
	b, err := diag.ReadFile(pathB)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer diag: %v\n", err)
		return exitUsage
	}
	if err := diag.WriteCompare(io.out, pathA, a, pathB, b); err != nil {
		fmt.Fprintf(io.err, "govinfer diag: %v\n", err)
		return exitError
	}
	return exitOK
}

// startInProcessServer loads the checkpoint in dir, serves it on a free
// loopback port and returns the server's base URL and a function that shuts
// it down. It is the one place where diag meets govinfer's own server.
func startInProcessServer(ctx context.Context, dir string, bo backendOptions, io stdio) (baseURL string, stop func(), err error) {
	ck, err := resolveModel(io, "--model-dir", dir, true)
	if err != nil {
		return "", nil, err
	}
	dir = ck.Path
	be, err := newBackend(bo)
	if err != nil {
		return "", nil, err
	}
	start := time.Now()
	srv, err := httpapi.StartLoading(ctx, dir, llm.Options{
		Backend: be,
		Progress: func(p llm.Progress) {
			if p.Tensors == p.TotalTensors {
				fmt.Fprintf(io.err, "loaded %d tensors (%.2f GB) in %.1fs\n", p.TotalTensors, float64(p.TotalBytes)/1e9, time.Since(start).Seconds())
			}
		},
	}, httpapi.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		be.Close()
		return "", nil, err
	}
	stop = func() {
		srv.Close()
		be.Close()
	}
	if err := srv.WaitReady(ctx); err != nil {
		stop()
		return "", nil, err
	}
	url := "http://" + srv.Addr()
	fmt.Fprintf(io.err, "serving %s in-process at %s\n", dir, url)
	return url, stop, nil
}
