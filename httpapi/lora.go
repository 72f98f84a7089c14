package httpapi

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
	"github.com/valyala/fasthttp"
)

// LoRA adapters, as vLLM serves them: /v1/models lists each attached
// adapter with its parent (the base's id), a request's "model" naming an
// adapter runs with it on every endpoint, and with Config.EnableLoRA
// adapters are loaded and unloaded at run time (POST
// /v1/load_lora_adapter and /v1/unload_lora_adapter). llama-server's
// per-request "lora": [{"id", "scale"}] list and its GET /lora-adapters
// are taken too.

// loraCard is an adapter as /v1/models lists it (vLLM's ModelCard for a
// LoRA: root is its path, parent the base model's id).
type loraCard struct {
	ID      string  `json:"id"`
	Object  string  `json:"object"`
	Created int64   `json:"created"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  string  `json:"parent"`
	Rank    int     `json:"lora_rank"`
	Scale   float64 `json:"lora_scale"`
	Merged  bool    `json:"lora_merged,omitempty"`
}

// loraCards returns the attached adapters' cards.
func (s *Server) loraCards() []any {
	var out []any
	for _, a := range s.lm.LoRAs() {
		out = append(out, s.loraCard(a))
	}
	return out
}

func (s *Server) loraCard(a llm.LoRAInfo) loraCard {
	return loraCard{ID: a.Name, Object: "model", Created: s.created, OwnedBy: "govinfer", Root: a.Path, Parent: s.name,
		Rank: a.Rank, Scale: a.Scale, Merged: a.Merged}
}

// modelNotFound is vLLM's 404 for a model that is neither the base nor an
// attached adapter.
func modelNotFound(name string) *apiError {
	return &apiError{status: fasthttp.StatusNotFound, message: fmt.Sprintf("The model `%s` does not exist.", name), param: "model"}
}

// knownModel reports whether name is the served model or an attached
// adapter.
func (s *Server) knownModel(name string) bool {
	if name == s.name {
		return true
	}
	if !s.loaded.Load() {
		return false
	}
	_, ok := s.lm.LoRA(name)
	return ok
}

// requestLoRA returns the adapters a request runs with: the one its
// "model" names (vLLM), then those of llama-server's "lora" list of
// {"id", "scale"} (ids as GET /lora-adapters lists them).
// responseModel returns the model a response names: the adapter the
// request's "model" chose, as vLLM answers, or the served model.
func (s *Server) responseModel(o object) string {
	if name, ok, err := o.str("model"); err == nil && ok && name != s.name {
		if _, found := s.lm.LoRA(name); found {
			return name
		}
	}
	return s.name
}

func (s *Server) requestLoRA(o object) ([]llm.LoRAUse, *apiError) {
	var uses []llm.LoRAUse
	if name, ok, err := o.str("model"); err != nil {
		return nil, err
	} else if ok && name != s.name {
		if _, found := s.lm.LoRA(name); !found {
			return nil, modelNotFound(name)
		}
		uses = append(uses, llm.LoRAUse{Name: name})
	}
	list, ok, err := o.array("lora")
	if err != nil {
		return nil, err
	}
	if !ok {
		s.countLoRA(uses)
		return uses, nil
	}
	byID := map[int]string{}
	for _, a := range s.lm.LoRAs() {
		byID[a.ID] = a.Name
	}
	for i, v := range list {
		field := fmt.Sprintf("lora[%d]", i)
		e, isObj := v.(*jsonvalue.Object)
		if !isObj {
			return nil, badRequest(field, "%s must be an object {\"id\": N, \"scale\": X}", field)
		}
		u, aerr := loraEntry(object{jsonvalue.ObjectFields(e, field)}, field, byID)
		if aerr != nil {
			return nil, aerr
		}
		name := u.Name
		// The list's scale overrides the model's adapter.
		uses = dropLoRA(uses, name)
		uses = append(uses, u)
	}
	s.countLoRA(uses)
	return uses, nil
}

// countLoRA counts a request for each adapter it chose
// (govinfer:lora_requests_total).
func (s *Server) countLoRA(uses []llm.LoRAUse) {
	for _, u := range uses {
		c, _ := s.loraRequests.LoadOrStore(u.Name, new(atomic.Uint64))
		c.(*atomic.Uint64).Add(1)
	}
}

// parseJSONArray reads a body that is a JSON array.
func parseJSONArray(body []byte) ([]any, *apiError) {
	v, err := jsonvalue.Decode(body)
	if err != nil {
		return nil, badRequest("", "the body is not valid JSON: %v", err)
	}
	a, ok := v.([]any)
	if !ok {
		return nil, badRequest("", "the body must be a JSON array")
	}
	return a, nil
}

// loraEntry reads one {"id", "scale"} of a llama-server lora list.
func loraEntry(o object, field string, byID map[int]string) (llm.LoRAUse, *apiError) {
	id, ok, aerr := o.integer("id")
	if aerr != nil {
		return llm.LoRAUse{}, aerr
	}
	name, found := byID[id]
	if !ok || !found {
		return llm.LoRAUse{}, badRequest(field+".id", "%s.id must be the id of a loaded LoRA adapter (GET /lora-adapters lists them)", field)
	}
	u := llm.LoRAUse{Name: name}
	sc, ok, aerr := o.float("scale")
	if aerr != nil {
		return llm.LoRAUse{}, aerr
	}
	if ok {
		u.Scale = llm.F64(sc)
	}
	return u, nil
}

func dropLoRA(uses []llm.LoRAUse, name string) []llm.LoRAUse {
	out := uses[:0]
	for _, u := range uses {
		if u.Name != name {
			out = append(out, u)
		}
	}
	return out
}

// loraAdapterRequest is vLLM's LoadLoRAAdapterRequest and
// UnloadLoRAAdapterRequest.
type loraAdapterRequest struct {
	name, path string
}

func parseLoRAAdapterRequest(body []byte) (loraAdapterRequest, *apiError) {
	var r loraAdapterRequest
	o, aerr := parseBody(body)
	if aerr != nil {
		return r, aerr
	}
	if r.name, _, aerr = o.str("lora_name"); aerr != nil {
		return r, aerr
	}
	r.path, _, aerr = o.str("lora_path")
	return r, aerr
}

// handleLoadLoRA answers vLLM's POST /v1/load_lora_adapter: 200 with
// vLLM's plain-text success line, 400 for a bad request or an adapter that
// cannot be loaded (the error says why), 404 for a path that does not
// exist.
func (s *Server) handleLoadLoRA(ctx *fasthttp.RequestCtx) {
	r, aerr := parseLoRAAdapterRequest(ctx.PostBody())
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	if r.name == "" || r.path == "" {
		writeError(ctx, fasthttp.StatusBadRequest, "Both 'lora_name' and 'lora_path' must be provided.", "")
		return
	}
	if s.knownModel(r.name) {
		writeError(ctx, fasthttp.StatusBadRequest, fmt.Sprintf("The lora adapter '%s' has already been loaded.", r.name), "lora_name")
		return
	}
	info, err := s.lm.LoadLoRA(ctx, r.name, r.path)
	if err != nil {
		// vLLM answers 404 for an adapter it cannot find, 400 otherwise.
		status := fasthttp.StatusBadRequest
		if errors.Is(err, fs.ErrNotExist) {
			status = fasthttp.StatusNotFound
		}
		writeError(ctx, status, strings.TrimPrefix(err.Error(), "llm: "), "lora_path")
		return
	}
	s.logf("loaded LoRA adapter %q from %s: rank %d, %d modules, %d bytes in %s", info.Name, info.Path, info.Rank, info.Modules, info.Bytes, info.LoadTime.Round(1e6))
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(fmt.Sprintf("Success: LoRA adapter '%s' added successfully.", r.name))
}

// handleUnloadLoRA answers vLLM's POST /v1/unload_lora_adapter. Requests
// running with the adapter finish with it.
func (s *Server) handleUnloadLoRA(ctx *fasthttp.RequestCtx) {
	r, aerr := parseLoRAAdapterRequest(ctx.PostBody())
	if aerr != nil {
		writeAPIError(ctx, aerr)
		return
	}
	if r.name == "" {
		writeError(ctx, fasthttp.StatusBadRequest, "either 'lora_name' and 'lora_int_id' needs to be provided.", "")
		return
	}
	if err := s.lm.UnloadLoRA(r.name); err != nil {
		if errors.Is(err, llm.ErrUnknownLoRA) {
			writeError(ctx, fasthttp.StatusNotFound, fmt.Sprintf("The lora adapter '%s' cannot be found.", r.name), "lora_name")
			return
		}
		writeError(ctx, fasthttp.StatusBadRequest, strings.TrimPrefix(err.Error(), "llm: "), "lora_name")
		return
	}
	s.logf("unloaded LoRA adapter %q", r.name)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(fmt.Sprintf("Success: LoRA adapter '%s' removed successfully.", r.name))
}

// llamaLoRA is an adapter as llama-server's GET /lora-adapters lists it.
type llamaLoRA struct {
	ID    int     `json:"id"`
	Path  string  `json:"path"`
	Scale float64 `json:"scale"`
}

// handleLoRAAdapters answers llama-server's GET /lora-adapters (the
// adapters with their ids, paths and default scales) and POST
// /lora-adapters (a list of {"id", "scale"} setting default scales).
func (s *Server) handleLoRAAdapters(ctx *fasthttp.RequestCtx) {
	if ctx.IsPost() {
		v, err := parseJSONArray(ctx.PostBody())
		if err != nil {
			writeAPIError(ctx, err)
			return
		}
		byID := map[int]string{}
		for _, a := range s.lm.LoRAs() {
			byID[a.ID] = a.Name
		}
		for i, e := range v {
			field := fmt.Sprintf("[%d]", i)
			el, isObj := e.(*jsonvalue.Object)
			if !isObj {
				writeError(ctx, fasthttp.StatusBadRequest, field+` must be {"id": N, "scale": X}`, "")
				return
			}
			u, aerr := loraEntry(object{jsonvalue.ObjectFields(el, field)}, field, byID)
			if aerr == nil && u.Scale == nil {
				aerr = badRequest(field+".scale", "%s.scale is required", field)
			}
			if aerr != nil {
				writeAPIError(ctx, aerr)
				return
			}
			name, sc := u.Name, *u.Scale
			if err := s.lm.SetLoRAScale(name, sc); err != nil {
				writeError(ctx, fasthttp.StatusBadRequest, strings.TrimPrefix(err.Error(), "llm: "), "")
				return
			}
		}
	}
	out := []llamaLoRA{}
	for _, a := range s.lm.LoRAs() {
		out = append(out, llamaLoRA{ID: a.ID, Path: a.Path, Scale: a.Scale})
	}
	writeJSON(ctx, out)
}

// writeLoRAMetrics writes vLLM's vllm:lora_requests_info gauge: its
// labels name the adapters of the running and the waiting requests
// (comma-separated) and the adapter bound; its value is the time.
func (s *Server) writeLoRAMetrics(w *promWriter, now float64) {
	st := s.lm.LoRAStats()
	maxLoRAs, _ := s.lm.LoRALimits()
	w.header("vllm:lora_requests_info", "Running stats on LoRA requests: the adapters of the running and the waiting requests.", "gauge")
	w.b = append(w.b, "vllm:lora_requests_info{max_lora="...)
	w.b = strconv.AppendQuote(w.b, strconv.Itoa(maxLoRAs))
	w.b = append(w.b, ",running_lora_adapters="...)
	w.b = strconv.AppendQuote(w.b, strings.Join(st.Running, ","))
	w.b = append(w.b, ",waiting_lora_adapters="...)
	w.b = strconv.AppendQuote(w.b, strings.Join(st.Waiting, ","))
	w.b = append(w.b, '}')
	w.value(now)
	var names []string
	s.loraRequests.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
	sort.Strings(names)
	w.header("govinfer:lora_requests_total", "Requests that chose each LoRA adapter.", "counter")
	for _, n := range names {
		c, _ := s.loraRequests.Load(n)
		w.labels("govinfer:lora_requests_total")
		w.b = append(w.b, ",lora_name="...)
		w.b = strconv.AppendQuote(w.b, n)
		w.b = append(w.b, '}')
		w.uint(c.(*atomic.Uint64).Load())
	}
	w.header("govinfer:lora_adapters", "LoRA adapters attached.", "gauge")
	w.b = append(w.b, "govinfer:lora_adapters"...)
	w.b = append(w.b, w.label...)
	w.value(float64(len(s.lm.LoRAs())))
}
