package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/govinfer/govinfer/modelpath"
	"github.com/govinfer/govinfer/tokenizer"
)

// runTokenize encodes or decodes JSON lines with a checkpoint's tokenizer:
//
//	govinfer tokenize --model DIR          {"text": "..."}  -> {"ids": [...]}
//	govinfer tokenize --model DIR --decode {"ids": [...], "skip_special_tokens": false} -> {"text": "..."}
//
// --tokenizer FILE names a tokenizer.json instead of a checkpoint directory.
func runTokenize(ctx context.Context, io stdio, args []string) int {
	fs := newFlagSet(io, "tokenize", "tokenize (--model DIR | --tokenizer FILE) [--decode] < input.jsonl\n\n"+
		"Reads one JSON object per line from standard input and writes one per line to standard\n"+
		"output. Encoding: {\"text\": \"...\"} gives {\"ids\": [...]}; added tokens such as\n"+
		"<|im_start|> are recognised in the text, and nothing else (no BOS) is added.\n"+
		"With --decode: {\"ids\": [...], \"skip_special_tokens\": false} gives {\"text\": \"...\"};\n"+
		"skip_special_tokens drops special added tokens (<|im_end|>, not <think>); ids that\n"+
		"name no token are skipped, ids outside the vocabulary are an error. Blank lines are\n"+
		"ignored. The first bad line stops the run with exit status 1.")
	model := fs.String("model", "", "checkpoint `directory` (tokenizer.json, with tokenizer_config.json when present), or a GGUF file (its metadata: a vocabulary-only file serves)")
	file := fs.String("tokenizer", "", "a tokenizer.json `file` to use instead of a checkpoint directory")
	decode := fs.Bool("decode", false, "decode {\"ids\"} lines instead of encoding {\"text\"} lines")
	if code, done := parseFlags(fs, io, args); done {
		return code
	}
	if (*model == "") == (*file == "") {
		fmt.Fprintln(io.err, "govinfer tokenize: give exactly one of --model DIR and --tokenizer FILE (see govinfer tokenize --help)")
		return exitUsage
	}
	var (
		tok *tokenizer.Tokenizer
		err error
	)
	if *model != "" {
		ck, perr := modelpath.ResolveFiles(*model, "tokenizer.json")
		if perr == nil {
			perr = ck.CheckTokenizer()
		}
		if perr != nil {
			fmt.Fprintf(io.err, "govinfer tokenize: --model %v\n", perr)
			return exitUsage
		}
		tok, err = tokenizer.Load(ck.Path)
	} else {
		tok, err = tokenizer.LoadFile(*file)
	}
	if err != nil {
		fmt.Fprintf(io.err, "govinfer tokenize: %v\n", err)
		return exitError
	}
	if err := tokenizeLines(ctx, tok, *decode, io.in, io.out); err != nil {
		fmt.Fprintf(io.err, "govinfer tokenize: %v\n", err)
		return exitError
	}
	return exitOK
}

// tokenizeLines processes the JSON lines of in, writing one result line to
// out per input line.
func tokenizeLines(ctx context.Context, tok *tokenizer.Tokenizer, decode bool, in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 1<<16)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for lineNo := 1; ; lineNo++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, readErr := r.ReadBytes('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return fmt.Errorf("reading input: %w", readErr)
		}
		if len(bytes.TrimSpace(line)) > 0 {
			result, err := tokenizeLine(tok, decode, line)
			if err != nil {
				return fmt.Errorf("line %d: %w", lineNo, err)
			}
			if err := enc.Encode(result); err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
			// Flush per line so the command can serve as a co-process.
			if err := w.Flush(); err != nil {
				return fmt.Errorf("writing output: %w", err)
			}
		}
		if readErr != nil { // io.EOF
			return nil
		}
	}
}

type encodeRequest struct {
	Text *string `json:"text"`
}

type decodeRequest struct {
	IDs               *[]int `json:"ids"`
	SkipSpecialTokens bool   `json:"skip_special_tokens"`
}

type encodeResult struct {
	IDs []int `json:"ids"`
}

type decodeResult struct {
	Text string `json:"text"`
}

// tokenizeLine handles one JSON object.
func tokenizeLine(tok *tokenizer.Tokenizer, decode bool, line []byte) (any, error) {
	if !decode {
		var req encodeRequest
		if err := json.Unmarshal(line, &req); err != nil {
			return nil, fmt.Errorf("want a JSON object {\"text\": \"...\"}: %w", err)
		}
		if req.Text == nil {
			return nil, errors.New(`missing "text" (to decode ids, pass --decode)`)
		}
		ids := tok.Encode(*req.Text)
		if ids == nil {
			ids = []int{}
		}
		return encodeResult{IDs: ids}, nil
	}
	var req decodeRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return nil, fmt.Errorf("want a JSON object {\"ids\": [...], \"skip_special_tokens\": false}: %w", err)
	}
	if req.IDs == nil {
		return nil, errors.New(`missing "ids"`)
	}
	for _, id := range *req.IDs {
		if id < 0 || id >= tok.VocabSize() {
			return nil, fmt.Errorf("token id %d is outside the vocabulary [0, %d)", id, tok.VocabSize())
		}
	}
	return decodeResult{Text: tok.Decode(*req.IDs, req.SkipSpecialTokens)}, nil
}
