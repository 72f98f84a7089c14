package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/govinfer/govinfer/chattemplate"
)

// runRender renders one chat conversation with a chat template:
//
//	govinfer render --model DIR  < request.json
//	govinfer render --template FILE < request.json
//
// Standard input holds one JSON object with "messages", optional "tools" and
// "add_generation_prompt", and any other template variables (for example
// "enable_thinking"). The prompt is written to standard output exactly,
// without a trailing newline.
func runRender(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "render", "render (--model DIR | --template FILE) < request.json")
	model := fs.String("model", "", "checkpoint `directory` (chat_template.jinja or tokenizer_config.json; special tokens from tokenizer_config.json)")
	tmplFile := fs.String("template", "", "chat template `file` (Jinja source) to use instead of the checkpoint's")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	if *model == "" && *tmplFile == "" {
		fmt.Fprintln(io.err, "govinfer render: give --model DIR or --template FILE (see govinfer render --help)")
		return exitUsage
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintf(io.err, "govinfer render: %v\n", err)
		return exitError
	}
	prompt, err := renderRequest(*model, *tmplFile, io.in)
	if err != nil {
		fmt.Fprintf(io.err, "govinfer render: %v\n", err)
		return exitError
	}
	if _, err := io.out.Write([]byte(prompt)); err != nil {
		fmt.Fprintf(io.err, "govinfer render: writing output: %v\n", err)
		return exitError
	}
	return exitOK
}

func renderRequest(modelDir, tmplFile string, in io.Reader) (string, error) {
	var (
		tmpl *chattemplate.Template
		err  error
	)
	if tmplFile != "" {
		src, rerr := os.ReadFile(tmplFile)
		if rerr != nil {
			return "", fmt.Errorf("reading template: %w", rerr)
		}
		if tmpl, err = chattemplate.Parse(string(src)); err != nil {
			return "", fmt.Errorf("%s: %w", tmplFile, err)
		}
	} else if tmpl, err = chattemplate.Load(modelDir); err != nil {
		return "", err
	}
	var opts chattemplate.Options
	if modelDir != "" {
		if opts.BOS, opts.EOS, opts.PAD, err = specialTokens(modelDir); err != nil {
			return "", err
		}
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return "", fmt.Errorf("reading request: %w", err)
	}
	v, err := chattemplate.DecodeJSON(data)
	if err != nil {
		return "", fmt.Errorf("request: %w", err)
	}
	req, ok := v.(*chattemplate.Object)
	if !ok {
		return "", errors.New("request: standard input must hold one JSON object")
	}
	opts.Kwargs = map[string]any{}
	for _, k := range req.Keys() {
		val, _ := req.Get(k)
		switch k {
		case "messages":
			opts.Messages = val
		case "tools":
			opts.Tools = val
		case "add_generation_prompt":
			b, ok := val.(bool)
			if !ok && val != nil {
				return "", errors.New("request: \"add_generation_prompt\" must be a boolean")
			}
			opts.AddGenerationPrompt = b
		default:
			opts.Kwargs[k] = val
		}
	}
	if opts.Messages == nil {
		return "", errors.New("request: no \"messages\"")
	}
	return tmpl.RenderChat(opts)
}

// specialTokens reads bos_token, eos_token and pad_token from a checkpoint's
// tokenizer_config.json; a missing file gives none.
func specialTokens(dir string) (bos, eos, pad string, err error) {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", "", nil
	}
	if err != nil {
		return "", "", "", err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", "", "", fmt.Errorf("%s: %w", path, err)
	}
	get := func(key string) (string, error) {
		raw, ok := cfg[key]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s, nil
		}
		var added struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &added); err != nil {
			return "", fmt.Errorf("%s: %q is neither a string nor a token object", path, key)
		}
		return added.Content, nil
	}
	if bos, err = get("bos_token"); err != nil {
		return
	}
	if eos, err = get("eos_token"); err != nil {
		return
	}
	pad, err = get("pad_token")
	return
}
