package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/govinfer/govinfer/engine"
	"github.com/govinfer/govinfer/httpapi"
	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// runServe implements "govinfer serve": it loads a checkpoint and serves it
// over the OpenAI-compatible HTTP API until ctx ends (SIGINT/SIGTERM).
func runServe(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "serve", "serve --model DIR [flags]\n\n"+
		"Serves a checkpoint over vLLM's OpenAI-compatible API: /v1/chat/completions,\n"+
		"/v1/completions, /v1/responses (OpenAI's Responses API, with GET and DELETE\n"+
		"/v1/responses/{id}), /v1/models, /v1/models/{id}, /health, /metrics, /tokenize,\n"+
		"/detokenize, and /v1/chat/completions/render, /v1/completions/render (the\n"+
		"prompt's token ids); and Anthropic's Messages API, /v1/messages and\n"+
		"/v1/messages/count_tokens (x-api-key is taken as well as the bearer token).\n"+
		"Coding agents work unchanged: Codex CLI on /v1/responses, Claude Code on\n"+
		"/v1/messages, Qwen Code on /v1/chat/completions.\n\n"+
		"Answers that fit: an answer asked longer than its prompt leaves room for in\n"+
		"--max-model-len (or in --state-memory, for one sequence) is lowered to that\n"+
		"room, not refused, and --max-tokens N caps every answer; the answer then\n"+
		"ends with the endpoint's length reason. A prompt that leaves no room is a 400.\n\n"+
		"Request log lines go to standard error (rejected requests too, with their\n"+
		"reason, without their prompts). /health answers 503 while the model loads\n"+
		"(logged once, not per poll); a model that fails to load ends serve with exit\n"+
		"status 1. SIGINT or SIGTERM drains it: /health and new requests answer 503\n"+
		"while running and queued requests finish, for up to --shutdown-timeout; then\n"+
		"it aborts the rest and exits 0. A second signal exits at once.\n\n"+
		"Connections: at most --max-connections are open at once (past it a new one\n"+
		"gets a 503 and is closed); one idle for --idle-timeout is closed, and a\n"+
		"request must be read, headers and body, within --read-timeout, so slow or\n"+
		"idle clients cannot hold the server. Running out of file descriptors pauses\n"+
		"accepting until connections close.\n\n"+
		"Speculative decoding: --speculative-config '{\"method\": \"mtp\",\n"+
		"\"num_speculative_tokens\": K}' (K 1 to 4) loads the checkpoint's MTP head\n"+
		"(mtp.* weights) and drafts K tokens per round for every request (\"ngram\" drafts\n"+
		"from the prompt and output, no weights): greedy text is plain greedy decoding's,\n"+
		"sampled text follows plain sampling's distribution. A request whose drafts are\n"+
		"mostly rejected backs off: after a window of 4 rounds that commit fewer tokens\n"+
		"than a round costs in plain steps it decodes plainly for 128 steps, doubling up\n"+
		"to 2048 while it keeps failing (\"backoff\": false turns that off). Usage then\n"+
		"details accepted_prediction_tokens and rejected_prediction_tokens (chat and\n"+
		"completions; the Responses API in output_tokens_details), and /metrics counts\n"+
		"vllm:spec_decode_num_draft_tokens_total and _accepted_tokens_total.\n\n"+
		"LoRA adapters (docs/lora.md): --lora-modules name=path [name=path ...] serves\n"+
		"PEFT adapters on one copy of the base, a request's model choosing one and one\n"+
		"batch mixing them; /v1/models lists them with their parent. --enable-lora\n"+
		"adds POST /v1/load_lora_adapter and /v1/unload_lora_adapter ({lora_name,\n"+
		"lora_path}); --lora-merge adds the one adapter into the weights instead.\n\n"+
		"Chat page: a browser opening http://HOST:PORT/ gets a chat page served by\n"+
		"govinfer itself (no network needed); --no-webui turns it off.")
	var (
		dir        = fs.String("model", "", "checkpoint directory (config.json, safetensors, tokenizer, chat template), or a GGUF file")
		specConfig = fs.String("speculative-config", "", specConfigHelp)
		host       = fs.String("host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
		port       = fs.Int("port", 8000, "TCP port (0 picks a free one)")
		name       = fs.String("served-model-name", "", "model id clients use (default: the checkpoint directory's name)")
		maxLen     = fs.Int("max-model-len", 0, fmt.Sprintf("most prompt+completion tokens per request (default: the model's context, at most %d)", llm.DefaultMaxModelLen))
		maxSeqs    = fs.Int("max-num-seqs", engine.DefaultMaxNumSeqs, "requests generating at once (the batch size)")
		maxQueue   = fs.Int("max-queue", engine.DefaultMaxQueue, "requests waiting beyond the batch; more get 503")
		be         = fs.String("backend", "cpu", "compute backend: "+backendNames)
		threads    = fs.Int("threads", 0, "CPU worker threads (default: all cores)")
		device     = fs.Int("device", 0, "Vulkan device: 0 picks the best (discrete GPU first), N the Nth of the list")
		noCoopmat  = fs.Bool("no-coopmat", false, "Vulkan: run prefill products on the portable tiled shader even where the device has VK_KHR_cooperative_matrix")
		bf16In     = bf16InputsFlag(fs.FlagSet)
		amxTiles   = amxTilesFlag(fs.FlagSet)
		fmaTiles   = fmaTilesFlag(fs.FlagSet)
		apiKey     = fs.String("api-key", "", "require the key on the API endpoints, as \"Authorization: Bearer KEY\" or \"x-api-key: KEY\"")
		maxBody    = sizeFlag(fs.FlagSet, "max-body-bytes", httpapi.DefaultMaxBodyBytes, "largest request body accepted (413 past it); the default of 32 MiB takes a few-MB photo as a base64 data: URL")
		mmproj     = mmprojFlag(fs.FlagSet)
		mmLimit    = fs.String("limit-mm-per-prompt", "", "images per request at most, as vLLM's JSON '{\"image\": N}' (default 8; 0 does not load the vision tower)")
		mmKwargs   = fs.String("mm-processor-kwargs", "", "image processor settings, as vLLM's JSON: '{\"max_pixels\": N}' lowers the pixels (and so the tokens) of a resized image")
		mediaHosts = fs.String("allowed-media-domains", "", "comma-separated hosts (exact names or IP addresses) image URLs may be fetched from (default: none, data: URLs only); loopback and private addresses only when listed as addresses")
		mediaMax   = sizeFlag(fs.FlagSet, "media-max-bytes", httpapi.DefaultMediaMaxBytes, "largest image fetched from a URL")
		mediaTO    = fs.Duration("media-timeout", httpapi.DefaultMediaTimeout, "time limit of fetching an image from a URL")
		logPrompts = fs.Bool("log-prompts", false, "include prompt text in the request log (off: token counts only)")
		quantize   = quantizeFlag(fs.FlagSet)
		shutdown   = secondsFlag(fs.FlagSet, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long running and queued requests may take to finish before they are aborted (`seconds`, or a duration such as 45s; 0 aborts at once)")
		kvEvents   = fs.String("kv-events", "", "publish KV-cache events (vLLM's format, ZeroMQ PUB) on this endpoint, such as "+kvevents.DefaultEndpoint+" (default: off)")
		kvTopic    = fs.String("kv-events-topic", "", "topic of the KV-cache events (default: kv@<pod-id>@<served model name>)")
		podID      = fs.String("pod-id", "", "this replica's name in the KV events' topic (default: the host name)")
		kwargs     = fs.String("default-chat-template-kwargs", "", "JSON object of chat template variables every chat gets unless its chat_template_kwargs set them, e.g. '{\"enable_thinking\": false}'")
		maxConns   = fs.Int("max-connections", httpapi.DefaultMaxConnections, "most connections open at once; more get a 503 and are closed")
		idle       = fs.Duration("idle-timeout", httpapi.DefaultIdleTimeout, "close a keep-alive connection idle this long")
		readTO     = fs.Duration("read-timeout", httpapi.DefaultReadTimeout, "most time to read a request, headers and body (against slow clients)")
		noCache    = fs.Bool("no-prefix-cache", false, "prefill every prompt whole instead of resuming from the longest cached prefix (which gives the same results, bit for bit)")
		stateMem   = fs.String("state-memory", "", fmt.Sprintf("memory for all sequence state (KV caches, recurrent states, cached prefixes): a size (8GiB = 8*2^30 bytes, 8GB = 8*10^9) or a fraction in (0, 1] of the memory free after loading the weights (default: %v on a GPU, %v of the host's)",
			llm.DefaultStateMemoryFractionDevice, llm.DefaultStateMemoryFractionHost))
		kvType    = fs.String("kv-cache-dtype", "f32", "KV cache element type: f32 (exact), bf16 or f16 (half the memory per token)")
		maxTokens = fs.Int("max-tokens", 0, "cap every answer at N tokens, whatever a request asks (llama-server's -n), and bound those that ask none (default: no cap). Whatever the cap, an answer asked longer than the room its prompt leaves in --max-model-len (and, for one sequence, in --state-memory) is lowered to that room, with min_tokens and a thinking budget; it then ends with the endpoint's length reason. Only a prompt that leaves no token for an answer is refused (400)")
		storeMax  = fs.Int("responses-store-max", httpapi.DefaultResponsesStoreMax, "most responses the Responses API keeps (store: true) for previous_response_id and GET /v1/responses/{id}; the oldest go first (0 keeps none)")
		storeSize = sizeFlag(fs.FlagSet, "responses-store-bytes", int64(httpapi.DefaultResponsesStoreBytes), "most memory those stored responses take; the oldest go first")
		noWebUI   = fs.Bool("no-webui", false, "turn the chat page off: / and /ui/... answer 404 (by default browsers get the chat page at /, other clients a JSON description)")
		keyFile   = fs.String("reasoning-key-file", "", "file whose contents key the sealing of reasoning handed to clients (the Responses API's encrypted_content, the Messages API's thinking signatures), so that replicas and restarts sharing it read each other's (default: a random key made at start)")
		pcDisk    = addPrefixDiskFlags(fs.FlagSet)
		maxGrmr   = fs.Int("max-grammar-bytes", llm.DefaultMaxGrammarBytes, "largest grammar, regular expression or choice list a request may constrain its output with (structured_outputs, grammar, custom tools' formats); larger ones get a 400")
	)
	cpuMoE := cpuMoEFlags(fs.FlagSet)
	hostRoute := fs.Bool("host-moe-routing", false, hostRoutingUsage)
	mergeFormat := mergeFormatFlag(fs.FlagSet)
	var loraMods loraModules
	fs.Var(&loraMods, "lora-modules", "LoRA adapters to serve, as vLLM takes them: --lora-modules name=path [name=path ...] or the JSON form '{\"name\": ..., \"path\": ..., \"base_model_name\": ...}'; a request's model picks one (implies --enable-lora)")
	enableLoRA := fs.Bool("enable-lora", false, "serve LoRA adapters: --lora-modules at start, and POST /v1/load_lora_adapter and /v1/unload_lora_adapter at run time (behind --api-key; vLLM also wants VLLM_ALLOW_RUNTIME_LORA_UPDATING, govinfer does not)")
	maxLoRAs := fs.Int("max-loras", defaultMaxLoRAs, "most LoRA adapters attached at once (one batch may mix them all); a load past it gets a 400")
	maxLoRARank := fs.Int("max-lora-rank", defaultMaxLoRARank, "largest LoRA rank accepted; an adapter over it is refused (a 400 at run time)")
	loraMerge := fs.Bool("lora-merge", false, "add the one --lora-modules adapter into the weights while they load: every request runs with it, no adapter can be loaded at run time, and a BF16 checkpoint's matrices it touches are kept exact in F32 (twice their bytes) unless --lora-merge-format base; --quantize keeps its format")
	if code, done := parseFlags(fs, io, expandMultiValue(args, "lora-modules")); done {
		return code
	}
	moeLayers, moeErr := cpuMoE()
	if moeErr != nil {
		fmt.Fprintf(io.err, "govinfer serve: %v\n", moeErr)
		return exitUsage
	}
	switch {
	case *dir == "":
		fmt.Fprintln(io.err, "govinfer serve: --model is required (see govinfer serve --help)")
		return exitUsage
	case *port < 0 || *port > 65535:
		fmt.Fprintf(io.err, "govinfer serve: --port %d is not a TCP port\n", *port)
		return exitUsage
	case *maxLen < 0 || *maxSeqs < 1 || *maxQueue < 1 || *threads < 0 || *maxBody < 1:
		fmt.Fprintln(io.err, "govinfer serve: --max-model-len, --threads must be >= 0; --max-num-seqs, --max-queue, --max-body-bytes >= 1")
		return exitUsage
	case *shutdown < 0:
		fmt.Fprintln(io.err, "govinfer serve: --shutdown-timeout must not be negative")
		return exitUsage
	case checkQuantize(*quantize) != nil:
		fmt.Fprintf(io.err, "govinfer serve: %v\n", checkQuantize(*quantize))
		return exitUsage
	case *maxConns < 1 || *idle <= 0 || *readTO <= 0:
		fmt.Fprintln(io.err, "govinfer serve: --max-connections must be >= 1; --idle-timeout and --read-timeout positive")
		return exitUsage
	case llm.KVCacheTypes[*kvType] == 0:
		fmt.Fprintf(io.err, "govinfer serve: --kv-cache-dtype %q: want f32, bf16 or f16\n", *kvType)
		return exitUsage
	case *maxTokens < 0 || *storeMax < 0:
		fmt.Fprintln(io.err, "govinfer serve: --max-tokens and --responses-store-max must not be negative")
		return exitUsage
	case *maxLoRAs < 1 || *maxLoRARank < 1:
		fmt.Fprintln(io.err, "govinfer serve: --max-loras and --max-lora-rank must be >= 1")
		return exitUsage
	case *loraMerge && len(loraMods) != 1:
		fmt.Fprintf(io.err, "govinfer serve: --lora-merge merges one adapter; --lora-modules gives %d\n", len(loraMods))
		return exitUsage
	}
	if len(loraMods) > 0 {
		*enableLoRA = true
	}
	var err error
	if *storeMax == 0 {
		*storeMax = -1 // Config's "keep none"
	}
	var reasoningKey []byte
	if *keyFile != "" {
		if reasoningKey, err = os.ReadFile(*keyFile); err != nil {
			fmt.Fprintf(io.err, "govinfer serve: --reasoning-key-file: %v\n", err)
			return exitUsage
		}
		if len(bytes.TrimSpace(reasoningKey)) < 16 {
			fmt.Fprintf(io.err, "govinfer serve: --reasoning-key-file %s holds %d bytes; a key needs at least 16 (openssl rand -hex 32 > FILE makes one)\n", *keyFile, len(bytes.TrimSpace(reasoningKey)))
			return exitUsage
		}
		reasoningKey = bytes.TrimSpace(reasoningKey)
	}
	var memBytes int64
	var memFrac float64
	if *stateMem != "" {
		var err error
		if memBytes, memFrac, err = llm.ParseStateMemory(*stateMem); err != nil {
			fmt.Fprintf(io.err, "govinfer serve: --state-memory: %v\n", err)
			return exitUsage
		}
	}
	var templateArgs map[string]any
	if *kwargs != "" {
		if err := json.Unmarshal([]byte(*kwargs), &templateArgs); err != nil || templateArgs == nil {
			fmt.Fprintf(io.err, "govinfer serve: --default-chat-template-kwargs must be a JSON object: %q\n", *kwargs)
			return exitUsage
		}
	}
	spec, err := parseSpeculativeConfig(*specConfig, true)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer serve: --speculative-config: %v\n", err)
		return exitUsage
	}
	bo := backendOptions{name: *be, threads: *threads, device: *device, noCoopmat: *noCoopmat, bf16Inputs: *bf16In, noAMXTiles: !*amxTiles, noFMATiles: !*fmaTiles, log: io.err}
	backend, err := newBackend(bo)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer serve: %v\n", err)
		return exitUsage
	}
	defer backend.Close()
	ck, err := resolveModel(io, "--model", *dir, true)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer serve: %v\n", err)
		return exitUsage
	}
	*dir = ck.Path
	if *name == "" {
		*name = ck.Name // Org/Name for a Hugging Face cache's snapshot
	}

	start := time.Now()
	progress := loadProgress(io, *dir, *quantize)
	// The server outlives ctx (the first signal), which starts its drain.
	maxImages, maxImagePixels, err := parseMMFlags(*mmLimit, *mmKwargs)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer serve: %v\n", err)
		return exitUsage
	}
	mm := ""
	if maxImages >= 0 {
		if mm, err = findMMProj(io.err, *dir, *mmproj); err != nil {
			fmt.Fprintf(io.err, "govinfer serve: %v\n", err)
			return exitUsage
		}
	}
	var hosts []string
	for _, h := range strings.Split(*mediaHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	opts := llm.Options{
		Backend: backend, VisionBackend: visionBackend(bo), Progress: progress, Quantize: *quantize,
		MaxModelLen: *maxLen, MaxNumSeqs: *maxSeqs, MaxQueue: *maxQueue, MaxTokens: *maxTokens,
		DefaultTemplateArgs: templateArgs, MaxImages: maxImages, MaxImagePixels: maxImagePixels, MMProj: mm,
		NoPrefixCache: *noCache, StateMemory: memBytes, StateMemoryFraction: memFrac, KVCacheType: *kvType,
		Speculative: spec, CPUMoE: moeLayers, HostMoERouting: *hostRoute, MaxGrammarBytes: *maxGrmr,
		LoRA: loraMods, LoRAMerge: *loraMerge, LoRAMergeFormat: *mergeFormat, MaxLoRAs: *maxLoRAs, MaxLoRARank: *maxLoRARank,
	}
	pcDisk.options(&opts, io.err, "serve")
	// The server listens at once and answers 503 while it opens the model
	// (llm.Open(*dir, opts)).
	srv, err := httpapi.StartLoading(context.Background(), *dir, opts, httpapi.Config{
		Addr: net.JoinHostPort(*host, strconv.Itoa(*port)), ServedModelName: *name, APIKey: *apiKey,
		MaxBodyBytes: *maxBody, Log: io.err, LogPrompts: *logPrompts,
		AllowedMediaDomains: hosts, MediaMaxBytes: *mediaMax, MediaTimeout: *mediaTO,
		MaxConnections: *maxConns, IdleTimeout: *idle, ReadTimeout: *readTO,
		KVEvents: *kvEvents, KVEventsTopic: *kvTopic, PodID: *podID,
		ResponsesStoreMax: *storeMax, ResponsesStoreBytes: *storeSize, ReasoningKey: reasoningKey,
		NoWebUI: *noWebUI, EnableLoRA: *enableLoRA && !*loraMerge,
	})
	if err != nil {
		fmt.Fprintf(io.err, "govinfer serve: %v\n", err)
		return exitError
	}
	defer srv.Close()
	if err := srv.WaitReady(ctx); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(io.err, "govinfer serve: interrupted while loading")
			return exitError
		}
		fmt.Fprintf(io.err, "govinfer serve: %v\n", err)
		return exitError
	}
	lm := srv.Model()
	cfg := lm.Config()
	fmt.Fprintf(io.err, "loaded in %.1fs on %s: %d layers, vocab %d\n", time.Since(start).Seconds(), lm.BackendName(), cfg.NumLayers, cfg.VocabSize)
	fmt.Fprintln(io.err, lm.StateMemory())
	if h := lm.PrefixCacheHost(); h != "" {
		fmt.Fprintln(io.err, h)
	}
	if d := lm.PrefixCacheDisk(); d != "" {
		fmt.Fprintln(io.err, d)
	}
	for _, a := range lm.LoRAs() {
		how := "unmerged"
		if a.Merged {
			how = "merged into the weights"
		}
		fmt.Fprintf(io.err, "LoRA adapter %s (%s): rank %d, %d matrices, %.1f MiB, loaded in %.2fs, %s\n",
			a.Name, a.Path, a.Rank, a.Modules, float64(a.Bytes)/(1<<20), a.LoadTime.Seconds(), how)
	}
	if *noWebUI {
		fmt.Fprintf(io.out, "govinfer: serving on http://%s (OpenAI API under /v1)\n", srv.Addr())
	} else {
		fmt.Fprintf(io.out, "govinfer: serving on http://%s (OpenAI API under /v1, chat page at /)\n", srv.Addr())
	}
	if p := srv.Events(); p != nil {
		fmt.Fprintf(io.err, "govinfer serve: KV events on tcp://%s, topic %s\n", p.Addr(), p.Topic())
	}
	<-ctx.Done()
	return drain(io, srv, *shutdown)
}

// drain shuts the server down gracefully: it refuses new requests while
// those running or queued finish, for up to timeout, then aborts the rest
// and closes. It logs one line per phase.
func drain(io stdio, srv *httpapi.Server, timeout time.Duration) int {
	start := time.Now()
	running, waiting, _ := srv.InFlight()
	fmt.Fprintf(io.err, "govinfer serve: shutting down: draining (/health and new requests answer 503) with %d running and %d queued requests, for up to %s\n",
		running, waiting, timeout)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Drain(ctx); err != nil {
		running, waiting, requests := srv.InFlight()
		fmt.Fprintf(io.err, "govinfer serve: shutdown timeout after %.1fs: aborting %d running and %d queued requests (%d responses open)\n",
			time.Since(start).Seconds(), running, waiting, requests)
	} else {
		fmt.Fprintf(io.err, "govinfer serve: drained in %.1fs\n", time.Since(start).Seconds())
	}
	if err := srv.Close(); err != nil {
		fmt.Fprintf(io.err, "govinfer serve: shutdown: %v\n", err)
		return exitError
	}
	fmt.Fprintf(io.err, "govinfer serve: stopped after %.1fs\n", time.Since(start).Seconds())
	return exitOK
}

// parseMMFlags reads --limit-mm-per-prompt ('{"image": N}': llm's
// MaxImages, N = 0 giving -1, no tower) and --mm-processor-kwargs
// ('{"max_pixels": N}').
func parseMMFlags(limit, kwargs string) (maxImages, maxPixels int, err error) {
	if limit != "" {
		var l map[string]int
		if err := json.Unmarshal([]byte(limit), &l); err != nil {
			return 0, 0, fmt.Errorf("--limit-mm-per-prompt: want JSON such as '{\"image\": 4}': %v", err)
		}
		for k, n := range l {
			if k != "image" {
				return 0, 0, fmt.Errorf("--limit-mm-per-prompt: only \"image\" is supported, got %q", k)
			}
			if n < 0 {
				return 0, 0, fmt.Errorf("--limit-mm-per-prompt: image must not be negative, got %d", n)
			}
			maxImages = n
			if n == 0 {
				maxImages = -1
			}
		}
	}
	if kwargs != "" {
		var k map[string]any
		if err := json.Unmarshal([]byte(kwargs), &k); err != nil {
			return 0, 0, fmt.Errorf("--mm-processor-kwargs: want JSON such as '{\"max_pixels\": 1003520}': %v", err)
		}
		for name, v := range k {
			n, ok := v.(float64)
			if name != "max_pixels" || !ok || n < 1 || n != float64(int(n)) {
				return 0, 0, fmt.Errorf("--mm-processor-kwargs: only a positive integer max_pixels is supported, got %s=%v", name, v)
			}
			maxPixels = int(n)
		}
	}
	return maxImages, maxPixels, nil
}
