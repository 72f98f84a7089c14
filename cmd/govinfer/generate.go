package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/model/vision"
	"github.com/govinfer/govinfer/sample"
	"github.com/govinfer/govinfer/tokenizer"
)

// runGenerate implements "govinfer generate": feed token ids or raw text,
// generate.
func runGenerate(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "generate", "generate --model PATH (--ids 1,2,3 | --prompt TEXT) [--image FILE]... [-n 24] [--temperature 0] [--quantize q8_0|q4_k_m|q5_k_m] [--speculative-config JSON] [--lora PATH[:SCALE]]... [--lora-merge] [--json]\n\n"+
		"With --ids it prints the generated ids, comma separated, and generates exactly -n tokens.\n"+
		"With --prompt the text is raw: it is tokenized as it is with the checkpoint's tokenizer,\n"+
		"with no chat template around it (as llama-cli -p without its chat mode; \"govinfer chat\"\n"+
		"renders a conversation); it prints the generated text as it comes, and stops at an\n"+
		"end-of-sequence token or after -n tokens.\n"+
		"With --image (repeatable) the prompt holds one image pad token (config.json's\n"+
		"image_token_id, or the vocabulary's <|image_pad|>) per image, in order; each pad\n"+
		"becomes the image's tokens, and --json's prompt_ids is the prompt so expanded.\n"+
		"A GGUF model's vision tower is an mmproj file: --mmproj FILE, or the one\n"+
		"mmproj*.gguf file beside the model.\n"+
		"With --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": K}' (K 1 to 4)\n"+
		"generation drafts K tokens per round with the checkpoint's MTP head (\"ngram\": from the\n"+
		"prompt and output) and verifies them in one step: greedy tokens are those of plain greedy\n"+
		"decoding, sampled ones follow the same distribution; --json adds spec_draft_tokens and\n"+
		"spec_accepted_tokens. It does not back off unless the config says \"backoff\": true.\n"+
		"With --lora PATH[:SCALE] (repeatable) generation runs with PEFT LoRA adapters, unmerged\n"+
		"(their updates added to each product at SCALE, 1 by default); --lora-merge adds them into\n"+
		"the weights while they load instead (see docs/lora.md).")
	dir := fs.String("model", "", "checkpoint `PATH`: a directory (config.json + safetensors) or a GGUF file")
	idList := fs.String("ids", "", "prompt token ids, comma separated")
	promptText := fs.String("prompt", "", "prompt `TEXT`, tokenized as raw text (no chat template); the output is text")
	n := fs.Int("n", 24, "number of tokens to generate (with --prompt: at most)")
	temp := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topK := fs.Int("top-k", 0, "keep the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 1, "nucleus sampling threshold")
	seed := fs.Uint64("seed", 0, "random seed for sampling")
	var images fileList
	fs.Var(&images, "image", "image `FILE` (PNG, JPEG, GIF, WebP) for the next image pad of the prompt; repeat for several")
	mmproj := mmprojFlag(fs.FlagSet)
	asJSON := fs.Bool("json", false, "print one JSON object with prompt_ids, ids and prompt_last_logits (and text, with --prompt; spec_draft_tokens and spec_accepted_tokens with --speculative-config)")
	specConfig := fs.String("speculative-config", "", specConfigHelp+"; generate backs off only with \"backoff\": true, so that its counts are every round's")
	quantize := quantizeFlag(fs.FlagSet)
	be := fs.String("backend", "cpu", "compute backend: "+backendNames)
	threads := fs.Int("threads", 0, "CPU threads (0: all cores)")
	cpuMoE := cpuMoEFlags(fs.FlagSet)
	hostRoute := fs.Bool("host-moe-routing", false, hostRoutingUsage)
	mergeFormat := mergeFormatFlag(fs.FlagSet)
	device := fs.Int("device", 0, "Vulkan device: 0 picks the best (discrete GPU first), N the Nth of the list")
	noCoopmat := fs.Bool("no-coopmat", false, "Vulkan: run prefill products on the portable tiled shader even where the device has VK_KHR_cooperative_matrix")
	bf16In := bf16InputsFlag(fs.FlagSet)
	amxTiles := amxTilesFlag(fs.FlagSet)
	fmaTiles := fmaTilesFlag(fs.FlagSet)
	loras, loraMerge := loraFlags(fs.FlagSet)
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(io.err, "govinfer generate: "+format+"\n", a...)
		return code
	}
	if *dir == "" {
		return fail(exitUsage, "--model is required")
	}
	ck, err := resolveModel(io, "--model", *dir, *promptText != "")
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	*dir = ck.Path
	if err := checkQuantize(*quantize); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if (*idList == "") == (*promptText == "") {
		return fail(exitUsage, "give the prompt as --ids or as --prompt (one of them)")
	}
	var ids []int
	var tok *tokenizer.Tokenizer
	if *promptText != "" {
		var err error
		if tok, err = tokenizer.Load(*dir); err != nil {
			return fail(exitUsage, "--prompt needs the checkpoint's tokenizer: %v", err)
		}
		ids = tok.Encode(*promptText)
	} else {
		var err error
		if ids, err = parseIDs(*idList); err != nil {
			return fail(exitUsage, "--ids: %v", err)
		}
	}
	if *n <= 0 {
		return fail(exitUsage, "-n must be positive, got %d", *n)
	}
	spec, err := parseSpeculativeConfig(*specConfig, false)
	if err != nil {
		return fail(exitUsage, "--speculative-config: %v", err)
	}
	params := sample.Params{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if err := params.Validate(); err != nil {
		return fail(exitUsage, "%v", err)
	}
	cfg, err := model.LoadConfig(*dir)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	for _, id := range ids {
		if id < 0 || id >= cfg.VocabSize {
			return fail(exitUsage, "prompt token %d is outside the vocabulary [0, %d)", id, cfg.VocabSize)
		}
	}
	var req engine.Request
	var vsetup *vision.Setup
	if len(images) > 0 {
		mm, err := findMMProj(io.err, *dir, *mmproj)
		if err != nil {
			return fail(exitUsage, "%v", err)
		}
		if vsetup, err = checkImagePrompt(*dir, mm, cfg.HiddenSize, ids, images); err != nil {
			return fail(exitUsage, "%v", err)
		}
	}
	backend, err := newBackend(backendOptions{name: *be, threads: *threads, device: *device, noCoopmat: *noCoopmat, bf16Inputs: *bf16In, noAMXTiles: !*amxTiles, noFMATiles: !*fmaTiles, log: io.err})
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	defer backend.Close()
	moeLayers, err := cpuMoE()
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	experts := expertBackend(moeLayers, backend, *threads)
	if experts != nil {
		defer experts.Close()
	}
	merge, err := loras.merged(*loraMerge)
	if err != nil {
		return fail(exitUsage, "%v", err)
	}
	m, err := model.OpenContext(ctx, *dir, model.Options{Backend: backend, Quantize: *quantize, MTP: spec.Method == "mtp", DraftQuantize: spec.DraftQuantize, Progress: quietProgress(io, *dir, *quantize),
		ExpertBackend: experts, CPUMoELayers: moeLayers, HostMoERouting: *hostRoute, Merge: merge, MergeFormat: *mergeFormat})
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
	if req.LoRA, err = loras.attach(m, *loraMerge); err != nil {
		return fail(exitUsage, "%v", err)
	}
	if len(images) > 0 {
		if ids, err = imagePrompt(ctx, vsetup, backend, *quantize, ids, images, &req); err != nil {
			if imageproc.IsInputError(err) {
				return fail(exitUsage, "%v", err)
			}
			return fail(exitError, "%v", err)
		}
	}
	// The engine's generation loop, with one request. Text stops at an
	// end-of-sequence token, as llama-cli's does; ids run to -n.
	var ecfg engine.Config
	var dec *tokenizer.Decoder
	if tok != nil {
		ecfg.EOS = tok.EOSTokens()
		if len(ecfg.EOS) == 0 {
			ecfg.EOS = cfg.EOSTokenIDs
		}
		dec = tok.NewDecoder(true, nil)
	}
	ecfg.MaxNumSeqs = 1
	ecfg.Speculative = spec
	eng, err := engine.New(m, ecfg)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	defer eng.Close()
	req.Prompt, req.Params, req.MaxTokens, req.PromptLogits = ids, params, *n, *asJSON
	st, err := eng.Submit(ctx, req)
	if err != nil {
		return fail(exitError, "%v", err)
	}
	var tokens []int
	var promptLogits []float32
	var text strings.Builder
	for {
		out, err := st.Next(ctx)
		if err != nil {
			return fail(exitError, "%v", err)
		}
		for _, t := range out.Tokens {
			tokens = append(tokens, t.ID)
			if dec != nil {
				piece, _ := dec.Push(t.ID)
				text.WriteString(piece)
				if !*asJSON {
					fmt.Fprint(io.out, piece)
				}
			}
		}
		if out.PromptLogits != nil {
			promptLogits = out.PromptLogits
		}
		if out.Finish == engine.FinishError || out.Finish == engine.FinishCancelled {
			return fail(exitError, "generation %s: %v", out.Finish, out.Err)
		}
		if out.Finish != engine.FinishNone {
			break
		}
	}
	if dec != nil {
		rest := dec.Flush()
		text.WriteString(rest)
		if !*asJSON {
			fmt.Fprintln(io.out, rest)
			return exitOK
		}
	}
	if *asJSON {
		out := struct {
			PromptIDs        []int     `json:"prompt_ids"`
			IDs              []int     `json:"ids"`
			PromptLastLogits []float32 `json:"prompt_last_logits"`
			Text             *string   `json:"text,omitempty"`
			// Speculative decoding's draft tokens over the whole run and
			// those accepted (every round counts its drafts in full).
			SpecDraftTokens    *int `json:"spec_draft_tokens,omitempty"`
			SpecAcceptedTokens *int `json:"spec_accepted_tokens,omitempty"`
		}{PromptIDs: ids, IDs: tokens, PromptLastLogits: promptLogits}
		if spec.Method != "" {
			drafted, accepted := st.SpecTokens()
			out.SpecDraftTokens, out.SpecAcceptedTokens = &drafted, &accepted
		}
		if dec != nil {
			s := text.String()
			out.Text = &s
		}
		if err := json.NewEncoder(io.out).Encode(out); err != nil {
			return fail(exitError, "%v", err)
		}
		return exitOK
	}
	for i, t := range tokens {
		if i > 0 {
			fmt.Fprint(io.out, ",")
		}
		fmt.Fprint(io.out, t)
	}
	fmt.Fprintln(io.out)
	return exitOK
}
