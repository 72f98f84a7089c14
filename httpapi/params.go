package httpapi

import (
	"strconv"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
)

// object reads the members of a decoded JSON object, answering type errors
// as 400s that name the field (see jsonvalue.Fields).
type object struct{ f jsonvalue.Fields }

// parseBody decodes a request body that must be a JSON object.
func parseBody(body []byte) (object, *apiError) {
	if len(body) == 0 {
		return object{}, badRequest("", "request body is empty; expected a JSON object")
	}
	v, err := jsonvalue.Decode(body)
	if err != nil {
		return object{}, badRequest("", "request body is not valid JSON: %v", err)
	}
	o, ok := v.(*jsonvalue.Object)
	if !ok {
		return object{}, badRequest("", "request body must be a JSON object, got %s", jsonvalue.Kind(v))
	}
	return object{jsonvalue.ObjectFields(o, "")}, nil
}

func fieldError(e *jsonvalue.FieldError) *apiError {
	if e == nil {
		return nil
	}
	return badRequest(e.Field, "%s", e.Message)
}

func (o object) get(key string) (any, bool) { return o.f.Get(key) }

func (o object) has(key string) bool { return o.f.Has(key) }

func (o object) str(key string) (string, bool, *apiError) {
	v, ok, err := o.f.Str(key)
	return v, ok, fieldError(err)
}

func (o object) boolean(key string) (bool, bool, *apiError) {
	v, ok, err := o.f.Bool(key)
	return v, ok, fieldError(err)
}

func (o object) float(key string) (float64, bool, *apiError) {
	v, ok, err := o.f.Float(key)
	return v, ok, fieldError(err)
}

func (o object) integer(key string) (int, bool, *apiError) {
	v, ok, err := o.f.Int(key)
	return v, ok, fieldError(err)
}

func (o object) obj(key string) (object, bool, *apiError) {
	v, ok, err := o.f.Object(key)
	return object{v}, ok, fieldError(err)
}

func (o object) array(key string) ([]any, bool, *apiError) {
	v, ok, err := o.f.Array(key)
	return v, ok, fieldError(err)
}

func (o object) intList(key string) ([]int, *apiError) {
	v, err := o.f.IntList(key)
	return v, fieldError(err)
}

// wireOptions are the request fields that shape the response, not the
// generation.
type wireOptions struct {
	stream       bool
	includeUsage bool
	// returnTokenIDs is vLLM's return_token_ids: a text completion's
	// choices carry their generated token ids (token_ids).
	returnTokenIDs bool
	// model is the model a response names (Server.responseModel).
	model string
}

// parseParams reads the sampling and stopping fields chat and text
// completions share; llm checks their values.
func parseParams(o object) (llm.Params, wireOptions, *apiError) {
	var p llm.Params
	var w wireOptions
	floats := []struct {
		key string
		dst **float64
	}{
		{"temperature", &p.Temperature}, {"top_p", &p.TopP}, {"min_p", &p.MinP}, {"repetition_penalty", &p.RepetitionPenalty},
	}
	for _, f := range floats {
		if v, ok, e := o.float(f.key); e != nil {
			return p, w, e
		} else if ok {
			*f.dst = llm.F64(v)
		}
	}
	for _, f := range []struct {
		key string
		dst *float64
	}{{"presence_penalty", &p.PresencePenalty}, {"frequency_penalty", &p.FrequencyPenalty}} {
		if v, _, e := o.float(f.key); e != nil {
			return p, w, e
		} else {
			*f.dst = v
		}
	}
	if v, ok, e := o.integer("top_k"); e != nil {
		return p, w, e
	} else if ok {
		p.TopK = llm.Int(v)
	}
	if v, ok, e := o.integer("seed"); e != nil {
		return p, w, e
	} else if ok {
		p.Seed = llm.Uint64(uint64(v))
	}
	if v, ok, e := o.integer("n"); e != nil {
		return p, w, e
	} else if ok {
		if v < 1 {
			return p, w, badRequest("n", "n must be between 1 and %d, got %d", llm.MaxN, v)
		}
		p.N = v
	}
	for _, key := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok, e := o.integer(key); e != nil {
			return p, w, e
		} else if ok {
			if v < 1 {
				return p, w, badRequest(key, "%s must be at least 1, got %d", key, v)
			}
			p.MaxTokens = v
		}
	}
	if v, _, e := o.integer("min_tokens"); e != nil {
		return p, w, e
	} else {
		p.MinTokens = v
	}
	if v, ok := o.get("stop"); ok {
		switch s := v.(type) {
		case string:
			p.Stop = []string{s}
		case []any:
			for i, e := range s {
				str, isStr := e.(string)
				if !isStr {
					return p, w, badRequest("stop", "stop[%d] must be a string, got %s", i, jsonvalue.Kind(e))
				}
				p.Stop = append(p.Stop, str)
			}
		default:
			return p, w, badRequest("stop", "stop must be a string or an array of strings, got %s", jsonvalue.Kind(v))
		}
	}
	var err *apiError
	if p.StopTokenIDs, err = o.intList("stop_token_ids"); err != nil {
		return p, w, err
	}
	if p.IgnoreEOS, _, err = o.boolean("ignore_eos"); err != nil {
		return p, w, err
	}
	if v, ok, e := o.boolean("skip_special_tokens"); e != nil {
		return p, w, e
	} else if ok {
		p.KeepSpecialTokens = !v
	}
	if w.stream, _, err = o.boolean("stream"); err != nil {
		return p, w, err
	}
	if w.returnTokenIDs, _, err = o.boolean("return_token_ids"); err != nil {
		return p, w, err
	}
	if so, ok, e := o.obj("stream_options"); e != nil {
		return p, w, e
	} else if ok {
		if w.includeUsage, _, err = so.boolean("include_usage"); err != nil {
			return p, w, err
		}
	}
	if p.LogitBias, err = parseLogitBias(o); err != nil {
		return p, w, err
	}
	if p.ResponseFormat, err = parseResponseFormat(o); err != nil {
		return p, w, err
	}
	if err = parseStructured(o, &p); err != nil {
		return p, w, err
	}
	return p, w, nil
}

// parseTemplateKwargs reads chat_template_kwargs, the chat template
// variables of a request (vLLM's extension of chat completions, which the
// Responses and Messages APIs take as well): enable_thinking, Qwen3.6's
// preserve_thinking, Qwen3.8's reasoning_effort or any other the template
// reads. Nil when absent.
func parseTemplateKwargs(o object) (map[string]any, *apiError) {
	kw, ok, err := o.obj("chat_template_kwargs")
	if err != nil || !ok {
		return nil, err
	}
	args := make(map[string]any, kw.f.Obj.Len())
	for _, k := range kw.f.Obj.Keys() {
		args[k], _ = kw.f.Obj.Get(k)
	}
	return args, nil
}

// parseLogitBias reads logit_bias: token ids (as the object's keys) to
// biases; llm checks the ids and clamps the biases.
func parseLogitBias(o object) (map[int]float64, *apiError) {
	lb, ok, err := o.obj("logit_bias")
	if err != nil || !ok {
		return nil, err
	}
	out := map[int]float64{}
	for _, k := range lb.f.Obj.Keys() {
		id, cerr := strconv.Atoi(k)
		if cerr != nil {
			return nil, badRequest("logit_bias", "logit_bias keys must be token ids, got %q", k)
		}
		v, _, ferr := lb.float(k)
		if ferr != nil {
			return nil, ferr
		}
		out[id] = v
	}
	return out, nil
}

// parseResponseFormat reads response_format: nil for none.
func parseResponseFormat(o object) (*llm.ResponseFormat, *apiError) {
	rf, ok, err := o.obj("response_format")
	if err != nil || !ok {
		return nil, err
	}
	typ, _, err := rf.str("type")
	if err != nil {
		return nil, err
	}
	f := &llm.ResponseFormat{Type: typ}
	if typ != "json_schema" {
		return f, nil
	}
	js, ok, err := rf.obj("json_schema")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badRequest("response_format.json_schema", "response_format.json_schema is required when type is json_schema")
	}
	if f.Strict, _, err = js.boolean("strict"); err != nil {
		return nil, err
	}
	if v, ok := js.get("schema"); ok {
		raw, merr := marshalValue(v)
		if merr != nil {
			return nil, badRequest("response_format.json_schema.schema", "response_format.json_schema.schema: %v", merr)
		}
		f.Schema = raw
	}
	return f, nil
}
