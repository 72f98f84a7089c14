package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/llm"
)

// chatModel writes a random checkpoint with the Qwen3 tokenizer and the
// Qwen3.5 chat template and opens it in process, to compute the answers
// the command must show.
func chatModel(t *testing.T) (string, *llm.Model) {
	t.Helper()
	dir := servableCheckpoint(t)
	m, err := llm.Open(dir, llm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return dir, m
}

// reference is a greedy chat run in process: the answer's content and
// reasoning and the prompt's token count.
type reference struct {
	content, reasoning string
	promptTokens       int
}

func chatReference(t *testing.T, m *llm.Model, think *bool, maxTokens int, msgs ...llm.Message) reference {
	t.Helper()
	st, err := m.Chat(context.Background(), llm.ChatRequest{Messages: msgs, Thinking: think,
		Params: llm.Params{Temperature: llm.F64(0), MaxTokens: maxTokens}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var r reference
	for ev := range st.Events() {
		switch ev.Kind {
		case llm.KindReasoning:
			r.reasoning += ev.Text
		case llm.KindContent, llm.KindToolCall:
			r.content += ev.Text
		}
	}
	r.promptTokens = st.Usage().PromptTokens
	return r
}

func user(s string) llm.Message { return llm.Message{Role: "user", Content: s} }

func TestChatOneShot(t *testing.T) {
	dir, m := chatModel(t)
	ref := chatReference(t, m, llm.Bool(false), 8, user("What is 2+2?"))
	if strings.TrimSpace(ref.content) == "" {
		t.Fatal("the reference answer is empty: the test would prove nothing")
	}
	want := strings.TrimLeft(ref.content, "\n") + "\n"
	flags := []string{"--model", dir, "--think", "off", "--temperature", "0", "--max-tokens", "8"}
	for name, c := range map[string]struct {
		stdin string
		args  []string
	}{
		"argument":             {"", append([]string{"chat"}, append(flags, "What is 2+2?")...)},
		"words":                {"", append([]string{"chat"}, append(flags, "What", "is", "2+2?")...)},
		"flags after the text": {"", append([]string{"chat", "What is 2+2?"}, flags...)},
		"after --":             {"", append(append([]string{"chat"}, flags...), "--", "What", "is", "2+2?")},
		"pipe":                 {"What is 2+2?\n", append([]string{"chat"}, flags...)},
	} {
		code, out, errOut := run(t, c.stdin, c.args...)
		if code != exitOK || out != want || errOut != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 0, %q and nothing on stderr", name, code, out, errOut, want)
		}
	}
}

func TestChatOneShotThinking(t *testing.T) {
	dir, m := chatModel(t)
	ref := chatReference(t, m, nil, 6, user("Why?"))
	if ref.reasoning == "" {
		t.Fatal("the reference has no reasoning: the test would prove nothing")
	}
	args := []string{"chat", "--model", dir, "--temperature", "0", "--max-tokens", "6", "Why?"}
	wantOut := strings.TrimLeft(ref.content, "\n")
	if wantOut != "" {
		wantOut += "\n"
	}
	code, out, errOut := run(t, "", args...)
	if code != exitOK || out != wantOut || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want the content %q alone", code, out, errOut, wantOut)
	}
	code, out, errOut = run(t, "", append(args, "--show-thinking")...)
	if want := strings.TrimLeft(ref.reasoning, "\n") + "\n"; code != exitOK || errOut != want {
		t.Errorf("--show-thinking: exit %d, stderr %q; want the reasoning %q", code, errOut, want)
	}
	if strings.Contains(out+errOut, "\x1b") {
		t.Errorf("one-shot output has escape sequences: %q %q", out, errOut)
	}
	code, _, errOut = run(t, "", append(args, "--verbose")...)
	for _, w := range []string{"loading ", "loaded in", "prompt: ", "tokens/s"} {
		if code != exitOK || !strings.Contains(errOut, w) {
			t.Errorf("--verbose: exit %d, stderr %q lacks %q", code, errOut, w)
		}
	}
}

func TestChatErrors(t *testing.T) {
	dir := servableCheckpoint(t)
	missing := filepath.Join(t.TempDir(), "nope")
	cases := []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"no model", "", []string{"hi"}, exitUsage, "--model is required"},
		{"missing path", "", []string{"--model", missing, "hi"}, exitUsage, missing + ": no such file or folder"},
		{"not a checkpoint", "", []string{"--model", t.TempDir(), "hi"}, exitUsage, "no config.json or .gguf file in this folder"},
		{"no question", "", []string{"--model", dir}, exitUsage, "no question"},
		{"blank question", " \n\n", []string{"--model", dir}, exitUsage, "no question"},
		{"bad temperature", "", []string{"--model", dir, "--temperature", "-1", "hi"}, exitUsage, "temperature must be"},
		{"bad top-k", "", []string{"--model", dir, "--top-k", "0", "hi"}, exitUsage, "top_k must be"},
		{"bad think", "", []string{"--model", dir, "--think", "maybe", "hi"}, exitUsage, "want on or off"},
		{"unknown flag", "", []string{"--model", dir, "--frobnicate", "hi"}, exitUsage, "frobnicate"},
		{"bad quantize", "", []string{"--model", dir, "--quantize", "q3", "hi"}, exitUsage, "--quantize"},
		{"unknown backend", "", []string{"--model", dir, "--backend", "abacus", "hi"}, exitUsage, "unknown backend"},
		{"context too long", "", []string{"--model", dir, "--max-model-len", "32", strings.Repeat("word ", 40)}, exitError, "maximum context length is 32"},
	}
	for _, c := range cases {
		code, out, errOut := run(t, c.stdin, append([]string{"chat"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d and %q", c.name, code, out, errOut, c.code, c.want)
		}
		if lines := strings.Count(strings.TrimSpace(errOut), "\n") + 1; lines != 1 {
			t.Errorf("%s: want a one-line error, got %q", c.name, errOut)
		}
	}
	if code, out, _ := run(t, "", "chat", "--help"); code != exitOK || !strings.Contains(out, `"""`) || !strings.Contains(out, "-hide-thinking") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
}

func TestChatSettings(t *testing.T) {
	var o chatOptions
	d := llm.Defaults{Temperature: llm.F64(0.6), TopK: llm.Int(20)}
	show := func(name string) string {
		s, ok := lookupSetting(name)
		if !ok {
			t.Fatalf("no setting %s", name)
		}
		return s.show(&o, d)
	}
	set := func(name, v string) error {
		s, ok := lookupSetting(name)
		if !ok {
			t.Fatalf("no setting %s", name)
		}
		return s.set(&o, v)
	}
	if got := show("temperature"); got != "0.6 (checkpoint default)" {
		t.Errorf("temperature shows %q before /set", got)
	}
	for _, c := range [][2]string{{"temperature", "0.7"}, {"top-p", "0.9"}, {"TOP_K", "-1"}, {"min_p", "0.05"},
		{"repetition_penalty", "1.1"}, {"presence_penalty", "-2"}, {"frequency_penalty", "0.5"}, {"seed", "42"},
		{"max_tokens", "100"}, {"system", "Be brief."}, {"verbose", "on"}} {
		if err := set(c[0], c[1]); err != nil {
			t.Errorf("set %s %s: %v", c[0], c[1], err)
		}
	}
	p := o.params
	if *p.Temperature != 0.7 || *p.TopP != 0.9 || *p.TopK != -1 || *p.MinP != 0.05 || *p.RepetitionPenalty != 1.1 ||
		p.PresencePenalty != -2 || p.FrequencyPenalty != 0.5 || *p.Seed != 42 || p.MaxTokens != 100 || o.system != "Be brief." || !o.verbose {
		t.Errorf("settings not applied: %+v %q %v", p, o.system, o.verbose)
	}
	if got := show("temperature"); got != "0.7" {
		t.Errorf("temperature shows %q after /set", got)
	}
	for _, name := range []string{"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "seed", "max_tokens", "system"} {
		if err := set(name, "default"); err != nil {
			t.Errorf("%s default: %v", name, err)
		}
	}
	if p := o.params; p.Temperature != nil || p.TopP != nil || p.TopK != nil || p.MinP != nil || p.RepetitionPenalty != nil ||
		p.Seed != nil || p.MaxTokens != 0 || o.system != "" {
		t.Errorf("defaults not restored: %+v %q", p, o.system)
	}
	if got := show("top_k"); got != "20 (checkpoint default)" {
		t.Errorf("top_k shows %q after default", got)
	}
	for _, c := range [][2]string{{"temperature", "-0.1"}, {"temperature", "hot"}, {"temperature", "NaN"}, {"top_p", "1.5"},
		{"top_k", "0"}, {"top_k", "-2"}, {"min_p", "2"}, {"repetition_penalty", "0"}, {"presence_penalty", "3"},
		{"frequency_penalty", "-2.5"}, {"seed", "-1"}, {"max_tokens", "-1"}, {"max_tokens", "x"}, {"verbose", "maybe"}} {
		if err := set(c[0], c[1]); err == nil {
			t.Errorf("set %s %s: no error", c[0], c[1])
		}
	}
	if _, ok := lookupSetting("temprature"); ok {
		t.Error("a misspelt setting was found")
	}
}

func TestMultiline(t *testing.T) {
	cases := []struct {
		lines []string
		want  string
	}{
		{[]string{"one line"}, "one line"},
		{[]string{`first \`, "second"}, "first \nsecond"},
		{[]string{`a\`, `b\`, "c"}, "a\nb\nc"},
		{[]string{`"""`, "x", "", "y", `"""`}, "x\n\ny"},
		{[]string{`"""start`, `end"""`}, "start\nend"},
		{[]string{`"""inline"""`}, "inline"},
		{[]string{`"""`, `a \`, `"""  `}, `a \`},
		{[]string{"pasted\ntext"}, "pasted\ntext"},
	}
	for _, c := range cases {
		var m multiline
		for i, l := range c.lines {
			done := m.add(l)
			if done != (i == len(c.lines)-1) {
				t.Errorf("%q: line %d complete=%v", c.lines, i, done)
			}
		}
		if got := m.text(); got != c.want {
			t.Errorf("%q: message %q, want %q", c.lines, got, c.want)
		}
	}
}

func TestAnswerWriter(t *testing.T) {
	type piece struct {
		reasoning bool
		text      string
	}
	stream := []piece{{true, "\n"}, {true, "\nlet me"}, {true, " think"}, {false, "\n\n"}, {false, "\nThe answer"}, {false, "."}}
	cases := []struct {
		name       string
		w          answerWriter
		out, aside string
	}{
		{"inline", answerWriter{reasoning: reasoningInline, color: true},
			"\x1b[2mlet me think\x1b[0m\n\nThe answer.\n", ""},
		{"inline without colour", answerWriter{reasoning: reasoningInline}, "let me think\n\nThe answer.\n", ""},
		{"hidden", answerWriter{}, "The answer.\n", ""},
		{"hidden with indicator", answerWriter{indicator: true}, "Thinking...\r\x1b[KThe answer.\n", ""},
		{"aside", answerWriter{reasoning: reasoningAside}, "The answer.\n", "let me think\n"},
	}
	for _, c := range cases {
		var out, aside bytes.Buffer
		w := c.w
		w.out, w.aside = &out, &aside
		for _, p := range stream {
			if p.reasoning {
				w.addReasoning(p.text)
			} else {
				w.addContent(p.text)
			}
		}
		w.end()
		if out.String() != c.out || aside.String() != c.aside {
			t.Errorf("%s: out %q aside %q, want %q %q", c.name, out.String(), aside.String(), c.out, c.aside)
		}
	}
	// An answer stopped while thinking: the indicator goes, nothing stays.
	var out bytes.Buffer
	w := answerWriter{out: &out, indicator: true}
	w.addReasoning("hmm")
	w.end()
	if out.String() != "Thinking...\r\x1b[K" {
		t.Errorf("stopped while thinking: %q", out.String())
	}
	// Reasoning only, shown: reset and a line end, no blank line.
	out.Reset()
	w = answerWriter{out: &out, reasoning: reasoningInline, color: true}
	w.addReasoning("hmm")
	w.end()
	if out.String() != "\x1b[2mhmm\x1b[0m\n" {
		t.Errorf("reasoning only: %q", out.String())
	}
}

func TestCRLFWriter(t *testing.T) {
	var b bytes.Buffer
	n, err := crlfWriter{&b}.Write([]byte("a\nb\n"))
	if n != 4 || err != nil || b.String() != "a\r\nb\r\n" {
		t.Errorf("wrote %d, %v: %q", n, err, b.String())
	}
}
