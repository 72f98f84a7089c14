package main

import (
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/govinfer/govinfer/internal/version"
)

// topSummaries reads the command list of "govinfer help": name to summary.
func topSummaries(t *testing.T) map[string]string {
	t.Helper()
	code, out, errOut := run(t, "", "help")
	if code != exitOK || errOut != "" {
		t.Fatalf("govinfer help: exit %d, stderr %q", code, errOut)
	}
	_, list, ok := strings.Cut(out, "\nCommands:\n")
	if !ok {
		t.Fatalf("govinfer help lists no commands:\n%s", out)
	}
	list, _, _ = strings.Cut(list, "\n\n")
	m := map[string]string{}
	for line := range strings.SplitSeq(list, "\n") {
		name, sum, _ := strings.Cut(strings.TrimSpace(line), " ")
		m[name] = strings.TrimSpace(sum)
	}
	return m
}

// Every command's help is the same whether asked as "govinfer help CMD",
// "govinfer CMD --help" or "-h", and begins with the line "govinfer help"
// shows for it.
func TestHelpOfEveryCommand(t *testing.T) {
	top := topSummaries(t)
	if len(top) != len(commands()) {
		t.Errorf("govinfer help lists %d commands, there are %d: %v", len(top), len(commands()), top)
	}
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			code, help, errOut := run(t, "", "help", c.name)
			if code != exitOK || errOut != "" {
				t.Fatalf("govinfer help %s: exit %d, stderr %q", c.name, code, errOut)
			}
			for _, flag := range []string{"--help", "-h", "-help"} {
				code, out, errOut := run(t, "", c.name, flag)
				if code != exitOK || errOut != "" || out != help {
					t.Errorf("govinfer %s %s: exit %d, stderr %q; its output differs from govinfer help %s:\n%s\n---\n%s", c.name, flag, code, errOut, c.name, out, help)
				}
			}
			first, _, _ := strings.Cut(help, "\n")
			if want := "govinfer " + c.name + " - " + top[c.name]; top[c.name] == "" || first != want {
				t.Errorf("the help begins %q; govinfer help says %q", first, want)
			}
			if !strings.Contains(help, "\nUsage: govinfer "+c.name) {
				t.Errorf("the help has no usage line:\n%s", help)
			}
		})
	}
	for _, args := range [][]string{{"help", "nosuch"}, {"help", "serve", "chat"}, {"nosuch"}} {
		if code, _, errOut := run(t, "", args...); code != exitUsage || errOut == "" {
			t.Errorf("govinfer %q: exit %d, stderr %q", args, code, errOut)
		}
	}
	if _, _, errOut := run(t, "", "serv"); !strings.Contains(errOut, `unknown command "serv"; did you mean serve?`) {
		t.Errorf("govinfer serv: %q", errOut)
	}
}

// flagNames returns the flags a command's help lists.
func flagNames(t *testing.T, cmd string) []string {
	t.Helper()
	_, help, _ := run(t, "", cmd, "--help")
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(help, -1) {
		names = append(names, m[1])
	}
	return names
}

// A mistyped flag of any command is refused naming it, with the flag that
// was meant.
func TestDidYouMean(t *testing.T) {
	tried := 0
	for _, c := range commands() {
		names := flagNames(t, c.name)
		if c.name != "version" && len(names) == 0 {
			t.Errorf("%s: no flags found in its help", c.name)
		}
		for _, name := range names {
			if len(name) < 4 || name[1] == name[2] {
				continue
			}
			typo := name[:1] + name[2:3] + name[1:2] + name[3:] // two letters swapped
			ambiguous := false
			for _, other := range names {
				if other != name && (other == typo || editDistance(typo, other) <= 1 || strings.HasPrefix(other, typo)) {
					ambiguous = true
				}
			}
			if ambiguous {
				continue
			}
			tried++
			code, _, errOut := run(t, "", c.name, "--"+typo, "x")
			want := "govinfer " + c.name + ": unknown flag --" + typo + "; did you mean --" + name + "?"
			if code != exitUsage || !strings.Contains(errOut, want) {
				t.Errorf("govinfer %s --%s: exit %d, %q; want %d, %q", c.name, typo, code, errOut, exitUsage, want)
			}
		}
	}
	t.Logf("%d mistyped flags tried", tried)
	if tried < 50 {
		t.Errorf("only %d flags tried", tried)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--modle", "x"}, "unknown flag --modle; did you mean --model?"},
		{[]string{"serve", "-modle=x"}, "unknown flag --modle; did you mean --model?"},
		{[]string{"serve", "--state-mem", "1GiB"}, "unknown flag --state-mem; did you mean --state-memory?"},
		{[]string{"serve", "--max_tokens", "5"}, "unknown flag --max_tokens; did you mean --max-tokens?"},
		{[]string{"chat", "--temprature", "0"}, "unknown flag --temprature; did you mean --temperature?"},
		{[]string{"diag", "--base-rul", "http://x"}, "unknown flag --base-rul; did you mean --base-url?"},
		{[]string{"serve", "--xyzzy"}, "govinfer serve: unknown flag --xyzzy (see govinfer serve --help)"},
		{[]string{"serve", "--port"}, "flag needs an argument: --port"},
		{[]string{"serve", "--port", "x"}, `invalid value "x" for flag --port`},
	} {
		if code, _, errOut := run(t, "", c.args...); code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("govinfer %q: exit %d, %q; want %q", c.args, code, errOut, c.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"model", "model", 0}, {"modle", "model", 1}, {"mode", "model", 1}, {"modell", "model", 1},
		{"modal", "model", 1}, {"", "abc", 3}, {"port", "host", 2}, {"temprature", "temperature", 1}, {"ca", "abc", 3}} {
		if d := editDistance(c.a, c.b); d != c.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, d, c.d)
		}
	}
}

func TestVersion(t *testing.T) {
	want := "govinfer " + version.String() + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		if code, out, errOut := run(t, "", args...); code != exitOK || out != want || errOut != "" {
			t.Errorf("govinfer %q: exit %d, %q, stderr %q; want %q", args, code, out, errOut, want)
		}
	}
	if code, _, errOut := run(t, "", "version", "extra"); code != exitUsage || !strings.Contains(errOut, "unexpected argument") {
		t.Errorf("govinfer version extra: exit %d, %q", code, errOut)
	}
}
