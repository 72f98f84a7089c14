package llm_test

import (
	"context"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/govinfer/govinfer/convert"
	"github.com/govinfer/govinfer/llm"
)

// TestOpenGGUF writes the test checkpoint as a BF16 GGUF file and opens the
// file alone: the tokenizer, chat template, special tokens, stop tokens and
// sampling defaults are the checkpoint's, and a greedy chat gives the
// checkpoint's tokens. (Not Q8_0: this checkpoint's value heads are 16 wide,
// so the file's Q8_0 blocks of ssm_out straddle two heads in its order,
// which --quantize q8_0 pairs differently.)
func TestOpenGGUF(t *testing.T) {
	file := filepath.Join(t.TempDir(), "model.gguf")
	if _, err := convert.Write(context.Background(), checkpointDir, file, convert.Options{Type: convert.TypeBF16}); err != nil {
		t.Fatal(err)
	}
	want, err := llm.Open(checkpointDir, llm.Options{MaxModelLen: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	got, err := llm.Open(file, llm.Options{MaxModelLen: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if !reflect.DeepEqual(got.Defaults(), want.Defaults()) {
		t.Errorf("defaults %+v, checkpoint %+v", got.Defaults(), want.Defaults())
	}
	if !slices.Equal(got.EOS(), want.EOS()) || got.SpecialTokens() != want.SpecialTokens() {
		t.Errorf("EOS %v, special %+v; checkpoint %v, %+v", got.EOS(), got.SpecialTokens(), want.EOS(), want.SpecialTokens())
	}
	if got.VocabSize() != want.VocabSize() || got.Tokenizer().VocabSize() != want.Tokenizer().VocabSize() {
		t.Errorf("vocabulary %d/%d, checkpoint %d/%d", got.VocabSize(), got.Tokenizer().VocabSize(), want.VocabSize(), want.Tokenizer().VocabSize())
	}
	req := llm.ChatRequest{Messages: user("Tell me a story"), Params: greedy(16)}
	req.IgnoreEOS = true
	run := func(m *llm.Model) collected {
		st, err := m.Chat(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, st)[0]
	}
	g, w := run(got), run(want)
	if !slices.Equal(g.tokens, w.tokens) || g.reasoning != w.reasoning || g.content != w.content {
		t.Errorf("GGUF chat %v %q %q, checkpoint %v %q %q", g.tokens, g.reasoning, g.content, w.tokens, w.reasoning, w.content)
	}
	if len(g.tokens) != 16 {
		t.Errorf("%d tokens, want 16", len(g.tokens))
	}
}
