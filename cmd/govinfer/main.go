// Command govinfer chats with, serves, checks and benchmarks Qwen3.5 models
// loaded from Hugging Face safetensors checkpoints or GGUF files.
//
// Usage:
//
//	govinfer <command> [flags]
//
// Run "govinfer help" for the list of commands and "govinfer <command> --help"
// for the flags of one.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/govinfer/govinfer/internal/version"
)

// Exit codes shared by all subcommands.
const (
	exitOK    = 0 // the command did its job
	exitError = 1 // the command ran but failed
	exitUsage = 2 // bad flags or arguments, or bad input files
)

// stdio is the set of streams a subcommand reads and writes; tests pass buffers.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// command is one subcommand of the govinfer binary.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, io stdio, args []string) int
}

// commands lists the subcommands in the order "govinfer help" shows them.
func commands() []command {
	return []command{
		{"chat", "chat with a checkpoint in the terminal, or answer one question", runChat},
		{"serve", "serve a checkpoint over an OpenAI-compatible HTTP API", runServe},
		{"bench", "measure prefill and decode speed of a checkpoint", runBench},
		{"diag", "exercise an OpenAI-compatible server and write a JSON report", runDiag},
		{"generate", "feed token ids to a checkpoint and generate", runGenerate},
		{"tokenize", "encode or decode text with a checkpoint's tokenizer", runTokenize},
		{"render", "render a chat conversation with the checkpoint's chat template", runRender},
		{"quantize", "write a checkpoint as a GGUF file (bf16, q8_0, q4_k_m) that llama.cpp loads", runQuantize},
		{"make-random", "write a random Qwen3.5 checkpoint for tests and benchmarks", runMakeRandom},
		{"version", "print govinfer's version", runVersion},
	}
}

// summary returns the one line "govinfer help" shows for the command
// named name, which its --help begins with too.
func summary(name string) string {
	for _, c := range commands() {
		if c.name == name {
			return c.summary
		}
	}
	return ""
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	exitOnSecondSignal()
	code := dispatch(ctx, stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// exitOnSecondSignal makes a second SIGINT or SIGTERM end the process at
// once: the first cancels the command's context (serve then drains).
func exitOnSecondSignal() {
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		<-c
		fmt.Fprintln(os.Stderr, "govinfer: second signal: exiting at once")
		os.Exit(exitError)
	}()
}

// dispatch runs the subcommand named by args[0] and returns its exit code.
// "govinfer help CMD" is "govinfer CMD --help", and "govinfer --version"
// is "govinfer version".
func dispatch(ctx context.Context, io stdio, args []string) int {
	if len(args) == 0 {
		usage(io.err)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		if len(args) == 1 {
			usage(io.out)
			return exitOK
		}
		if len(args) > 2 {
			fmt.Fprintf(io.err, "govinfer: help takes one command, got %q\n", args[1:])
			return exitUsage
		}
		args = []string{args[1], "--help"}
	case "--version", "-version":
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, io, args[1:])
		}
	}
	fmt.Fprintf(io.err, "govinfer: unknown command %q%s (run \"govinfer help\")\n", args[0], nearestCommand(args[0]))
	return exitUsage
}

// nearestCommand suggests the command name is a mistyping of, if any:
// "; did you mean serve?".
func nearestCommand(name string) string {
	best, bestDist := "", 1+len(name)/4
	for _, c := range commands() {
		if d := editDistance(name, c.name); d < bestDist {
			best, bestDist = c.name, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "govinfer runs Qwen3.5 models from Hugging Face safetensors checkpoints or GGUF files.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: govinfer <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, `Run "govinfer help <command>" (or "govinfer <command> --help") for the flags of
a command, and "govinfer --version" for the version.

Sizes (--state-memory, --max-body-bytes, ...) are bytes, or a number with a
unit: K, M, G and T are powers of 1000 and KiB, MiB, GiB and TiB powers of 1024,
so 1G = 1GB = 10^9 bytes and 1GiB = 2^30 bytes (the B is optional, case is not
significant).
`)
}

// runVersion implements "govinfer version" (and "govinfer --version").
func runVersion(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "version", "version\n\n"+
		"Prints govinfer's version: the module's version for a tagged build, else\n"+
		"\"devel\" and the revision of the checkout it was built from (-dirty with\n"+
		"uncommitted changes), with the Go toolchain and the platform.")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	fmt.Fprintf(io.out, "govinfer %s (%s %s/%s)\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
