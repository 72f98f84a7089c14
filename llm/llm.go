// Package llm is govinfer's application layer: it opens a Qwen3.5
// checkpoint (weights, tokenizer, chat template, generation_config.json
// defaults), runs it on a continuous-batching engine and turns chat and text
// completion requests into streams of typed events: reasoning and content
// text, tool calls with parsed arguments, the tokens behind them with their
// log-probabilities, and each choice's finish reason.
//
// A Model is safe for concurrent use: concurrent requests share model steps.
//
//	m, err := llm.Open(dir, llm.Options{})
//	st, err := m.Chat(ctx, llm.ChatRequest{Messages: []llm.Message{{Role: "user", Content: "Hi"}}})
//	for ev := range st.Events() {
//		fmt.Print(ev.Text)
//	}
//
// Each request resumes from the longest prefix of its prompt whose state
// the engine's prefix cache holds (exactly: bit for bit the results of a
// cold run), and all sequence state stays within one memory budget; see
// Options.NoPrefixCache and Options.StateMemory.
//
// Requests fail before they start with a *ParamError (a request field out of
// range, naming it as the OpenAI API does), a *ContextLengthError,
// ErrQueueFull or ErrClosed; a generation that fails later ends its choice
// with FinishError or FinishAbort and the cause in Event.Err.
package llm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/govinfer/govinfer/chattemplate"
	"github.com/govinfer/govinfer/compute"
	"github.com/govinfer/govinfer/compute/cpu"
	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/model"
	"github.com/govinfer/govinfer/modelpath"
	"github.com/govinfer/govinfer/tokenizer"
)

// DefaultMaxModelLen bounds Options.MaxModelLen's default.
const DefaultMaxModelLen = 32768

// prefillPassTokens is the most tokens one model pass takes: the prompt
// tokens of a step without decoding sequences, which the engine fills.
// Larger passes read the weights fewer times per prompt token: a
// 1,024-token prompt on the 9B-width model, 2 threads, took 20.0 s in
// such passes against 20.8 s in passes of 64.
const prefillPassTokens = 512

// Options configure Open.
type Options struct {
	// Backend runs the model; nil means a CPU backend on all cores, which
	// the Model owns and closes. A backend given here stays the caller's.
	Backend compute.Backend
	// MaxModelLen bounds prompt plus completion tokens of a choice. Zero
	// means the smaller of the model's context and DefaultMaxModelLen.
	MaxModelLen int
	// MaxNumSeqs is the most requests (choices) generating at once, the
	// batch; zero means DefaultMaxNumSeqs. MaxQueue is the most waiting
	// behind it, past which requests fail with ErrQueueFull; zero means
	// DefaultMaxQueue.
	MaxNumSeqs, MaxQueue int
	// Progress, when set, is called as weights load.
	Progress func(Progress)
	// Quantize, when not empty, quantizes a BF16/F16/F32 checkpoint while
	// it loads: "q8_0", "q4_k_m" or "q5_k_m" (see model.Options.Quantize).
	Quantize string
	// DefaultTemplateArgs are chat template variables every chat gets
	// unless it sets them (vLLM's --default-chat-template-kwargs), e.g.
	// {"enable_thinking": false}.
	DefaultTemplateArgs map[string]any
	// NoPrefixCache turns off prefix reuse: by default a request resumes
	// from the longest cached prefix of its prompt (exactly: the results
	// are bit for bit those of a cold run) and prefills only the rest.
	NoPrefixCache bool
	// PrefixObserver, when set, is told what the prefix cache stores and
	// evicts, in each tier, e.g. to publish KV events; with
	// PrefixCacheDir it is first told what the disk tier holds (see
	// Model.ObservePrefixCache, which adds observers to an open model).
	PrefixObserver PrefixObserver
	// PrefixCacheDir, when set, puts a disk tier under the prefix cache:
	// prompt states leaving memory (evicted, or cached at Close) are
	// written there and read back, by this process or a later one, for
	// requests whose prefix memory no longer holds (see prefixdisk.go).
	// PrefixCacheDisk bounds its files; zero means
	// DefaultPrefixCacheDiskFraction of the free space there.
	// PrefixCacheLog reports the files it skips as corrupt (nil:
	// log.Printf).
	PrefixCacheDir  string
	PrefixCacheDisk int64
	PrefixCacheLog  func(format string, args ...any)
	// PrefixCacheHost, when positive, puts that many bytes of host memory
	// between a device's memory (StateMemory, the first tier) and the
	// disk tier: prompt states evicted from device memory are copied
	// there (and from there to PrefixCacheDir, when set) and uploaded
	// back for requests that resume from them, bit for bit
	// (engine.Config.PrefixHost). It needs a backend with its own memory
	// (Vulkan): on the CPU backend StateMemory is host memory already,
	// and Open fails saying so.
	PrefixCacheHost int64
	// StateMemory bounds, in bytes, all sequence state: KV caches,
	// recurrent states and cached prefixes (engine.Config.StateMemory).
	// Zero means StateMemoryFraction of the memory free once the weights
	// are loaded (ParseStateMemory reads either form).
	StateMemory int64
	// StateMemoryFraction is the share, in (0, 1], of the memory free
	// after loading that StateMemory takes when zero; zero means
	// DefaultStateMemoryFractionDevice on a backend with its own memory
	// (compute.MemoryReporter), DefaultStateMemoryFractionHost otherwise
	// (DefaultStateMemoryBytes where the host's memory cannot be read).
	StateMemoryFraction float64
	// KVCacheType is the KV cache's element type: "f32" (the default,
	// exact), "bf16" or "f16" (half the memory per token).
	KVCacheType string
	// MaxTokens, when positive, caps every answer at that many tokens
	// whatever the request asks (llama-server's -n, ollama's
	// num_predict), and is the bound of a request that asks none.
	MaxTokens int
	// MaxImages is the most images one chat request may hold (vLLM's
	// --limit-mm-per-prompt '{"image": N}'): zero means DefaultMaxImages,
	// a negative value turns images off (the vision tower is not loaded).
	// Checkpoints without a vision tower take no images whatever it says.
	// The tower encodes on VisionBackend's backend; with Quantize its
	// matrices are Q8_0 (those whose rows are whole blocks of 32).
	MaxImages int
	// MaxImagePixels, when positive, lowers the preprocessor's bound on
	// the pixels of a resized image (vLLM's --mm-processor-kwargs
	// '{"max_pixels": N}'), and so the tokens per image: at most
	// MaxImagePixels/(patch_size*merge_size)^2.
	MaxImagePixels int
	// MMProj, when set, is an mmproj GGUF file (llama.cpp's layout of the
	// vision tower, projector qwen3vl_merger) to take the tower and its
	// image preprocessing from: a GGUF model's, whose file holds no tower,
	// or in place of a checkpoint directory's own. Open does not look for
	// one by itself (vision.FindMMProj does). The image ids are
	// config.json's where a checkpoint gives them, else the tokenizer's
	// <|image_pad|> and <|vision_start|>.
	MMProj string
	// VisionBackend, when set, makes the backend the vision tower runs on
	// (a Vulkan backend of its own beside a Vulkan model's, say); it is
	// called once, when the model has a tower, and Close closes what it
	// made. Nil gives the tower its own CPU backend on all cores. The
	// model's backend is never shared: it serves the engine loop alone,
	// while the tower encodes on the requests' goroutines (one image at a
	// time).
	VisionBackend func() (compute.Backend, error)
	// Speculative turns on speculative decoding (engine.Config.Speculative,
	// vLLM's --speculative-config): with Method "mtp" the checkpoint's MTP
	// head (mtp.* weights) is loaded and drafts Tokens tokens per round for
	// greedy requests; the output is that of plain greedy decoding. Its
	// DraftQuantize loads the head for drafting in that block format
	// (model.Options.DraftQuantize).
	Speculative engine.Speculative
	// CPUMoE keeps the experts of a mixture-of-experts model in host
	// memory, run by a CPU backend on all cores that the Model owns, while
	// Backend (a GPU) runs everything else (llama.cpp's --cpu-moe and
	// --n-cpu-moe): the experts of the first CPUMoE layers, or of every
	// layer and the MTP head's when negative. Zero, a dense model or a CPU
	// Backend leave everything on Backend.
	CPUMoE int
	// HostMoERouting routes a mixture of experts on the host on a
	// backend that could route on the device (Vulkan): each MoE layer's
	// router logits are read back and each chosen expert runs as a weight
	// of its own (model.Options.HostMoERouting). Slower on a GPU, but what
	// unmerged LoRA updates of the experts need.
	HostMoERouting bool
	// LoRA are PEFT LoRA adapters to attach at open (Model.LoadLoRA
	// attaches more later); requests choose them by name (Params.LoRA).
	LoRA []LoRAAdapter
	// LoRAMerge adds the LoRA adapters into the weights while they load
	// (ollama's ADAPTER): every request then runs with them at the cost
	// of the base model, in F32 for a float checkpoint (twice a BF16
	// checkpoint's weight memory; a Quantize load keeps its format), and
	// no adapter can be loaded or unloaded later.
	LoRAMerge bool
	// LoRAMergeFormat is model.Options.MergeFormat: "" or "f32" keeps a
	// float checkpoint's merged matrices exact in F32, "base" in the
	// checkpoint's own format, at the base's speed, the update rounded.
	LoRAMergeFormat string
	// MaxLoRAs bounds the adapters attached at once and MaxLoRARank their
	// rank (vLLM's --max-loras and --max-lora-rank); zero means no bound.
	MaxLoRAs, MaxLoRARank int
	// MaxGrammarBytes bounds the source of a request's grammar, regular
	// expression or choice list (structured outputs, llama-server's
	// grammar, custom tools' formats); zero or less means
	// DefaultMaxGrammarBytes.
	MaxGrammarBytes int
}

// Progress reports weight loading (model.Progress).
type Progress = model.Progress

// ErrClosed is returned for requests made after Close, and is the cause of
// choices cut short by it.
var ErrClosed = engine.ErrClosed

// ErrQueueFull means the engine's waiting queue is at its limit; retry
// later.
var ErrQueueFull = engine.ErrQueueFull

// Model is an open checkpoint with its engine.
type Model struct {
	name        string // Open's path's modelpath name: its base name, or a cached Org/Name
	m           *model.Model
	be          compute.Backend // owned, or nil
	backendName string
	experts     compute.Backend // the CPU backend of Options.CPUMoE, owned, or nil
	eng         *engine.Engine
	prefixDir   string // Options.PrefixCacheDir
	tok         *tokenizer.Tokenizer
	tmpl        *chattemplate.Template
	tmplErr     error
	special     chattemplate.SpecialTokens
	defaults    Defaults
	eos         []int
	maxModelLen int
	constraints *constraintVocab
	defaultArgs map[string]any
	stateMemory int64
	prefixCache bool
	maxTokens   int // Options.MaxTokens
	// seqTokens is the most tokens one sequence's state can ever hold
	// within stateMemory (prompt plus answer, less the last sampled token,
	// which is never fed); 0 when only the context bounds it.
	seqTokens int
	vision    *vl // nil without a vision tower
	// usageBudget is the state memory Stats.KVCacheUsage and CacheBlocks
	// count (usageBudgetBytes).
	usageBudget int64
	observers   prefixRelay // the engine's PrefixObserver
	loras       loras       // the attached LoRA adapters
	structured  structuredCache
}

// Defaults are the sampling defaults of generation_config.json; nil fields
// are absent there.
type Defaults struct {
	Temperature       *float64 `json:"temperature"`
	TopK              *int     `json:"top_k"`
	TopP              *float64 `json:"top_p"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
}

// Open loads a checkpoint directory (config.json, safetensors,
// tokenizer.json, tokenizer_config.json, optionally generation_config.json
// and a chat template) and starts its engine. A checkpoint without a chat
// template serves text completions only. dir may also be a qwen35 GGUF
// file, or a directory holding one: weights, tokenizer, chat template and
// sampling defaults (general.sampling.*) then all come from the file.
//
// dir goes through modelpath.Resolve: a Hugging Face cache folder (or Hub
// name) whose one snapshot is there opens that snapshot, and a path that
// names no checkpoint, or a checkpoint folder without tokenizer.json, is a
// *modelpath.Error saying what is wrong; a config of another architecture
// than Qwen3.5 wraps model.ErrArchitecture.
func Open(dir string, o Options) (*Model, error) {
	return OpenContext(context.Background(), dir, o)
}

// OpenContext is Open, stopping when ctx is done before the weights are
// loaded (model.OpenContext): the error then wraps ctx's.
func OpenContext(ctx context.Context, dir string, o Options) (*Model, error) {
	if o.MaxModelLen < 0 {
		return nil, fmt.Errorf("llm: max model length must not be negative, got %d", o.MaxModelLen)
	}
	if o.MaxTokens < 0 {
		return nil, fmt.Errorf("llm: max tokens must not be negative, got %d", o.MaxTokens)
	}
	if err := checkLoRAOptions(o); err != nil {
		return nil, err
	}
	found, err := modelpath.Resolve(dir)
	if err == nil {
		err = found.CheckTokenizer()
	}
	if err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	dir = found.Path
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	lm := &Model{name: found.Name, tok: tok, defaultArgs: maps.Clone(o.DefaultTemplateArgs), structured: structuredCache{maxBytes: o.MaxGrammarBytes}}
	lm.tmpl, lm.tmplErr = chattemplate.Load(dir)
	if lm.special, err = chattemplate.LoadSpecialTokens(dir); err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	}
	if d, ok, err := ggufDefaults(dir); err != nil {
		return nil, fmt.Errorf("llm: %w", err)
	} else if ok {
		lm.defaults = d
	} else if data, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		if err := json.Unmarshal(data, &lm.defaults); err != nil {
			return nil, fmt.Errorf("llm: reading generation_config.json: %w", err)
		}
	}
	kvType := compute.F32
	if o.KVCacheType != "" {
		var ok bool
		if kvType, ok = KVCacheTypes[o.KVCacheType]; !ok {
			return nil, fmt.Errorf("llm: KV cache type %q is not one of f32, bf16, f16", o.KVCacheType)
		}
	}
	be := o.Backend
	if be == nil {
		be = cpu.New(cpu.Options{})
		lm.be = be
	}
	lm.backendName = be.Name()
	var experts compute.Backend
	if _, onCPU := be.(*cpu.Backend); o.CPUMoE != 0 && !onCPU {
		experts = cpu.New(cpu.Options{})
		lm.experts = experts
	}
	// Every step is one pass over the weights (see engine.Config); a step
	// that only prefills fills it (prefillPassTokens).
	maxSeqs := cmp.Or(o.MaxNumSeqs, engine.DefaultMaxNumSeqs)
	var merge []model.MergedAdapter
	var mergedEntries []*loraEntry
	var mergedKey string
	if o.LoRAMerge {
		if merge, mergedEntries, mergedKey, err = mergeLoRAs(o, found.Name); err != nil {
			lm.closeBackend()
			return nil, err
		}
	}
	m, err := model.OpenContext(ctx, dir, model.Options{Backend: be, Progress: o.Progress, Quantize: o.Quantize, KVCacheType: kvType,
		MTP: o.Speculative.Method == "mtp", DraftQuantize: o.Speculative.DraftQuantize, MaxStepTokens: max(prefillPassTokens, maxSeqs+engine.DefaultChunkTokens),
		ExpertBackend: experts, CPUMoELayers: o.CPUMoE, HostMoERouting: o.HostMoERouting, Merge: merge, MergeFormat: o.LoRAMergeFormat})
	if err != nil {
		lm.closeBackend()
		if o.Speculative.Method == "mtp" && strings.Contains(err.Error(), "MTP head") {
			// One line: the first missing tensor and a count of the rest.
			msg := err.Error()
			if lines := strings.Split(msg, "\n"); len(lines) > 1 {
				msg = fmt.Sprintf("%s (and %d more)", lines[0], len(lines)-1)
			}
			return nil, fmt.Errorf("llm: speculative method mtp needs the checkpoint's MTP head (mtp.* weights): %s", msg)
		}
		return nil, fmt.Errorf("llm: %w", err)
	}
	lm.m = m
	fail := func(err error) (*Model, error) {
		m.Close()
		lm.closeBackend()
		return nil, err
	}
	if tok.VocabSize() > m.Config().VocabSize {
		return fail(fmt.Errorf("llm: the tokenizer has %d tokens but the model only %d", tok.VocabSize(), m.Config().VocabSize))
	}
	lm.maxModelLen = o.MaxModelLen
	if lm.maxModelLen == 0 {
		lm.maxModelLen = min(m.Config().MaxContext(), DefaultMaxModelLen)
	}
	if lm.maxModelLen > m.Config().MaxContext() {
		return fail(fmt.Errorf("llm: max model length %d exceeds the model's context of %d", lm.maxModelLen, m.Config().MaxContext()))
	}
	lm.eos = tok.EOSTokens()
	if len(lm.eos) == 0 {
		lm.eos = m.Config().EOSTokenIDs
	}
	if lm.stateMemory, err = stateBudget(o, m, be); err != nil {
		return fail(err)
	}
	lm.prefixCache = !o.NoPrefixCache
	lm.maxTokens = o.MaxTokens
	lm.seqTokens = sequenceTokens(m, lm.stateMemory)
	lm.usageBudget = lm.usageBudgetBytes(maxSeqs)
	lm.observers.add(o.PrefixObserver)
	if err := lm.initLoRAs(ctx, o, mergedEntries); err != nil {
		return fail(err)
	}
	if err := checkPrefixCacheHost(o); err != nil {
		return fail(err)
	}
	disk, err := prefixDiskTier(dir, o, mergedKey)
	if err != nil {
		return fail(err)
	}
	lm.prefixDir = o.PrefixCacheDir
	eng, err := engine.New(m, engine.Config{MaxNumSeqs: o.MaxNumSeqs, MaxQueue: o.MaxQueue, EOS: lm.eos,
		StateMemory: lm.stateMemory, PrefixCache: lm.prefixCache, PrefixObserver: &lm.observers,
		Speculative: o.Speculative, PrefixDisk: disk, PrefixHost: o.PrefixCacheHost})
	if err != nil {
		return fail(fmt.Errorf("llm: %w", err))
	}
	lm.eng = eng
	lm.observers.replay(o.PrefixObserver, eng.DiskSpans)
	if lm.vision, err = openVision(dir, o, tok, m.Config().HiddenSize); err != nil {
		eng.Close()
		return fail(fmt.Errorf("llm: vision tower: %w", err))
	}
	lm.constraints = newConstraintVocab(tok, lm.eos)
	return lm, nil
}

func (lm *Model) closeBackend() {
	if lm.be != nil {
		lm.be.Close()
	}
	if lm.experts != nil {
		lm.experts.Close()
	}
}

// Close cancels the requests in flight, stops the engine and frees the
// model (and the backend Open created).
func (lm *Model) Close() error {
	lm.eng.Close()
	err := errors.Join(lm.m.Close(), lm.vision.close())
	if lm.experts != nil {
		err = errors.Join(err, lm.experts.Close())
	}
	if lm.be != nil {
		err = errors.Join(err, lm.be.Close())
	}
	return err
}

// Tokenizer returns the checkpoint's tokenizer.
func (lm *Model) Tokenizer() *tokenizer.Tokenizer { return lm.tok }

// Template returns the checkpoint's chat template, or the error that
// prevented loading it.
func (lm *Model) Template() (*chattemplate.Template, error) { return lm.tmpl, lm.tmplErr }

// SpecialTokens returns the special-token strings the chat template sees.
func (lm *Model) SpecialTokens() chattemplate.SpecialTokens { return lm.special }

// Engine returns the model's engine; Stats, CacheBlocks and
// ObservePrefixCache say what a server reads of it.
func (lm *Model) Engine() *engine.Engine { return lm.eng }

// Name returns the base name of the checkpoint directory or GGUF file the
// model was opened from: the id a server gives it by default.
func (lm *Model) Name() string { return lm.name }

// BackendName returns the name of the backend the model runs on.
func (lm *Model) BackendName() string { return lm.backendName }

// Config returns the model's configuration.
func (lm *Model) Config() *model.Config { return lm.m.Config() }

// VocabSize returns the model's vocabulary size (token ids are below it).
func (lm *Model) VocabSize() int { return lm.m.Config().VocabSize }

// MaxModelLen returns the most prompt plus completion tokens of a choice.
func (lm *Model) MaxModelLen() int { return lm.maxModelLen }

// MaxModelLenOf returns the MaxModelLen that Open(dir, o) gives, reading
// only the checkpoint's configuration (config.json, or a GGUF file's
// metadata), not its weights: what a server states while the model loads.
func MaxModelLenOf(dir string, o Options) (int, error) {
	if o.MaxModelLen > 0 {
		return o.MaxModelLen, nil
	}
	c, err := model.LoadConfig(dir)
	if err != nil {
		return 0, fmt.Errorf("llm: %w", err)
	}
	return min(c.MaxContext(), DefaultMaxModelLen), nil
}

// MaxTokens returns Options.MaxTokens: the cap on every answer, 0 for none.
func (lm *Model) MaxTokens() int { return lm.maxTokens }

// Defaults returns the checkpoint's sampling defaults.
func (lm *Model) Defaults() Defaults { return lm.defaults }

// EOS returns the end-of-sequence ids every choice stops on unless it sets
// IgnoreEOS.
func (lm *Model) EOS() []int { return append([]int(nil), lm.eos...) }

// TokenText returns the display text of one token and its bytes, as
// logprobs show them.
func (lm *Model) TokenText(id int) (string, []byte) {
	return lm.tok.Decode([]int{id}, false), lm.tok.TokenBytes(id)
}
