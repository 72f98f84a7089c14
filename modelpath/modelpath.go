// Package modelpath finds the checkpoint a path names. Every command's
// --model, llm.Open, model.Open and model.LoadConfig go through Resolve, so
// that a path that names no checkpoint gets one answer, saying what is wrong
// and what to pass instead, whoever is given it.
//
// A checkpoint is a folder holding config.json (beside its safetensors
// weights and tokenizer.json), a GGUF file (any part of a split one) or a
// folder holding one GGUF model. A Hugging Face cache folder
// (models--Org--Name, as huggingface-cli download fills it without
// --local-dir) with one snapshot resolves to that snapshot; a model name of
// the Hub (Org/Name) that is not a local path resolves to its folder in the
// Hugging Face cache when it is there, and is otherwise an error giving the
// command that downloads it. govinfer downloads nothing.
//
// The errors are *Error values; errors.Is tells their kinds apart
// (ErrNotFound, ErrHubName, ErrNotCheckpoint, ErrNoTokenizer).
package modelpath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/govinfer/govinfer/gguf"
)

// The kinds of *Error.
var (
	// ErrNotFound: nothing is at the path. Such errors also match
	// fs.ErrNotExist.
	ErrNotFound = errors.New("no such file or folder")
	// ErrHubName: the path is not a local one but reads as a model name of
	// the Hugging Face Hub (Org/Name), which is not in the local cache.
	// Such errors also match ErrNotFound and fs.ErrNotExist.
	ErrHubName = errors.New("a model name of the Hugging Face Hub, not a local path")
	// ErrNotCheckpoint: the path is a file or folder, but not a
	// checkpoint: a folder without config.json or a GGUF file, a file of a
	// checkpoint (its config.json or weights) instead of its folder, or a
	// Hugging Face cache folder whose snapshot cannot be chosen.
	ErrNotCheckpoint = errors.New("not a checkpoint")
	// ErrNoTokenizer: a checkpoint folder without tokenizer.json
	// (Checkpoint.CheckTokenizer).
	ErrNoTokenizer = errors.New("no tokenizer.json")
)

// Error is a path that names no checkpoint (or one without what is asked
// of it). Its message starts with the path as given.
type Error struct {
	// Path is the path as given.
	Path string
	// Kind is ErrNotFound, ErrHubName, ErrNotCheckpoint or ErrNoTokenizer.
	Kind error
	msg  string
}

func (e *Error) Error() string { return e.Path + ": " + e.msg }

// Unwrap returns the error's kind, with the kinds it implies.
func (e *Error) Unwrap() []error {
	switch e.Kind {
	case ErrNotFound:
		return []error{ErrNotFound, fs.ErrNotExist}
	case ErrHubName:
		return []error{ErrHubName, ErrNotFound, fs.ErrNotExist}
	}
	return []error{e.Kind}
}

// Checkpoint is what a path resolves to.
type Checkpoint struct {
	// Path is what to open: the checkpoint folder, the GGUF file, or the
	// folder holding one. It is the path given, but for a Hugging Face
	// cache folder or Hub name: the snapshot folder.
	Path string
	// GGUF is set when Path is a GGUF file or a folder holding one.
	GGUF bool
	// Name names the model: Org/Name for a snapshot of the Hugging Face
	// cache, else the base name of Path.
	Name string
	// Note, when not empty, says how Path was found from the path given
	// (the snapshot of a cache folder), for the user to see.
	Note string
}

// Resolve returns the checkpoint at path: a folder holding config.json, a
// GGUF file or a folder holding one, or a snapshot of the Hugging Face
// cache (see the package comment). Anything else is an *Error.
func Resolve(path string) (Checkpoint, error) {
	return resolve(path, nil, true)
}

// ResolveFiles is Resolve for readers of some of a checkpoint's files only
// (a tokenizer, a chat template): a folder holding any of files is also
// accepted, config.json or not.
func ResolveFiles(path string, files ...string) (Checkpoint, error) {
	return resolve(path, files, true)
}

// CheckTokenizer returns an *Error of kind ErrNoTokenizer when c is a
// folder without tokenizer.json (a GGUF file holds its vocabulary).
func (c Checkpoint) CheckTokenizer() error {
	if c.GGUF {
		return nil
	}
	_, err := os.Stat(filepath.Join(c.Path, "tokenizer.json"))
	if err == nil {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("modelpath: %w", err)
	}
	return &Error{Path: c.Path, Kind: ErrNoTokenizer, msg: "no tokenizer.json in this checkpoint folder, which chat, serving and tokenizing need: " +
		"a released checkpoint has it beside config.json (download the whole repository, not the weights alone), " +
		"and govinfer make-random writes one unless told --no-tokenizer"}
}

// resolve is Resolve; alt are the files that make a folder acceptable
// without config.json, and cache allows a Hugging Face cache folder.
func resolve(path string, alt []string, cache bool) (Checkpoint, error) {
	if path == "" {
		return Checkpoint{}, &Error{Kind: ErrNotFound, msg: "no path given"}
	}
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return notFound(path, alt)
	case err != nil:
		return Checkpoint{}, fmt.Errorf("modelpath: %w", err)
	case !st.IsDir():
		return file(path)
	}
	if exists(filepath.Join(path, "config.json")) {
		return Checkpoint{Path: path, Name: name(path)}, nil
	}
	if _, ok, err := gguf.Locate(path); err != nil {
		// Several GGUF models: the error names them.
		return Checkpoint{}, &Error{Path: path, Kind: ErrNotCheckpoint, msg: strings.TrimPrefix(strings.TrimPrefix(err.Error(), "gguf: "), path+" ")}
	} else if ok {
		return Checkpoint{Path: path, GGUF: true, Name: name(path)}, nil
	}
	if repo, root, ok := cacheFolder(path); ok && cache {
		return snapshot(path, root, repo, alt)
	}
	for _, f := range alt {
		if exists(filepath.Join(path, f)) {
			return Checkpoint{Path: path, Name: name(path)}, nil
		}
	}
	return Checkpoint{}, &Error{Path: path, Kind: ErrNotCheckpoint, msg: emptyFolder(path, alt)}
}

// notFound is the error for a path where nothing is: a model name of the
// Hub is looked for in the Hugging Face cache, and its error gives the
// command that downloads it.
func notFound(path string, alt []string) (Checkpoint, error) {
	repo, ok := hubName(path)
	if !ok {
		return Checkpoint{}, &Error{Path: path, Kind: ErrNotFound, msg: "no such file or folder"}
	}
	for _, hub := range hubCaches() {
		folder := filepath.Join(hub, "models--"+strings.ReplaceAll(repo, "/", "--"))
		if st, err := os.Stat(filepath.Join(folder, "snapshots")); err == nil && st.IsDir() {
			c, err := snapshot(folder, folder, repo, alt)
			if err != nil {
				return c, err
			}
			c.Note = fmt.Sprintf("%s: not a local path; opening the Hugging Face cache's snapshot of it, %s", path, c.Path)
			return c, nil
		}
	}
	local := filepath.Base(repo)
	return Checkpoint{}, &Error{Path: path, Kind: ErrHubName, msg: fmt.Sprintf("no such file or folder. If it names a model of the Hugging Face Hub: "+
		"govinfer reads local checkpoints and downloads nothing, so download it first, "+
		"with `huggingface-cli download %s --local-dir %s` (or `hf download %[1]s --local-dir %[2]s`), and pass the folder, %[2]s", repo, local)}
}

// hubRepo matches a model name of the Hugging Face Hub.
var hubRepo = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// hubName reports whether path, which names nothing, reads as a model name
// of the Hub (Org/Name, whose Org is not a local folder either) and returns
// it.
func hubName(path string) (string, bool) {
	repo := filepath.ToSlash(path)
	if !hubRepo.MatchString(repo) || strings.Contains(repo, "..") || strings.Contains(repo, "--") {
		return "", false
	}
	org, _, _ := strings.Cut(repo, "/")
	if _, err := os.Stat(org); err == nil {
		return "", false
	}
	return repo, true
}

// hubCaches are the folders where the Hugging Face libraries keep their
// cache of the Hub, as they choose it: HF_HUB_CACHE, else HF_HOME/hub, else
// huggingface/hub under XDG_CACHE_HOME or ~/.cache.
func hubCaches() []string {
	if d := os.Getenv("HF_HUB_CACHE"); d != "" {
		return []string{d}
	}
	if d := os.Getenv("HF_HOME"); d != "" {
		return []string{filepath.Join(d, "hub")}
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return []string{filepath.Join(d, "huggingface", "hub")}
	}
	if home, err := os.UserHomeDir(); err == nil {
		return []string{filepath.Join(home, ".cache", "huggingface", "hub")}
	}
	return nil
}

// cacheFolder reports whether dir is a Hugging Face cache folder of a model
// (models--Org--Name holding snapshots/), or its snapshots folder, and
// returns the model's name and the models-- folder.
func cacheFolder(dir string) (repo, root string, ok bool) {
	root = filepath.Clean(dir)
	if filepath.Base(root) == "snapshots" {
		root = filepath.Dir(root)
	}
	repo, ok = cacheRepo(filepath.Base(root))
	if !ok {
		return "", "", false
	}
	if st, err := os.Stat(filepath.Join(root, "snapshots")); err != nil || !st.IsDir() {
		return "", "", false
	}
	return repo, root, true
}

// cacheRepo returns the model name of a cache folder's base name,
// models--Org--Name.
func cacheRepo(base string) (string, bool) {
	rest, ok := strings.CutPrefix(base, "models--")
	if !ok {
		return "", false
	}
	org, model, ok := strings.Cut(rest, "--")
	if !ok || org == "" || model == "" {
		return "", false
	}
	return org + "/" + model, true
}

// snapshot resolves the cache folder root of repo (given as path) to its
// one snapshot; several are an error listing them, refs/main's first.
func snapshot(path, root, repo string, alt []string) (Checkpoint, error) {
	snaps := filepath.Join(root, "snapshots")
	entries, err := os.ReadDir(snaps)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("modelpath: %w", err)
	}
	var hashes []string
	for _, e := range entries {
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			hashes = append(hashes, e.Name())
		}
	}
	switch len(hashes) {
	case 0:
		return Checkpoint{}, &Error{Path: path, Kind: ErrNotCheckpoint, msg: fmt.Sprintf("the Hugging Face cache folder of %s, without a snapshot: "+
			"its download did not finish; run it again (huggingface-cli download %[1]s)", repo)}
	case 1:
		c, err := resolve(filepath.Join(snaps, hashes[0]), alt, false)
		if err != nil {
			return c, err
		}
		c.Note = fmt.Sprintf("%s: the Hugging Face cache folder of %s; opening its one snapshot, %s", path, repo, c.Path)
		return c, nil
	}
	main := ""
	if b, err := os.ReadFile(filepath.Join(root, "refs", "main")); err == nil {
		main = strings.TrimSpace(string(b))
	}
	slices.SortFunc(hashes, func(a, b string) int {
		switch {
		case a == main:
			return -1
		case b == main:
			return 1
		}
		return strings.Compare(a, b)
	})
	pick := "for example"
	if hashes[0] == main {
		pick = "refs/main's is"
	}
	return Checkpoint{}, &Error{Path: path, Kind: ErrNotCheckpoint, msg: fmt.Sprintf("the Hugging Face cache folder of %s, with %d snapshots (%s): "+
		"pass the one to open, %s %s", repo, len(hashes), strings.Join(hashes, ", "), pick, filepath.Join(snaps, hashes[0]))}
}

// file is the answer for a file that does not start with the GGUF magic,
// or the checkpoint of a GGUF file.
func file(path string) (Checkpoint, error) {
	if _, ok, err := gguf.Locate(path); err != nil {
		return Checkpoint{}, fmt.Errorf("modelpath: %w", err)
	} else if ok {
		return Checkpoint{Path: path, GGUF: true, Name: name(path)}, nil
	}
	dir := filepath.Dir(path)
	base := filepath.Base(path)
	var msg string
	switch ext := strings.ToLower(filepath.Ext(base)); {
	case ext == ".gguf":
		msg = "not a GGUF file: it does not start with the GGUF magic (a download cut short?)"
	case exists(filepath.Join(dir, "config.json")):
		msg = fmt.Sprintf("a file of the checkpoint folder %s, not the checkpoint: pass the folder, %[1]s", dir)
	case ext == ".safetensors" || base == "model.safetensors.index.json":
		msg = fmt.Sprintf("a file of safetensors weights: govinfer opens a checkpoint folder, config.json beside its weights "+
			"(and tokenizer.json), and %s has no config.json", dir)
	default:
		msg = "a file, neither a GGUF file nor a checkpoint folder (config.json beside safetensors weights)"
	}
	return Checkpoint{}, &Error{Path: path, Kind: ErrNotCheckpoint, msg: msg}
}

// emptyFolder says what a folder without config.json or a GGUF model
// lacks, and where a checkpoint is when a subfolder holds one.
func emptyFolder(dir string, alt []string) string {
	want := "config.json or .gguf file"
	if len(alt) > 0 {
		want = "config.json, " + strings.Join(alt, ", ") + " or .gguf file"
	}
	entries, _ := os.ReadDir(dir)
	var weights bool
	var inside []string
	for _, e := range entries {
		if !e.IsDir() {
			weights = weights || strings.HasSuffix(strings.ToLower(e.Name()), ".safetensors")
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if exists(filepath.Join(sub, "config.json")) {
			inside = append(inside, sub)
		} else if _, ok, _ := gguf.Locate(sub); ok {
			inside = append(inside, sub)
		}
	}
	switch {
	case weights:
		return "safetensors weights without a config.json: a checkpoint folder has its release's config.json (and tokenizer.json) beside them"
	case len(inside) == 1:
		return fmt.Sprintf("no %s in this folder; its subfolder %s is a checkpoint: pass that", want, inside[0])
	case len(inside) > 1:
		return fmt.Sprintf("no %s in this folder; its subfolders %s are checkpoints: pass one", want, strings.Join(inside, ", "))
	}
	return fmt.Sprintf("no %s in this folder: pass a checkpoint folder (config.json, safetensors weights, tokenizer.json) or a GGUF file", want)
}

// name is the model's name for the checkpoint at path: Org/Name for a
// snapshot of the Hugging Face cache, else path's base name.
func name(path string) string {
	path = filepath.Clean(path)
	if snaps := filepath.Dir(path); filepath.Base(snaps) == "snapshots" {
		if repo, ok := cacheRepo(filepath.Base(filepath.Dir(snaps))); ok {
			return repo
		}
	}
	return filepath.Base(path)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
