package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The documentation these tests read: the README at the repository's root
// and the pages under docs/.
const repoRoot = "../.."

// readmeMaxLines is the README's bound: a quick start, the rest in docs/.
const readmeMaxLines = 300

// otherToolsFlags are the flags the documentation names that belong to
// other programs than govinfer, each with where it comes from.
var otherToolsFlags = map[string]string{
	"local-dir": "huggingface-cli download / hf download (fetching a checkpoint)",
	"outtype":   "llama.cpp's convert_hf_to_gguf.py (writing an mmproj file)",
	"modle":     "the mistyped --model that the commands page shows being refused",
}

// docFiles returns README.md and docs/*.md, relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no pages in docs/")
	}
	files := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(repoRoot, p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// routereplayFlags reads the flags scripts/routereplay defines (the
// routing experiment of docs/replicas.md runs it).
func routereplayFlags(t *testing.T) map[string]bool {
	t.Helper()
	src := readDoc(t, "scripts/routereplay/main.go")
	m := map[string]bool{}
	for _, f := range regexp.MustCompile(`flag\.[A-Za-z]+\("([a-z0-9-]+)"`).FindAllStringSubmatch(src, -1) {
		m[f[1]] = true
	}
	if len(m) == 0 {
		t.Fatal("scripts/routereplay defines no flags")
	}
	return m
}

var (
	flagToken = regexp.MustCompile(`(?:^|[^A-Za-z0-9_/-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)
	codeSpan  = regexp.MustCompile("`[^`]+`")
	// A command line: "govinfer CMD ..." or "bin/govinfer CMD ...", or,
	// in a code span, "CMD --flag ..." (the commands table).
	docCommandLine = regexp.MustCompile(`^(?:\S*govinfer )?([a-z-]+)(?: |$)`)
)

// splitCode splits a Markdown text into its prose, with each code span
// replaced by the word code, the contents of its code spans (which may go
// on over a line break) and the lines of its fenced code blocks.
func splitCode(text string) (prose string, spans, code []string) {
	var b strings.Builder
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inFence = !inFence
		case inFence:
			code = append(code, strings.TrimSpace(line))
		default:
			b.WriteString(line)
		}
		b.WriteString("\n")
	}
	prose = codeSpan.ReplaceAllStringFunc(b.String(), func(s string) string {
		spans = append(spans, strings.Join(strings.Fields(strings.Trim(s, "`")), " "))
		return "code"
	})
	return prose, spans, code
}

// TestDocsFlagsExist checks that every --flag README.md and docs/*.md
// name is a flag of some govinfer command (or of another tool, listed in
// otherToolsFlags), and that a code span or a shell line that starts with
// a command names only that command's flags.
func TestDocsFlagsExist(t *testing.T) {
	byCmd := map[string][]string{}
	known := map[string]bool{"help": true, "version": true} // every command's --help; govinfer --version
	for _, c := range commands() {
		byCmd[c.name] = flagNames(t, c.name)
		for _, f := range byCmd[c.name] {
			known[f] = true
		}
	}
	replay := routereplayFlags(t)
	checked := 0
	for _, name := range docFiles(t) {
		text := readDoc(t, name)
		for i, line := range strings.Split(text, "\n") {
			for _, m := range flagToken.FindAllStringSubmatch(line, -1) {
				f := m[1]
				checked++
				if !known[f] && otherToolsFlags[f] == "" && !(replay[f] && strings.Contains(line, "routereplay")) {
					t.Errorf("%s:%d: --%s is no flag of any govinfer command", name, i+1, f)
				}
			}
		}
		// Spans and shell lines that name a command: its own flags only.
		_, spans, code := splitCode(text)
		lines := append(spans, code...)
		for _, l := range lines {
			m := docCommandLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			own, ok := byCmd[m[1]]
			if !ok || !strings.Contains(l, "govinfer") && !strings.HasPrefix(l, m[1]+" --") {
				continue
			}
			if i := strings.Index(l, "#"); i > 0 && strings.Contains(l[:i], "govinfer") {
				l = l[:i] // a shell comment
			}
			if i := strings.Index(l, " | "); i > 0 {
				l = l[:i] // a pipe to another program
			}
			for _, f := range flagToken.FindAllStringSubmatch(l, -1) {
				if f[1] != "help" && !slices.Contains(own, f[1]) {
					t.Errorf("%s: %q: --%s is no flag of govinfer %s", name, l, f[1], m[1])
				}
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d flags found in the documentation", checked)
	}
}

// TestReadmeQuickStart checks that README.md stays a quick start of at
// most readmeMaxLines lines, links every page of docs/, and shows the Go
// example that prints an answer on a thinking model (llm's Example).
func TestReadmeQuickStart(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := strings.Count(strings.TrimRight(readme, "\n"), "\n") + 1; n > readmeMaxLines {
		t.Errorf("README.md has %d lines; at most %d (move the details into docs/)", n, readmeMaxLines)
	}
	for _, page := range docFiles(t)[1:] {
		if !strings.Contains(readme, "]("+page+")") {
			t.Errorf("README.md does not link %s", page)
		}
	}
	example := readDoc(t, "llm/example_test.go")
	for _, s := range []string{"Thinking: llm.Bool(false)", "llm.KindContent", "llm.KindFinish"} {
		if !strings.Contains(example, s) {
			t.Fatalf("llm/example_test.go no longer has %q: update this test and the README's example", s)
		}
		if !strings.Contains(readme, s) {
			t.Errorf("README.md's Go example lacks %q, which llm's tested Example has", s)
		}
	}
}

var (
	mdLink   = regexp.MustCompile(`!?\[[^\]\n]*\]\(([^)\s]+)\)`)
	heading  = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	slugDrop = regexp.MustCompile(`[^a-z0-9 _-]`)
)

// anchors returns the anchors of a Markdown file's headings, as GitHub
// makes them (lower case, punctuation dropped, spaces to hyphens).
func anchors(text string) map[string]bool {
	m := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if h := heading.FindStringSubmatch(line); h != nil && !inFence {
			s := slugDrop.ReplaceAllString(strings.ToLower(h[1]), "")
			m[strings.ReplaceAll(s, " ", "-")] = true
		}
	}
	return m
}

// TestDocsLinks checks that every relative link of README.md and
// docs/*.md leads to a file that exists, and to a heading of it where the
// link names one.
func TestDocsLinks(t *testing.T) {
	links := 0
	for _, name := range docFiles(t) {
		text := readDoc(t, name)
		prose, _, _ := splitCode(text) // code is not links
		for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			path := name
			if file != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(name), file))
			}
			if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(path))); err != nil {
				t.Errorf("%s: link %s: %v", name, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(readDoc(t, path))[anchor] {
				t.Errorf("%s: link %s: %s has no heading #%s", name, target, path, anchor)
			}
		}
	}
	if links < 20 {
		t.Errorf("only %d relative links found", links)
	}
}
