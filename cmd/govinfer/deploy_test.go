package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/httpapi"
	"github.com/govinfer/govinfer/llm"
	"gopkg.in/yaml.v3"
)

// The deploy/ directory's Dockerfiles and Kubernetes manifests name flags,
// ports, paths and metrics of the binary. TestDeployManifests reads them
// all and checks each against the binary: the flags in `serve --help`, the
// paths and metric names on a running server, so that they cannot rot.

const deployDir = "../../deploy"

// doc is one decoded YAML document.
type doc = map[string]any

// at walks a decoded YAML value by keys (string) and indexes (int).
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			a, ok := v.([]any)
			if !ok || k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func num(t *testing.T, v any, what string) int {
	t.Helper()
	n, ok := v.(int)
	if !ok {
		t.Fatalf("%s: %v is not an integer", what, v)
	}
	return n
}

// readManifests decodes every YAML document under deploy/kubernetes, and
// the EPP configs embedded in ConfigMaps, keyed by "kind/name".
func readManifests(t *testing.T) (map[string]doc, map[string]doc) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	objs, eppConfigs := map[string]doc{}, map[string]doc{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var d doc
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if d == nil {
				continue
			}
			key := str(d["kind"]) + "/" + str(at(d, "metadata", "name"))
			if d["kind"] == "ConfigMap" {
				key = filepath.Base(f) // the EPP config variants share a name
				if raw, ok := at(d, "data", "epp.yaml").(string); ok {
					var cfg doc
					if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
						t.Fatalf("%s: epp.yaml: %v", f, err)
					}
					eppConfigs[filepath.Base(f)] = cfg
				}
			}
			if _, dup := objs[key]; dup {
				t.Fatalf("%s defined twice", key)
			}
			objs[key] = d
		}
	}
	return objs, eppConfigs
}

// serveFlags returns the flag names `govinfer serve --help` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	code, out, _ := serve(context.Background(), "--help")
	if code != exitOK {
		t.Fatalf("serve --help: exit %d", code)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1) {
		flags[m[1]] = true
	}
	if !flags["port"] || !flags["kv-events"] {
		t.Fatalf("flags parsed from --help: %v", flags)
	}
	return flags
}

// commandLine checks a govinfer command line (subcommand and flags, as a
// Deployment's args or a Dockerfile's CMD) and returns its flag values.
func commandLine(t *testing.T, where string, args []string, flags map[string]bool) map[string]string {
	t.Helper()
	if len(args) == 0 || !slices.ContainsFunc(commands(), func(c command) bool { return c.name == args[0] }) {
		t.Fatalf("%s: %v does not start with a govinfer command", where, args)
	}
	if args[0] != "serve" {
		t.Fatalf("%s runs %q, not serve", where, args[0])
	}
	values := map[string]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: argument %q is not a flag", where, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !flags[name] {
			t.Errorf("%s: flag --%s is not a flag of govinfer serve", where, name)
		}
		if !hasValue && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value, i = args[i+1], i+1
		}
		values[name] = value
	}
	return values
}

// endpointPort returns the port of a ZeroMQ tcp:// endpoint.
func endpointPort(t *testing.T, ep string) int {
	t.Helper()
	i := strings.LastIndex(ep, ":")
	p, err := strconv.Atoi(ep[i+1:])
	if !strings.HasPrefix(ep, "tcp://") || i < 0 || err != nil {
		t.Fatalf("endpoint %q has no tcp port", ep)
	}
	return p
}

// liveServer starts the server on the test checkpoint with KV events on and
// returns its base URL and the metric names of a /metrics scrape.
func liveServer(t *testing.T) (string, map[string]bool) {
	t.Helper()
	srv, err := httpapi.StartLoading(context.Background(), servableCheckpoint(t), llm.Options{MaxModelLen: 1024},
		httpapi.Config{Addr: "127.0.0.1:0", ServedModelName: "Qwen/Qwen3.5-9B", KVEvents: "tcp://127.0.0.1:0", PodID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	if err := srv.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return base, names
}

// checkPath checks that the server answers path (GET, or POST with body)
// with want.
func checkPath(t *testing.T, base, method, path, body string, want int) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("%s %s: %d %s, want %d", method, path, resp.StatusCode, data, want)
	}
}

func TestDeployManifests(t *testing.T) {
	flags := serveFlags(t)
	objs, eppConfigs := readManifests(t)
	base, metrics := liveServer(t)

	// The model servers.
	dep := objs["Deployment/govinfer"]
	pod := at(dep, "spec", "template")
	ctr := at(pod, "spec", "containers", 0)
	var args []string
	for _, a := range at(ctr, "args").([]any) {
		args = append(args, str(a))
	}
	vals := commandLine(t, "Deployment govinfer", args, flags)
	portNames := map[string]int{}
	for _, p := range at(ctr, "ports").([]any) {
		portNames[str(at(p, "name"))] = num(t, at(p, "containerPort"), "containerPort")
	}
	if strconv.Itoa(portNames["http"]) != vals["port"] {
		t.Errorf("containerPort http %d, --port %s", portNames["http"], vals["port"])
	}
	kvPort := endpointPort(t, vals["kv-events"])
	if portNames["kv-events"] != kvPort {
		t.Errorf("containerPort kv-events %d, --kv-events %s", portNames["kv-events"], vals["kv-events"])
	}
	for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
		path, port := str(at(ctr, probe, "httpGet", "path")), str(at(ctr, probe, "httpGet", "port"))
		if path != "/health" || portNames[port] == 0 {
			t.Errorf("%s: path %q port %q, want /health on a container port", probe, path, port)
		}
		checkPath(t, base, "GET", path, "", 200)
	}
	shutdown, err := strconv.Atoi(vals["shutdown-timeout"])
	if err != nil {
		t.Fatalf("--shutdown-timeout %q: give it in seconds here", vals["shutdown-timeout"])
	}
	sleep := num(t, at(ctr, "lifecycle", "preStop", "sleep", "seconds"), "preStop sleep")
	grace := num(t, at(pod, "spec", "terminationGracePeriodSeconds"), "terminationGracePeriodSeconds")
	if grace < sleep+shutdown {
		t.Errorf("terminationGracePeriodSeconds %d < preStop sleep %d + --shutdown-timeout %d", grace, sleep, shutdown)
	}
	live := at(ctr, "livenessProbe")
	if window := num(t, at(live, "periodSeconds"), "period") * num(t, at(live, "failureThreshold"), "threshold"); window <= sleep+shutdown {
		t.Errorf("the liveness probe gives up after %ds, within a drain of %ds", window, sleep+shutdown)
	}
	podLabels := at(pod, "metadata", "labels").(map[string]any)
	matches := func(what string, sel any) {
		for k, v := range sel.(map[string]any) {
			if podLabels[k] != v {
				t.Errorf("%s selects %s=%v, which the pods lack", what, k, v)
			}
		}
	}
	model := vals["served-model-name"]

	svc := objs["Service/govinfer"]
	matches("Service govinfer", at(svc, "spec", "selector"))
	svcPort := num(t, at(svc, "spec", "ports", 0, "port"), "service port")
	if tp := str(at(svc, "spec", "ports", 0, "targetPort")); portNames[tp] == 0 {
		t.Errorf("Service targets port %q, which the container lacks", tp)
	}

	pool := objs["InferencePool/govinfer"]
	if pool["apiVersion"] != "inference.networking.k8s.io/v1" {
		t.Errorf("InferencePool apiVersion %v", pool["apiVersion"])
	}
	if n := num(t, at(pool, "spec", "targetPorts", 0, "number"), "targetPorts"); strconv.Itoa(n) != vals["port"] {
		t.Errorf("InferencePool targets port %d, the server listens on %s", n, vals["port"])
	}
	matches("InferencePool", at(pool, "spec", "selector", "matchLabels"))
	epp := objs["Service/"+str(at(pool, "spec", "endpointPickerRef", "name"))]
	if epp == nil || num(t, at(pool, "spec", "endpointPickerRef", "port", "number"), "epp port") != num(t, at(epp, "spec", "ports", 0, "port"), "epp service port") {
		t.Errorf("the InferencePool's endpoint picker %v is not the EPP Service", at(pool, "spec", "endpointPickerRef"))
	}

	// The EPP configs: block size, KV-events port, render endpoint.
	plugin := func(cfg doc, typ string) any {
		for _, p := range cfg["plugins"].([]any) {
			if at(p, "type") == typ {
				return p
			}
		}
		t.Fatalf("EPP config has no %s plugin", typ)
		return nil
	}
	if len(eppConfigs) != 2 {
		t.Errorf("%d EPP configs, want the approximate and the precise variants", len(eppConfigs))
	}
	precise := eppConfigs["epp-config-precise-prefix.yaml"]
	pp := plugin(precise, "precise-prefix-cache-producer")
	if bs := num(t, at(pp, "parameters", "tokenProcessorConfig", "blockSizeTokens"), "blockSizeTokens"); bs != httpapi.BlockSize {
		t.Errorf("precise blockSizeTokens %d, govinfer's block %d", bs, httpapi.BlockSize)
	}
	if p := num(t, at(pp, "parameters", "kvEventsConfig", "podDiscoveryConfig", "socketPort"), "socketPort"); p != kvPort {
		t.Errorf("the router dials KV events on %d, govinfer publishes on %d", p, kvPort)
	}
	tp := plugin(precise, "token-producer")
	u, err := url.Parse(str(at(tp, "parameters", "vllm", "url")))
	if err != nil || u.Hostname() != "govinfer" || u.Port() != strconv.Itoa(svcPort) {
		t.Errorf("token-producer url %v is not the govinfer Service on %d", at(tp, "parameters", "vllm", "url"), svcPort)
	}
	if m := str(at(tp, "parameters", "modelName")); m != model {
		t.Errorf("token-producer model %q, served %q", m, model)
	}
	// The token producer posts the request bodies to govinfer's render
	// endpoints, with its model name.
	chat, _ := json.Marshal(map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	checkPath(t, base, "POST", "/v1/chat/completions/render", string(chat), 200)
	checkPath(t, base, "POST", "/v1/completions/render", `{"model":"`+model+`","prompt":"hi"}`, 200)
	approx := plugin(eppConfigs["epp-config-approximate-prefix.yaml"], "approx-prefix-cache-producer")
	if bs := num(t, at(approx, "parameters", "blockSizeTokens"), "blockSizeTokens"); bs != httpapi.BlockSize {
		t.Errorf("approximate blockSizeTokens %d, govinfer's block %d", bs, httpapi.BlockSize)
	}

	// Autoscaling and scraping.
	keda := objs["ScaledObject/govinfer"]
	if str(at(keda, "spec", "scaleTargetRef", "name")) != "govinfer" {
		t.Errorf("KEDA scales %v", at(keda, "spec", "scaleTargetRef"))
	}
	query := str(at(keda, "spec", "triggers", 0, "metadata", "query"))
	if !strings.Contains(query, "vllm:num_requests_waiting") || !strings.Contains(query, `model_name="`+model+`"`) {
		t.Errorf("KEDA query %q: want vllm:num_requests_waiting of model %q", query, model)
	}
	pm := objs["PodMonitor/govinfer"]
	ep := at(pm, "spec", "podMetricsEndpoints", 0)
	if portNames[str(at(ep, "port"))] == 0 {
		t.Errorf("PodMonitor scrapes port %v", at(ep, "port"))
	}
	checkPath(t, base, "GET", str(at(ep, "path")), "", 200)

	// Every metric any manifest names is one the server exposes.
	named := 0
	for _, f := range mustGlob(t, filepath.Join(deployDir, "kubernetes", "*.yaml")) {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "image:") { // govinfer:cpu is an image
				continue
			}
			for _, m := range regexp.MustCompile(`\b(?:vllm|govinfer):[a-z_]+`).FindAllString(line, -1) {
				named++
				if !metrics[m] {
					t.Errorf("%s names metric %s, which /metrics does not expose", filepath.Base(f), m)
				}
			}
		}
	}
	if named == 0 {
		t.Error("no metric named in the manifests")
	}
}

func mustGlob(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("%s: %v", pattern, err)
	}
	return m
}

// dockerfile is a parsed Dockerfile: its instructions, continuation lines
// joined.
type dockerfile struct {
	name  string
	lines [][2]string // instruction, rest
}

func readDockerfile(t *testing.T, name string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	d := dockerfile{name: name}
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		ins, rest, _ := strings.Cut(line, " ")
		d.lines = append(d.lines, [2]string{strings.ToUpper(ins), strings.TrimSpace(rest)})
	}
	return d
}

func (d dockerfile) all(ins string) []string {
	var r []string
	for _, l := range d.lines {
		if l[0] == ins {
			r = append(r, l[1])
		}
	}
	return r
}

// TestDockerfiles checks what each Dockerfile copies, builds and runs: the
// sources exist, the Go image matches go.mod, the built binary is the one
// the final stage copies and runs, its command line is a valid serve, and
// it exposes the API and KV-events ports.
func TestDockerfiles(t *testing.T) {
	flags := serveFlags(t)
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	kvPort := strconv.Itoa(endpointPort(t, "tcp://*:5557"))
	for _, tc := range []struct {
		name    string
		cgo     string
		final   string
		backend string
	}{
		{"Dockerfile", "0", "scratch", "cpu"},
		{"Dockerfile.vulkan", "1", "debian:bookworm-slim", "vulkan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := readDockerfile(t, tc.name)
			froms := d.all("FROM")
			if len(froms) != 2 || !strings.HasPrefix(froms[0], "golang:"+string(goVersion[1])+"-") || !strings.HasSuffix(froms[0], " AS build") {
				t.Errorf("build stage %q: want golang:%s-* AS build (go.mod)", froms, goVersion[1])
			}
			if froms[len(froms)-1] != tc.final {
				t.Errorf("final stage %q, want %s", froms[len(froms)-1], tc.final)
			}
			var built, installed string
			for _, l := range d.lines {
				switch l[0] {
				case "COPY":
					f := strings.Fields(l[1])
					if strings.HasPrefix(f[0], "--from=") {
						if f[0] != "--from=build" || f[1] != built {
							t.Errorf("COPY %s: want the build stage's %s", l[1], built)
						}
						installed = f[2]
						continue
					}
					for _, src := range f[:len(f)-1] {
						if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
							t.Errorf("COPY %s: %v", src, err)
						}
					}
				case "RUN":
					if !strings.Contains(l[1], "go build") {
						continue
					}
					f := strings.Fields(l[1])
					if !slices.Contains(f, "CGO_ENABLED="+tc.cgo) {
						t.Errorf("go build without CGO_ENABLED=%s: %s", tc.cgo, l[1])
					}
					if i := slices.Index(f, "-o"); i >= 0 && i+1 < len(f) {
						built = f[i+1]
					}
					pkg := f[len(f)-1]
					if pkg != "./cmd/govinfer" {
						t.Errorf("builds %s", pkg)
					}
					if _, err := os.Stat(filepath.Join("../..", pkg, "main.go")); err != nil {
						t.Error(err)
					}
				}
			}
			if built == "" || installed == "" {
				t.Fatalf("no go build -o or no COPY of its output")
			}
			var entry, cmd []string
			if err := json.Unmarshal([]byte(d.all("ENTRYPOINT")[0]), &entry); err != nil || len(entry) != 1 || entry[0] != installed {
				t.Errorf("ENTRYPOINT %v: want [%q] (%v)", d.all("ENTRYPOINT"), installed, err)
			}
			if err := json.Unmarshal([]byte(d.all("CMD")[0]), &cmd); err != nil {
				t.Fatalf("CMD %v: %v", d.all("CMD"), err)
			}
			vals := commandLine(t, tc.name+" CMD", cmd, flags)
			if be := vals["backend"]; be != tc.backend && !(be == "" && tc.backend == "cpu") {
				t.Errorf("CMD backend %q, want %s", be, tc.backend)
			}
			if !strings.Contains(backendNames, tc.backend) {
				t.Errorf("backend %s is not one of %s", tc.backend, backendNames)
			}
			exposed := strings.Fields(strings.Join(d.all("EXPOSE"), " "))
			if !slices.Contains(exposed, vals["port"]) || !slices.Contains(exposed, kvPort) {
				t.Errorf("EXPOSE %v: want the API port %s and the KV-events port %s", exposed, vals["port"], kvPort)
			}
			if _, err := os.Stat(filepath.Join(deployDir, tc.name+".dockerignore")); err != nil {
				t.Error(err)
			}
		})
	}
}
