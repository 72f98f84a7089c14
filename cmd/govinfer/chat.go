package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	goio "io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/govinfer/govinfer/gguf"
	"github.com/govinfer/govinfer/llm"
)

const chatSynopsis = `chat --model PATH [flags] ["question"]

Talks with a checkpoint in the terminal. Without a question, and with standard
input and output on a terminal, it is an interactive chat: the answer streams
as it is generated, the model's reasoning dimmed (--hide-thinking hides it),
the conversation is kept from turn to turn, and /help lists the commands
(/set temperature 0.7, /think off, /clear, /bye, ...). Ctrl-C stops an answer
(or clears the line you are typing), Ctrl-D on an empty line leaves.

Images (a checkpoint with a vision tower): /image PATH attaches a PNG, JPEG,
WebP or GIF file to your next message, and so does a line that is only an
image file's path (a file dropped on the terminal: quoted, backslash-escaped
or a file:// URL); the prompt shows what is attached, /image lists it and
/image clear drops it. Images stay in the conversation until /clear.
--image FILE (repeatable) attaches files to the question (one-shot) or to
the first message.

Multi-line input: end a line with \ to go on to the next, or open a block
with """ and close it with """; pasted text keeps its line breaks. Lines edit
with the arrows, Home/End, Backspace/Delete, Ctrl-A/E/W/U/K; up and down go
through what you typed before.

LoRA adapters: --lora PATH[:SCALE] (repeatable) answers with PEFT adapters,
unmerged at SCALE (1 by default); --lora-merge adds them into the weights
while they load (docs/lora.md).

One-shot: with a question as arguments, or (without one) the question on
standard input when it is not a terminal, it prints only the answer, without
colours, prompts or reasoning (--show-thinking writes the reasoning to
standard error), and exits non-zero if the answer fails:

  govinfer chat --model PATH --image cat.png "What is in this picture?"`

// runChat implements "govinfer chat".
func runChat(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "chat", chatSynopsis)
	var o chatOptions
	dir := fs.String("model", "", "checkpoint directory (config.json, safetensors, tokenizer, chat template)")
	quantize := quantizeFlag(fs.FlagSet)
	be := fs.String("backend", "cpu", "compute backend: "+backendNames)
	threads := fs.Int("threads", 0, "CPU worker threads (0: all cores)")
	device := fs.Int("device", 0, "Vulkan device: 0 picks the best (discrete GPU first), N the Nth of the list")
	noCoopmat := fs.Bool("no-coopmat", false, "Vulkan: run prefill products on the portable tiled shader even where the device has VK_KHR_cooperative_matrix")
	bf16In := bf16InputsFlag(fs.FlagSet)
	amxTiles := amxTilesFlag(fs.FlagSet)
	fmaTiles := fmaTilesFlag(fs.FlagSet)
	cpuMoE := cpuMoEFlags(fs.FlagSet)
	hostRoute := fs.Bool("host-moe-routing", false, hostRoutingUsage)
	mergeFormat := mergeFormatFlag(fs.FlagSet)
	var images fileList
	mmproj := mmprojFlag(fs.FlagSet)
	fs.Var(&images, "image", "attach the image `FILE` (PNG, JPEG, WebP or GIF) to the question, or to the first message of an interactive chat; repeat for several (the model needs a vision tower)")
	specConfig := fs.String("speculative-config", "", specConfigHelp)
	pcDisk := addPrefixDiskFlags(fs.FlagSet)
	loras, loraMerge := loraFlags(fs.FlagSet)
	maxLen := fs.Int("max-model-len", 0, fmt.Sprintf("most tokens of the conversation plus an answer (default: the model's context, at most %d)", llm.DefaultMaxModelLen))
	fs.BoolVar(&o.hideThinking, "hide-thinking", false, "do not show the model's reasoning (it still reasons; /think off or --think off stops that)")
	fs.BoolVar(&o.showThinking, "show-thinking", false, "one-shot mode: write the reasoning to standard error")
	fs.BoolVar(&o.verbose, "verbose", false, "print prompt and answer tokens per second after each answer (one-shot: on standard error), and the loading progress")
	fs.Func("think", "on or off: let the model reason before it answers (default: the chat template's, on for Qwen3.5)", func(v string) error {
		b, err := parseOnOff(v)
		if err != nil {
			return err
		}
		o.think = &b
		return nil
	})
	for _, s := range chatSettings() {
		if s.name == "verbose" {
			continue
		}
		name := strings.ReplaceAll(s.name, "_", "-")
		fs.Func(name, s.help+"; /set "+s.name+" in the chat", func(v string) error { return s.set(&o, v) })
	}
	question, code, done := parseChatFlags(fs, io, args)
	if done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(io.err, "govinfer chat: "+format+"\n", a...)
		return code
	}
	switch {
	case *dir == "":
		return fail(exitUsage, "--model is required (see govinfer chat --help)")
	case *maxLen < 0 || *threads < 0:
		return fail(exitUsage, "--max-model-len and --threads must not be negative")
	case checkQuantize(*quantize) != nil:
		return fail(exitUsage, "%v", checkQuantize(*quantize))
	}
	ck, err := resolveModel(io, "--model", *dir, true)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	*dir = ck.Path
	spec, err := parseSpeculativeConfig(*specConfig, true)
	if err != nil {
		return fail(exitUsage, "--speculative-config: %v", err)
	}
	moeLayers, err := cpuMoE()
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	// The images are read (and checked) before the model loads.
	var attached []chatImage
	for _, f := range images {
		img, err := readChatImage(f)
		if err != nil {
			return fail(exitUsage, "--image: %v", err)
		}
		attached = append(attached, img)
	}
	inFile, inTerm := terminal(io.in)
	outFile, outTerm := terminal(io.out)
	interactive := question == "" && inTerm
	if interactive && !outTerm {
		return fail(exitUsage, "standard output is not a terminal: give the question as an argument or on standard input")
	}
	if !interactive && question == "" {
		data, err := goio.ReadAll(io.in)
		if err != nil {
			return fail(exitError, "reading the question from standard input: %v", err)
		}
		question = strings.TrimRight(string(data), "\r\n")
	}
	if !interactive && strings.TrimSpace(question) == "" {
		return fail(exitUsage, "no question: give it as an argument or on standard input")
	}
	var log goio.Writer
	if interactive || o.verbose {
		log = io.err
	}
	bo := backendOptions{name: *be, threads: *threads, device: *device, noCoopmat: *noCoopmat, bf16Inputs: *bf16In, noAMXTiles: !*amxTiles, noFMATiles: !*fmaTiles, log: log}
	backend, err := newBackend(bo)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer backend.Close()
	start := time.Now()
	var progress func(llm.Progress)
	if log != nil {
		progress = loadProgress(io, *dir, *quantize)
	}
	mm, err := findMMProj(log, *dir, *mmproj)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	adapters, uses, err := loras.options(*loraMerge)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	o.params.LoRA = uses
	m, err := llm.OpenContext(ctx, *dir, llm.Options{Backend: backend, MaxModelLen: *maxLen, MaxNumSeqs: 1, Progress: progress, Quantize: *quantize, MMProj: mm,
		VisionBackend: visionBackend(bo), Speculative: spec, CPUMoE: moeLayers, HostMoERouting: *hostRoute, PrefixCacheDir: *pcDisk.dir, PrefixCacheDisk: *pcDisk.disk, PrefixCacheLog: pcDisk.logf(io.err, "chat"),
		LoRA: adapters, LoRAMerge: *loraMerge, LoRAMergeFormat: *mergeFormat, PrefixCacheHost: *pcDisk.host})
	if err != nil {
		if spec.Method == "mtp" && strings.Contains(err.Error(), "MTP head") {
			return fail(exitUsage, "--speculative-config: %v", err)
		}
		return fail(exitError, "%v", err)
	}
	defer m.Close()
	if _, err := m.Template(); err != nil {
		return fail(exitError, "%s has no chat template: %v", *dir, err)
	}
	if ctx.Err() != nil {
		return fail(exitError, "interrupted while loading")
	}
	if log != nil {
		cfg := m.Config()
		fmt.Fprintf(log, "loaded in %.1fs on %s: %d layers, vocab %d, context %d tokens\n",
			time.Since(start).Seconds(), backend.Name(), cfg.NumLayers, cfg.VocabSize, m.MaxModelLen())
	}
	if len(attached) > 0 && !m.HasVision() {
		if _, isGGUF, _ := gguf.Locate(*dir); isGGUF {
			return fail(exitError, "--image: the model at %s has no vision tower: a GGUF model's is in a separate mmproj file; give it with --mmproj FILE", *dir)
		}
		return fail(exitError, "--image: the model at %s has no vision tower: it does not take images", *dir)
	}
	if len(attached) > m.MaxImages() && m.HasVision() {
		return fail(exitUsage, "--image: %d images; the model takes at most %d in a request", len(attached), m.MaxImages())
	}
	s := &chatSession{m: m, opts: &o, pending: attached}
	if !interactive {
		return s.oneShot(ctx, io, question)
	}
	return s.interactive(ctx, io, inFile, outFile)
}

// parseChatFlags parses flags and arguments in any order (a question may
// come before flags; "--" ends the flags) and returns the arguments joined
// as the question.
func parseChatFlags(fs *flagSet, io stdio, args []string) (question string, code int, done bool) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.usage()
				return "", exitOK, true
			}
			fmt.Fprintf(io.err, "govinfer chat: %v (see govinfer chat --help)\n", err)
			return "", exitUsage, true
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			words = append(words, rest...) // after "--": all question
			break
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
	return strings.Join(words, " "), 0, false
}

// terminal returns f as a file and whether it is a terminal.
func terminal(f any) (*os.File, bool) {
	file, ok := f.(*os.File)
	if !ok {
		return nil, false
	}
	return file, term.IsTerminal(int(file.Fd()))
}
