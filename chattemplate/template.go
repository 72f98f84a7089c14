package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Template is a parsed chat template. It is immutable and safe for
// concurrent use by multiple goroutines.
type Template struct {
	body     []node
	names    map[string]bool  // the names its expressions read
	now      func() time.Time // clock for strftime_now
	maxSteps int              // evaluation budget of one render
}

// Parse compiles Jinja source. Syntax errors are *Error values of kind
// TemplateSyntaxError (or TemplateAssertionError for unknown filters and
// tests) carrying the line number.
func Parse(source string) (*Template, error) {
	body, names, err := parse(source)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.Line > 0 {
			return nil, fmt.Errorf("chattemplate: line %d: %w", e.Line, err)
		}
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	return &Template{body: body, names: names, now: time.Now, maxSteps: maxSteps}, nil
}

// Reads reports whether an expression of the template reads a variable
// named name (as in {{ name }}, {% if name is defined %} or name|default),
// not counting attributes and keys (message.name). It answers from the
// source alone, so a name the template itself sets or loops over counts
// too; for a chat template variable such as reasoning_effort, which only
// the caller sets, that is whether the template can see it.
func (t *Template) Reads(name string) bool { return t.names[name] }

// Load reads the chat template of a checkpoint directory: chat_template.jinja
// if present, else the "chat_template" of chat_template.json or of
// tokenizer_config.json (a string, or a list of named templates of which
// "default" is used).
// For a GGUF file (dir a .gguf file or a directory holding one, as
// gguf.Locate finds it) it is the file's tokenizer.chat_template.
func Load(dir string) (*Template, error) {
	if md, ok, err := ggufMetadata(dir); err != nil {
		return nil, fmt.Errorf("chattemplate: %w", err)
	} else if ok {
		return templateFromGGUF(dir, md)
	}
	src, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja"))
	if err == nil {
		t, err := Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "chat_template.jinja"), err)
		}
		return t, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	for _, name := range []string{"chat_template.json", "tokenizer_config.json"} {
		path := filepath.Join(dir, name)
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %w", err)
		}
		src, ok, err := templateFromConfig(data)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", path, err)
		}
		if !ok {
			continue
		}
		t, err := Parse(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("chattemplate: no chat template in %s (looked for chat_template.jinja, chat_template.json and tokenizer_config.json's \"chat_template\")", dir)
}

// templateFromConfig extracts "chat_template" from a JSON config file.
func templateFromConfig(data []byte) (string, bool, error) {
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", false, err
	}
	if len(cfg.ChatTemplate) == 0 || string(cfg.ChatTemplate) == "null" {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(cfg.ChatTemplate, &s); err == nil {
		return s, true, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
		return "", false, fmt.Errorf("\"chat_template\" is neither a string nor a list of named templates")
	}
	var names []string
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, true, nil
		}
		names = append(names, n.Name)
	}
	return "", false, fmt.Errorf("no template named \"default\" among %s", strings.Join(names, ", "))
}

// Render runs the template with vars as its top-level variables. Values may
// be nil, bool, string, numbers (json.Number keeps Python's int/float
// distinction), []any, *Object (ordered) or other maps and slices (maps are
// read in sorted key order). A variable that is not in vars is undefined, as
// in Jinja. Template failures are returned as *Error.
func (t *Template) Render(vars map[string]any) (string, error) {
	globals := &frame{vars: globalFuncs(t.now)}
	top := newFrame(globals)
	for k, v := range vars {
		c, err := fromGo(v)
		if err != nil {
			return "", fmt.Errorf("chattemplate: variable %q: %w", k, err)
		}
		top.vars[k] = c
	}
	ev := &evaluator{maxSteps: t.maxSteps}
	var out strings.Builder
	if _, err := ev.execBody(t.body, top, &out); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return "", err
		}
		return "", fmt.Errorf("chattemplate: %w", err)
	}
	return out.String(), nil
}

// Options are the inputs of one chat rendering, as transformers'
// apply_chat_template passes them.
type Options struct {
	// Messages is the conversation: a list of message objects, typically
	// from DecodeJSON.
	Messages any
	// Tools is the list of tool schemas, or nil for none.
	Tools any
	// AddGenerationPrompt appends the opening of the assistant's turn.
	AddGenerationPrompt bool
	// Kwargs are extra template variables (a request's
	// chat_template_kwargs, such as enable_thinking). They may not replace
	// messages, tools, documents or add_generation_prompt.
	Kwargs map[string]any
	// BOS, EOS and PAD are the special-token strings the template sees as
	// bos_token, eos_token and pad_token; "" passes None.
	BOS, EOS, PAD string
}

// RenderChat renders a conversation. Kwargs keys missing from the options
// stay undefined in the template, so the template's own defaults apply.
func (t *Template) RenderChat(o Options) (string, error) {
	vars := make(map[string]any, len(o.Kwargs)+8)
	tok := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	vars["bos_token"] = tok(o.BOS)
	vars["eos_token"] = tok(o.EOS)
	vars["pad_token"] = tok(o.PAD)
	vars["unk_token"] = nil
	for k, v := range o.Kwargs {
		switch k {
		case "messages", "tools", "documents", "add_generation_prompt":
			return "", fmt.Errorf("chattemplate: template kwargs may not set %q", k)
		}
		vars[k] = v
	}
	vars["messages"] = o.Messages
	vars["tools"] = o.Tools
	vars["documents"] = nil
	vars["add_generation_prompt"] = o.AddGenerationPrompt
	return t.Render(vars)
}
