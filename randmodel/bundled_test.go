package randmodel

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestBundledTokenizer: the bundled files are the repository's test data,
// byte for byte, and WriteBundledTokenizer writes them.
func TestBundledTokenizer(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "other.jinja")
	if err := os.WriteFile(tmpl, []byte("{{ messages }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain, custom := filepath.Join(dir, "plain"), filepath.Join(dir, "custom")
	for _, d := range []string{plain, custom} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteBundledTokenizer(plain, ""); err != nil {
		t.Fatal(err)
	}
	if err := WriteBundledTokenizer(custom, tmpl); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{
		"tokenizer.json":        "../testdata/tokenizer/qwen3/tokenizer.json",
		"tokenizer_config.json": "../testdata/tokenizer/qwen3/tokenizer_config.json",
		"chat_template.jinja":   "../testdata/chat/chat_template.jinja",
	} {
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(plain, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("bundled %s differs from %s (err %v): refresh randmodel/bundled (see its README)", name, src, err)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(custom, "chat_template.jinja")); string(got) != "{{ messages }}" {
		t.Errorf("the chat template given was not written: %q", got)
	}
	info, err := BundledTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	read, err := ReadTokenizer("../testdata/tokenizer/qwen3/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if info.Vocab != 151669 || !slices.Equal(info.EOS, []int{151645, 151643}) || info.Vocab != read.Vocab || info.Vision != read.Vision {
		t.Errorf("BundledTokenizer() = %+v, ReadTokenizer of the file %+v", info, read)
	}
}
