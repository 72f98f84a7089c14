package httpapi

import (
	"strings"

	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/llm"
)

// structuredKeys are the keys of vLLM's structured_outputs that govinfer
// enforces; disable_fallback only steers vLLM between its backends, so
// it is accepted and has nothing to change here.
var structuredKeys = map[string]bool{"regex": true, "choice": true, "grammar": true, "json": true, "json_object": true, "disable_fallback": true}

// parseStructured reads the constraints beside response_format: vLLM's
// structured_outputs (regex, choice, grammar, json, json_object) and
// llama-server's top-level grammar (GBNF). An unknown key inside
// structured_outputs is an error, as are two constraints in one request.
func parseStructured(o object, p *llm.Params) *apiError {
	var set []string // the fields that constrain, to name a conflict
	if p.ResponseFormat != nil && p.ResponseFormat.Type != "text" {
		set = append(set, "response_format")
	}
	if g, ok, err := o.str("grammar"); err != nil {
		return err
	} else if ok && g != "" {
		set = append(set, "grammar")
		p.Structured = &llm.Structured{GBNF: g, Field: "grammar"}
	}
	so, ok, err := o.obj("structured_outputs")
	if err != nil {
		return err
	}
	if ok {
		for _, k := range so.f.Obj.Keys() {
			if !structuredKeys[k] {
				return badRequest("structured_outputs."+k, "structured_outputs.%s is not supported; structured_outputs takes regex, choice, grammar, json or json_object", k)
			}
		}
		if re, ok, err := so.str("regex"); err != nil {
			return err
		} else if ok {
			set = append(set, "structured_outputs.regex")
			p.Structured = &llm.Structured{Regex: re, Field: "structured_outputs.regex"}
			if re == "" {
				return badRequest("structured_outputs.regex", "structured_outputs.regex is empty")
			}
		}
		if list, ok, err := so.array("choice"); err != nil {
			return err
		} else if ok {
			set = append(set, "structured_outputs.choice")
			choices := make([]string, len(list))
			for i, v := range list {
				s, isStr := v.(string)
				if !isStr {
					return badRequest("structured_outputs.choice", "structured_outputs.choice[%d] must be a string, got %s", i, jsonvalue.Kind(v))
				}
				choices[i] = s
			}
			if len(choices) == 0 {
				return badRequest("structured_outputs.choice", "structured_outputs.choice is empty")
			}
			p.Structured = &llm.Structured{Choice: choices, Field: "structured_outputs.choice"}
		}
		if g, ok, err := so.str("grammar"); err != nil {
			return err
		} else if ok {
			set = append(set, "structured_outputs.grammar")
			p.Structured = &llm.Structured{GBNF: g, Field: "structured_outputs.grammar"}
			if g == "" {
				return badRequest("structured_outputs.grammar", "structured_outputs.grammar is empty")
			}
		}
		if v, ok := so.get("json"); ok {
			set = append(set, "structured_outputs.json")
			raw, merr := marshalValue(v)
			if merr != nil {
				return badRequest("structured_outputs.json", "structured_outputs.json: %v", merr)
			}
			if s, isStr := v.(string); isStr {
				raw = []byte(s) // vLLM takes the schema as an object or as its JSON text
			}
			p.ResponseFormat = &llm.ResponseFormat{Type: "json_schema", Schema: raw}
		}
		if on, ok, err := so.boolean("json_object"); err != nil {
			return err
		} else if ok && on {
			set = append(set, "structured_outputs.json_object")
			p.ResponseFormat = &llm.ResponseFormat{Type: "json_object"}
		}
	}
	if len(set) > 1 {
		return badRequest(set[1], "%s cannot be combined: send one constraint per request", strings.Join(set, " and "))
	}
	return nil
}
