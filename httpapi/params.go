package httpapi

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/govinfer/govinfer/chattemplate"
	"github.com/govinfer/govinfer/sample"
)

// object wraps a decoded JSON object with getters that check types and
// name the field in their errors. A null value counts as absent.
type object struct {
	o      *chattemplate.Object
	prefix string // field path of the object, "" at the top
}

// parseBody decodes a request body that must be a JSON object.
func parseBody(body []byte) (object, *apiError) {
	if len(body) == 0 {
		return object{}, badRequest("", "request body is empty; expected a JSON object")
	}
	v, err := chattemplate.DecodeJSON(body)
	if err != nil {
		return object{}, badRequest("", "request body is not valid JSON: %v", err)
	}
	o, ok := v.(*chattemplate.Object)
	if !ok {
		return object{}, badRequest("", "request body must be a JSON object, got %s", jsonKind(v))
	}
	return object{o: o}, nil
}

func (o object) name(key string) string {
	if o.prefix == "" {
		return key
	}
	return o.prefix + "." + key
}

func (o object) get(key string) (any, bool) {
	if o.o == nil {
		return nil, false
	}
	v, ok := o.o.Get(key)
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

func (o object) has(key string) bool {
	_, ok := o.get(key)
	return ok
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case []any:
		return "an array"
	case *chattemplate.Object:
		return "an object"
	}
	return "an unknown value"
}

func (o object) str(key string) (string, bool, *apiError) {
	v, ok := o.get(key)
	if !ok {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", false, badRequest(o.name(key), "%s must be a string, got %s", o.name(key), jsonKind(v))
	}
	return s, true, nil
}

func (o object) boolean(key string) (bool, bool, *apiError) {
	v, ok := o.get(key)
	if !ok {
		return false, false, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, false, badRequest(o.name(key), "%s must be a boolean, got %s", o.name(key), jsonKind(v))
	}
	return b, true, nil
}

func (o object) float(key string) (float64, bool, *apiError) {
	v, ok := o.get(key)
	if !ok {
		return 0, false, nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		return 0, false, badRequest(o.name(key), "%s must be a number, got %s", o.name(key), jsonKind(v))
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) {
		return 0, false, badRequest(o.name(key), "%s: %s is out of range", o.name(key), n)
	}
	return f, true, nil
}

func (o object) integer(key string) (int, bool, *apiError) {
	f, ok, err := o.float(key)
	if err != nil || !ok {
		return 0, ok, err
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false, badRequest(o.name(key), "%s must be an integer, got %v", o.name(key), f)
	}
	return int(f), true, nil
}

func (o object) obj(key string) (object, bool, *apiError) {
	v, ok := o.get(key)
	if !ok {
		return object{}, false, nil
	}
	ob, isObj := v.(*chattemplate.Object)
	if !isObj {
		return object{}, false, badRequest(o.name(key), "%s must be an object, got %s", o.name(key), jsonKind(v))
	}
	return object{o: ob, prefix: o.name(key)}, true, nil
}

func (o object) array(key string) ([]any, bool, *apiError) {
	v, ok := o.get(key)
	if !ok {
		return nil, false, nil
	}
	a, isArr := v.([]any)
	if !isArr {
		return nil, false, badRequest(o.name(key), "%s must be an array, got %s", o.name(key), jsonKind(v))
	}
	return a, true, nil
}

// intList reads an array of integers.
func (o object) intList(key string) ([]int, *apiError) {
	a, _, err := o.array(key)
	if err != nil {
		return nil, err
	}
	out := make([]int, len(a))
	for i, v := range a {
		n, ok := v.(json.Number)
		f, perr := strconv.ParseFloat(string(n), 64)
		if !ok || perr != nil || f != math.Trunc(f) || math.Abs(f) > 1<<31 {
			return nil, badRequest(o.name(key), "%s[%d] must be an integer, got %s", o.name(key), i, jsonKind(v))
		}
		out[i] = int(f)
	}
	return out, nil
}

// genDefaults are the sampling defaults of generation_config.json.
type genDefaults struct {
	Temperature       *float64 `json:"temperature"`
	TopK              *int     `json:"top_k"`
	TopP              *float64 `json:"top_p"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
}

// genRequest holds the generation fields chat and text completions share.
type genRequest struct {
	n            int
	maxTokens    int // 0: not given
	minTokens    int
	params       sample.Params
	seeded       bool
	stop         []string
	stopIDs      []int
	ignoreEOS    bool
	logprobs     bool
	topLogprobs  int
	stream       bool
	includeUsage bool
	skipSpecial  bool
}

// parseGen reads the sampling and stopping fields of a request.
func parseGen(o object, d genDefaults) (genRequest, *apiError) {
	g := genRequest{n: 1, skipSpecial: true}
	p := &g.params
	p.Temperature, p.TopP, p.RepetitionPenalty = 1, 1, 1
	if d.Temperature != nil {
		p.Temperature = *d.Temperature
	}
	if d.TopK != nil {
		p.TopK = *d.TopK
	}
	if d.TopP != nil {
		p.TopP = *d.TopP
	}
	if d.MinP != nil {
		p.MinP = *d.MinP
	}
	if d.RepetitionPenalty != nil {
		p.RepetitionPenalty = *d.RepetitionPenalty
	}
	var err *apiError
	floats := []struct {
		key string
		dst *float64
	}{
		{"temperature", &p.Temperature}, {"top_p", &p.TopP}, {"min_p", &p.MinP},
		{"presence_penalty", &p.PresencePenalty}, {"frequency_penalty", &p.FrequencyPenalty},
		{"repetition_penalty", &p.RepetitionPenalty},
	}
	for _, f := range floats {
		if v, ok, e := o.float(f.key); e != nil {
			return g, e
		} else if ok {
			*f.dst = v
		}
	}
	if v, ok, e := o.integer("top_k"); e != nil {
		return g, e
	} else if ok {
		if v < -1 {
			return g, badRequest("top_k", "top_k must be -1 (disabled) or positive, got %d", v)
		}
		p.TopK = v
	}
	if verr := p.Validate(); verr != nil {
		return g, badRequest(paramOf(verr.Error()), "%v", verr)
	}
	if p.RepetitionPenalty == 0 {
		return g, badRequest("repetition_penalty", "repetition_penalty must be > 0, got 0")
	}
	if v, ok, e := o.integer("seed"); e != nil {
		return g, e
	} else if ok {
		p.Seed, g.seeded = uint64(v), true
	} else {
		p.Seed = rand.Uint64()
	}
	if v, ok, e := o.integer("n"); e != nil {
		return g, e
	} else if ok {
		if v < 1 || v > 16 {
			return g, badRequest("n", "n must be between 1 and 16, got %d", v)
		}
		g.n = v
	}
	for _, key := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok, e := o.integer(key); e != nil {
			return g, e
		} else if ok {
			if v < 1 {
				return g, badRequest(key, "%s must be at least 1, got %d", key, v)
			}
			g.maxTokens = v
		}
	}
	if v, ok, e := o.integer("min_tokens"); e != nil {
		return g, e
	} else if ok {
		if v < 0 {
			return g, badRequest("min_tokens", "min_tokens must not be negative, got %d", v)
		}
		g.minTokens = v
	}
	if g.maxTokens > 0 && g.minTokens > g.maxTokens {
		return g, badRequest("min_tokens", "min_tokens (%d) must not exceed max_tokens (%d)", g.minTokens, g.maxTokens)
	}
	if v, ok := o.get("stop"); ok {
		switch s := v.(type) {
		case string:
			g.stop = []string{s}
		case []any:
			for i, e := range s {
				str, isStr := e.(string)
				if !isStr {
					return g, badRequest("stop", "stop[%d] must be a string, got %s", i, jsonKind(e))
				}
				g.stop = append(g.stop, str)
			}
		default:
			return g, badRequest("stop", "stop must be a string or an array of strings, got %s", jsonKind(v))
		}
	}
	if g.stopIDs, err = o.intList("stop_token_ids"); err != nil {
		return g, err
	}
	if g.ignoreEOS, _, err = o.boolean("ignore_eos"); err != nil {
		return g, err
	}
	if v, ok, e := o.boolean("skip_special_tokens"); e != nil {
		return g, e
	} else if ok {
		g.skipSpecial = v
	}
	if g.stream, _, err = o.boolean("stream"); err != nil {
		return g, err
	}
	if so, ok, e := o.obj("stream_options"); e != nil {
		return g, e
	} else if ok {
		if g.includeUsage, _, err = so.boolean("include_usage"); err != nil {
			return g, err
		}
	}
	return g, nil
}

// paramOf extracts the field name a sample.Params validation message
// starts with.
func paramOf(msg string) string {
	for i, c := range msg {
		if c == ' ' {
			return msg[:i]
		}
	}
	return ""
}
