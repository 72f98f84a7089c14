package modelpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree makes the files (and, for names ending in /, folders) under root; a
// file named *.gguf starts with the GGUF magic unless it is named bad*.
func tree(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(root, n)
		if strings.HasSuffix(n, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := "{}"
		if strings.HasSuffix(n, ".gguf") && !strings.HasPrefix(filepath.Base(n), "bad") {
			data = "GGUF\x03\x00\x00\x00"
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root) // no Qwen folder here: Qwen/... is a Hub name
	hub := filepath.Join(root, "hfcache")
	t.Setenv("HF_HUB_CACHE", hub)
	tree(t, root,
		"ck/config.json", "ck/model.safetensors", "ck/tokenizer.json",
		"notok/config.json", "notok/model.safetensors",
		"empty/",
		"weights/model-00001-of-00002.safetensors", "weights/model.safetensors.index.json",
		"parent/inner/config.json",
		"two/a/config.json", "two/b/model.gguf",
		"g/model.gguf", "g/mmproj-model.gguf", "gg/a.gguf", "gg/b.gguf", "bad.gguf",
		"notes.txt", "tokonly/tokenizer.json",
		"models--Qwen--Qwen3.5-9B/snapshots/abc123/config.json", "models--Qwen--Qwen3.5-9B/refs/main",
		"models--Qwen--Two/snapshots/aaa/config.json", "models--Qwen--Two/snapshots/bbb/config.json",
		"models--Qwen--None/snapshots/",
		"hfcache/models--Org--Cached/snapshots/f00/config.json",
	)
	if err := os.MkdirAll(filepath.Join(root, "models--Qwen--Two", "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "models--Qwen--Two", "refs", "main"), []byte("bbb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		files      []string // ResolveFiles's
		// want: the checkpoint's Path, GGUF, Name and whether a Note is
		// given; or the error's kind and words.
		wantPath, wantName string
		gguf, note         bool
		kind               error
		words              []string
	}{
		{name: "checkpoint folder", path: "ck", wantPath: "ck", wantName: "ck"},
		{name: "trailing slash", path: "ck/", wantPath: "ck/", wantName: "ck"},
		{name: "GGUF file", path: "g/model.gguf", wantPath: "g/model.gguf", wantName: "model.gguf", gguf: true},
		{name: "GGUF folder", path: "g", wantPath: "g", wantName: "g", gguf: true},
		{name: "cache folder, one snapshot", path: "models--Qwen--Qwen3.5-9B",
			wantPath: "models--Qwen--Qwen3.5-9B/snapshots/abc123", wantName: "Qwen/Qwen3.5-9B", note: true},
		{name: "cache's snapshots folder", path: "models--Qwen--Qwen3.5-9B/snapshots",
			wantPath: "models--Qwen--Qwen3.5-9B/snapshots/abc123", wantName: "Qwen/Qwen3.5-9B", note: true},
		{name: "a snapshot", path: "models--Qwen--Qwen3.5-9B/snapshots/abc123",
			wantPath: "models--Qwen--Qwen3.5-9B/snapshots/abc123", wantName: "Qwen/Qwen3.5-9B"},
		{name: "Hub name in the cache", path: "Org/Cached",
			wantPath: filepath.Join(hub, "models--Org--Cached/snapshots/f00"), wantName: "Org/Cached", note: true},
		{name: "tokenizer folder for a tokenizer", path: "tokonly", files: []string{"tokenizer.json"}, wantPath: "tokonly", wantName: "tokonly"},

		{name: "missing", path: "nope", kind: ErrNotFound, words: []string{"nope: no such file or folder"}},
		{name: "under a file", path: "notes.txt/config.json", kind: ErrNotFound, words: []string{"no such file or folder"}},
		{name: "Hub name", path: "Qwen/Qwen3.5-9B", kind: ErrHubName, words: []string{
			"Qwen/Qwen3.5-9B: no such file or folder. If it names a model of the Hugging Face Hub",
			"`huggingface-cli download Qwen/Qwen3.5-9B --local-dir Qwen3.5-9B`",
			"`hf download Qwen/Qwen3.5-9B --local-dir Qwen3.5-9B`", "pass the folder, Qwen3.5-9B"}},
		{name: "local-looking missing path", path: "parent/nope", kind: ErrNotFound, words: []string{"parent/nope: no such file or folder"}},
		{name: "empty folder", path: "empty", kind: ErrNotCheckpoint, words: []string{
			"empty: no config.json or .gguf file in this folder: pass a checkpoint folder (config.json, safetensors weights, tokenizer.json) or a GGUF file"}},
		{name: "empty folder for a tokenizer", path: "empty", files: []string{"tokenizer.json"}, kind: ErrNotCheckpoint, words: []string{
			"no config.json, tokenizer.json or .gguf file in this folder"}},
		{name: "weights without config", path: "weights", kind: ErrNotCheckpoint, words: []string{"safetensors weights without a config.json"}},
		{name: "a checkpoint inside", path: "parent", kind: ErrNotCheckpoint, words: []string{"its subfolder parent/inner is a checkpoint: pass that"}},
		{name: "checkpoints inside", path: "two", kind: ErrNotCheckpoint, words: []string{"its subfolders two/a, two/b are checkpoints"}},
		{name: "safetensors file", path: "ck/model.safetensors", kind: ErrNotCheckpoint, words: []string{
			"ck/model.safetensors: a file of the checkpoint folder ck, not the checkpoint: pass the folder, ck"}},
		{name: "config.json", path: "ck/config.json", kind: ErrNotCheckpoint, words: []string{"pass the folder, ck"}},
		{name: "safetensors alone", path: "weights/model-00001-of-00002.safetensors", kind: ErrNotCheckpoint, words: []string{
			"a file of safetensors weights: govinfer opens a checkpoint folder", "weights has no config.json"}},
		{name: "other file", path: "notes.txt", kind: ErrNotCheckpoint, words: []string{"notes.txt: a file, neither a GGUF file nor a checkpoint folder"}},
		{name: "not GGUF", path: "bad.gguf", kind: ErrNotCheckpoint, words: []string{"bad.gguf: not a GGUF file"}},
		{name: "two GGUF models", path: "gg", kind: ErrNotCheckpoint, words: []string{"gg: holds 2 GGUF models (a.gguf, b.gguf)"}},
		{name: "cache, two snapshots", path: "models--Qwen--Two", kind: ErrNotCheckpoint, words: []string{
			"the Hugging Face cache folder of Qwen/Two, with 2 snapshots (bbb, aaa)", "refs/main's is models--Qwen--Two/snapshots/bbb"}},
		{name: "cache, no snapshot", path: "models--Qwen--None", kind: ErrNotCheckpoint, words: []string{"without a snapshot", "huggingface-cli download Qwen/None"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ck Checkpoint
			var err error
			if c.files != nil {
				ck, err = ResolveFiles(c.path, c.files...)
			} else {
				ck, err = Resolve(c.path)
			}
			if c.kind != nil {
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, c.kind) {
					t.Fatalf("Resolve(%q) = %+v, %v; want an *Error of kind %v", c.path, ck, err, c.kind)
				}
				if c.kind == ErrNotFound || c.kind == ErrHubName {
					if !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%v is not fs.ErrNotExist", err)
					}
				}
				for _, w := range c.words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve(%q): %v", c.path, err)
			}
			if ck.Path != c.wantPath || ck.GGUF != c.gguf || ck.Name != c.wantName || (ck.Note != "") != c.note {
				t.Errorf("Resolve(%q) = %+v; want Path %q, GGUF %v, Name %q, a note %v", c.path, ck, c.wantPath, c.gguf, c.wantName, c.note)
			}
		})
	}
}

func TestCheckTokenizer(t *testing.T) {
	root := t.TempDir()
	tree(t, root, "ck/config.json", "ck/tokenizer.json", "notok/config.json", "m.gguf")
	for _, c := range []struct {
		path string
		want string // "" for no error
	}{
		{"ck", ""},
		{"m.gguf", ""},
		{"notok", "notok: no tokenizer.json in this checkpoint folder"},
	} {
		ck, err := Resolve(filepath.Join(root, c.path))
		if err != nil {
			t.Fatal(err)
		}
		err = ck.CheckTokenizer()
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.path, err)
			}
			continue
		}
		if !errors.Is(err, ErrNoTokenizer) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "make-random") {
			t.Errorf("%s: %v, want ErrNoTokenizer saying %q and where to get one", c.path, err, c.want)
		}
	}
}
