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
	"syscall"
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
	}
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
func dispatch(ctx context.Context, io stdio, args []string) int {
	if len(args) == 0 {
		usage(io.err)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "--help", "-help":
		usage(io.out)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, io, args[1:])
		}
	}
	fmt.Fprintf(io.err, "govinfer: unknown command %q (run \"govinfer help\")\n", args[0])
	return exitUsage
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
	fmt.Fprintln(w, "Run \"govinfer <command> --help\" for the flags of a command.")
}
