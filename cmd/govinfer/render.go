package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/govinfer/govinfer/chattemplate"
	"github.com/govinfer/govinfer/jsonvalue"
	"github.com/govinfer/govinfer/modelpath"
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
	model := fs.String("model", "", "checkpoint `directory` (chat_template.jinja or tokenizer_config.json; special tokens from tokenizer_config.json), or a GGUF file (its metadata)")
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
	if *model != "" {
		ck, err := modelpath.ResolveFiles(*model, "chat_template.jinja", "chat_template.json", "tokenizer_config.json")
		if err != nil {
			fmt.Fprintf(io.err, "govinfer render: --model %v\n", err)
			return exitUsage
		}
		*model = ck.Path
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
		st, err := chattemplate.LoadSpecialTokens(modelDir)
		if err != nil {
			return "", err
		}
		opts.BOS, opts.EOS, opts.PAD = st.BOS, st.EOS, st.PAD
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return "", fmt.Errorf("reading request: %w", err)
	}
	v, err := jsonvalue.Decode(data)
	if err != nil {
		return "", fmt.Errorf("request: %w", err)
	}
	req, ok := v.(*jsonvalue.Object)
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
