// Command routereplay is the routing experiment of "Running many replicas"
// (README): it replays multi-turn conversations over several servers,
// routed round robin and by an index rebuilt from the servers' KV events
// the way the llm-d router builds it (block keys recomputed from token ids,
// package internal/kvroute), and compares the prefix hit rate, the tokens
// prefilled and the mean time to first token. It is test tooling, not a
// product feature.
//
// Against running servers (any that expose vLLM's render endpoint, usage
// with cached_tokens and KV events):
//
//	go run ./scripts/routereplay --servers http://h1:8000,http://h2:8000,http://h3:8000 \
//	    --events tcp://h1:5557,tcp://h2:5557,tcp://h3:5557
//
// or starting three govinfer servers on loopback itself, fresh for each
// policy:
//
//	go build -o bin/govinfer ./cmd/govinfer
//	go run ./scripts/routereplay --spawn 3 --govinfer bin/govinfer --model DIR
//
// Against running servers the two policies use different conversations
// (seeds), so that the second run does not reuse the first one's prefixes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/govinfer/govinfer/internal/kvroute"
)

func main() {
	var (
		servers  = flag.String("servers", "", "comma-separated base URLs of running servers")
		events   = flag.String("events", "", "comma-separated KV-events endpoints of those servers, in the same order")
		spawn    = flag.Int("spawn", 0, "start this many govinfer servers on loopback instead (fresh for each policy)")
		bin      = flag.String("govinfer", "bin/govinfer", "with --spawn: the govinfer binary")
		modelDir = flag.String("model", "", "with --spawn: the checkpoint directory")
		threads  = flag.Int("threads", 1, "with --spawn: CPU threads per server")
		stateMem = flag.String("state-memory", "", "with --spawn: each server's --state-memory (default: the server's); a budget smaller than all conversations' state shows routing under cache pressure")
		name     = flag.String("served-model-name", "", "the served model name (default: what the first server's /v1/models lists)")
		policy   = flag.String("policy", "both", "round-robin, events or both")
		convs    = flag.Int("conversations", 20, "conversations replayed")
		turns    = flag.Int("turns", 4, "user turns per conversation")
		maxTok   = flag.Int("max-tokens", 32, "most tokens per answer")
		seed     = flag.Uint64("seed", 1, "seed of the conversations' text")
		block    = flag.Int("block-size", 64, "the router's block size in tokens (govinfer's vllm:cache_config_info block_size)")
		settle   = flag.Duration("settle", 100*time.Millisecond, "wait after each response for its KV events")
		jsonOut  = flag.String("json", "", "write the results, per request, to this file")
		verbose  = flag.Bool("v", false, "one line per request")
	)
	flag.Parse()
	if err := run(options{
		servers: split(*servers), events: split(*events), spawn: *spawn, bin: *bin, modelDir: *modelDir, threads: *threads, stateMem: *stateMem,
		name: *name, policy: *policy, block: *block, convs: *convs, turns: *turns, maxTok: *maxTok, seed: *seed,
		settle: *settle, jsonOut: *jsonOut, verbose: *verbose,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "routereplay:", err)
		os.Exit(1)
	}
}

type options struct {
	servers, events             []string
	spawn                       int
	bin, modelDir, name, policy string
	stateMem                    string
	threads, block              int
	convs, turns, maxTok        int
	seed                        uint64
	settle                      time.Duration
	jsonOut                     string
	verbose                     bool
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(o options) error {
	policies := []string{kvroute.RoundRobin, kvroute.Events}
	switch o.policy {
	case "both":
	case kvroute.RoundRobin, kvroute.Events:
		policies = []string{o.policy}
	default:
		return fmt.Errorf("--policy %q: want round-robin, events or both", o.policy)
	}
	switch {
	case o.spawn > 0 && (o.modelDir == "" || len(o.servers) > 0):
		return errors.New("--spawn needs --model and no --servers")
	case o.spawn == 0 && (len(o.servers) == 0 || len(o.servers) != len(o.events)):
		return errors.New("give --servers and as many --events, or --spawn N --model DIR")
	}
	ctx := context.Background()
	var log io.Writer
	if o.verbose {
		log = os.Stderr
	}
	var results []*kvroute.Result
	for i, p := range policies {
		servers := make([]kvroute.Server, len(o.servers))
		for j := range servers {
			servers[j] = kvroute.Server{URL: strings.TrimRight(o.servers[j], "/"), Events: o.events[j]}
		}
		seed := o.seed
		var stop func()
		if o.spawn > 0 {
			var err error
			if servers, stop, err = start(o); err != nil {
				return err
			}
		} else {
			seed += uint64(i) * 1000 // no prefix shared with the previous policy's run
		}
		name := o.name
		if name == "" {
			var err error
			if name, err = modelName(servers[0].URL); err != nil {
				return err
			}
		}
		res, err := kvroute.Replay(ctx, kvroute.Config{Servers: servers, Model: name, BlockSize: o.block, Policy: p,
			Conversations: o.convs, Turns: o.turns, MaxTokens: o.maxTok, Seed: seed, Settle: o.settle, Log: log})
		if stop != nil {
			stop()
		}
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	fmt.Printf("| policy | requests | prompt tokens | cached tokens | prefix hit rate | prefilled tokens | mean TTFT | event batches |\n")
	fmt.Printf("| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range results {
		fmt.Printf("| %s | %d | %d | %d | %.1f%% | %d | %.1f ms | %d |\n", r.Policy, r.Requests, r.PromptTokens, r.Cached,
			100*r.HitRate, r.Prefilled, float64(r.MeanTTFT.Microseconds())/1e3, r.EventBatches)
	}
	if len(results) == 2 && results[1].Prefilled > 0 {
		fmt.Printf("\nround robin prefilled %.2fx the tokens event routing did\n", float64(results[0].Prefilled)/float64(results[1].Prefilled))
	}
	for _, r := range results {
		if r.SpanMismatches > 0 {
			fmt.Printf("%s: %d requests whose cached tokens differ from the events' whole spans\n", r.Policy, r.SpanMismatches)
		}
	}
	if o.jsonOut != "" {
		data, err := json.MarshalIndent(results, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(o.jsonOut, data, 0o644)
	}
	return nil
}

// modelName returns the first model a server lists.
func modelName(base string) (string, error) {
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var m struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Data) == 0 {
		return "", fmt.Errorf("%s/v1/models lists no model (%v)", base, err)
	}
	return m.Data[0].ID, nil
}

// freePort returns a free loopback TCP port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs o.spawn govinfer servers on loopback with KV events and waits
// until they are ready; stop drains them.
func start(o options) ([]kvroute.Server, func(), error) {
	var servers []kvroute.Server
	var cmds []*exec.Cmd
	stop := func() {
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGTERM)
		}
		for _, c := range cmds {
			c.Wait()
		}
	}
	for i := range o.spawn {
		hp, err := freePort()
		if err != nil {
			stop()
			return nil, nil, err
		}
		ep, err := freePort()
		if err != nil {
			stop()
			return nil, nil, err
		}
		args := []string{"serve", "--model", o.modelDir, "--host", "127.0.0.1", "--port", strconv.Itoa(hp),
			"--threads", strconv.Itoa(o.threads), "--kv-events", fmt.Sprintf("tcp://127.0.0.1:%d", ep),
			"--pod-id", fmt.Sprintf("replay-%d", i), "--shutdown-timeout", "0"}
		if o.name != "" {
			args = append(args, "--served-model-name", o.name)
		}
		if o.stateMem != "" {
			args = append(args, "--state-memory", o.stateMem)
		}
		c := exec.Command(o.bin, args...)
		if o.verbose {
			c.Stderr = os.Stderr
		}
		if err := c.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("starting %s: %w", o.bin, err)
		}
		cmds = append(cmds, c)
		servers = append(servers, kvroute.Server{URL: fmt.Sprintf("http://127.0.0.1:%d", hp), Events: fmt.Sprintf("tcp://127.0.0.1:%d", ep)})
	}
	deadline := time.Now().Add(10 * time.Minute)
	for _, s := range servers {
		for {
			resp, err := http.Get(s.URL + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				stop()
				return nil, nil, fmt.Errorf("%s not ready in 10 minutes", s.URL)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return servers, stop, nil
}
