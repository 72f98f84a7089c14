package chattemplate

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestFloatRepr(t *testing.T) {
	a, b := 0.1, 0.2
	point3 := a + b
	for _, c := range []struct {
		f    float64
		want string
	}{
		{0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {1, "1.0"}, {-1.5, "-1.5"}, {0.1, "0.1"},
		{point3, "0.30000000000000004"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
		{123456789012345678, "1.2345678901234568e+17"}, {1e-4, "0.0001"}, {1e-5, "1e-05"},
		{2.5e-7, "2.5e-07"}, {1e22, "1e+22"}, {1e300, "1e+300"}, {5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"}, {math.Inf(1), "inf"}, {math.Inf(-1), "-inf"},
		{math.NaN(), "nan"}, {123.456, "123.456"}, {9999999999999998, "9999999999999998.0"},
		{0.00012345, "0.00012345"}, {1.5e-5, "1.5e-05"},
	} {
		if got := floatRepr(c.f); got != c.want {
			t.Errorf("floatRepr(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// TestFloatReprRoundTrip checks on random floats that the repr parses back
// to the same value and has Python's layout.
func TestFloatReprRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20000; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		s := floatRepr(f)
		g, err := strconv.ParseFloat(s, 64)
		if err != nil || g != f {
			t.Fatalf("floatRepr(%v) = %q does not round-trip", f, s)
		}
		a := math.Abs(f)
		sci := strings.Contains(s, "e")
		if wantSci := a != 0 && (a < 1e-4 || a >= 1e16); sci != wantSci {
			t.Fatalf("floatRepr(%v) = %q: scientific=%v", f, s, sci)
		}
		if !sci && !strings.Contains(s, ".") {
			t.Fatalf("floatRepr(%v) = %q has no decimal point", f, s)
		}
		if sci {
			exp := s[strings.Index(s, "e")+1:]
			if (exp[0] != '+' && exp[0] != '-') || len(exp) < 3 {
				t.Fatalf("floatRepr(%v) = %q: bad exponent", f, s)
			}
		}
	}
}

func TestStringRepr(t *testing.T) {
	for in, want := range map[string]string{
		"abc":         `'abc'`,
		"it's":        `"it's"`,
		`a"b`:         `'a"b'`,
		`a'b"c`:       `'a\'b"c'`,
		"\n\t\r\\":    `'\n\t\r\\'`,
		"\x01\x7f":    `'\x01\x7f'`,
		"é\u00a0":     `'é\xa0'`,
		"\u2028東🚀":    `'\u2028東🚀'`,
		"\U000e0001x": `'\U000e0001x'`,
	} {
		if got := pyRepr(in); got != want {
			t.Errorf("repr(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestJSONDumps(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"z": 1, "a": [1.0, -0.0, 1e400, 12345678901234567890, "\u2028<&>\u0000\u001f\u007f", null, true], "m": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := fromGo(v)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pyJSONDumps(c, defaultJSONOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"z\": 1, \"a\": [1.0, -0.0, Infinity, 12345678901234567890, \"\u2028<&>\\u0000\\u001f\x7f\", null, true], \"m\": {}}"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	o := defaultJSONOptions()
	o.EnsureASCII = true
	got, _ = pyJSONDumps("é🚀\x7f", o)
	if want := `"\u00e9\ud83d\ude80\u007f"`; got != want {
		t.Fatalf("ensure_ascii: got %s want %s", got, want)
	}
	if _, err := pyJSONDumps(undefined{name: "x"}, o); err == nil {
		t.Fatal("undefined encoded without error")
	}
}

func TestDecodeJSON(t *testing.T) {
	v, err := DecodeJSON([]byte(` {"b": 1, "a": {"y": [], "x": 2.50}, "b": 3} `))
	if err != nil {
		t.Fatal(err)
	}
	o := v.(*Object)
	if got := strings.Join(o.Keys(), ","); got != "b,a" {
		t.Fatalf("keys %q", got)
	}
	if b, _ := o.Get("b"); b != json.Number("3") {
		t.Fatalf("duplicate key: b = %v, want the last value 3 in the first position", b)
	}
	inner, _ := o.Get("a")
	if got := strings.Join(inner.(*Object).Keys(), ","); got != "y,x" {
		t.Fatalf("inner keys %q", got)
	}
	out, err := json.Marshal(o)
	if err != nil || string(out) != `{"b":3,"a":{"y":[],"x":2.50}}` {
		t.Fatalf("MarshalJSON = %s, %v", out, err)
	}
	var o2 Object
	if err := json.Unmarshal(out, &o2); err != nil || strings.Join(o2.Keys(), ",") != "b,a" {
		t.Fatalf("UnmarshalJSON: %v %v", o2.Keys(), err)
	}
	o2.Delete("b")
	if strings.Join(o2.Keys(), ",") != "a" {
		t.Fatalf("Delete: %v", o2.Keys())
	}
	for _, bad := range []string{``, `{`, `{"a":1} x`, `[1,]`, `{1: 2}`, strings.Repeat("[", maxJSONDepth+5)} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("DecodeJSON(%.20q) succeeded", bad)
		}
	}
}

func TestRenderGoValues(t *testing.T) {
	tmpl, err := Parse(`{{ m }} {{ l }} {{ n }} {{ i }} {{ u }} {{ f }} {{ p }} {{ j }}|{{ undef is defined }}`)
	if err != nil {
		t.Fatal(err)
	}
	three := 3
	got, err := tmpl.Render(map[string]any{
		"m": map[string]any{"b": 1, "a": []string{"x"}}, "l": []int{1, 2}, "n": nil,
		"i": int64(-4), "u": uint64(math.MaxUint64), "f": float32(0.5), "p": &three, "j": json.Number("1.0"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{'a': ['x'], 'b': 1} [1, 2] None -4 18446744073709551615 0.5 3 1.0|False"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	if _, err := tmpl.Render(map[string]any{"m": make(chan int)}); err == nil {
		t.Fatal("channel accepted")
	}
}

func TestRenderChatKwargs(t *testing.T) {
	tmpl, err := Parse(`{{ enable_thinking is defined }}|{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ add_generation_prompt }}|{{ messages|length }}`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tmpl.RenderChat(Options{Messages: []any{}, EOS: "</s>"})
	if err != nil || got != "False|None|</s>|None|False|0" {
		t.Fatalf("got %q, %v", got, err)
	}
	got, err = tmpl.RenderChat(Options{Messages: []any{1}, AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false, "eos_token": "E"}})
	if err != nil || got != "True|None|E|None|True|1" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := tmpl.RenderChat(Options{Kwargs: map[string]any{"messages": 1}}); err == nil {
		t.Fatal("kwargs replaced messages")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no chat template") {
		t.Fatalf("empty dir: %v", err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	render := func() string {
		tmpl, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := tmpl.Render(nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write("tokenizer_config.json", `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D{{ 1 }}"}]}`)
	if got := render(); got != "D1" {
		t.Fatalf("named list: %q", got)
	}
	write("tokenizer_config.json", `{"chat_template": "S"}`)
	if got := render(); got != "S" {
		t.Fatalf("string: %q", got)
	}
	write("chat_template.jinja", "J\n")
	if got := render(); got != "J" {
		t.Fatalf("jinja file: %q", got)
	}
	write("chat_template.jinja", "{% if %}")
	_, err := Load(dir)
	var e *Error
	if !errors.As(err, &e) || e.Kind != "TemplateSyntaxError" || e.Line != 1 || !strings.Contains(err.Error(), "chat_template.jinja") {
		t.Fatalf("syntax error: %v", err)
	}
}

func TestErrorLines(t *testing.T) {
	_, err := Parse("a\n{{ x }}\n{% for %}")
	var e *Error
	if !errors.As(err, &e) || e.Line != 3 {
		t.Fatalf("got %v (line %d), want a syntax error on line 3", err, e.Line)
	}
	tmpl, err := Parse("a\n\n{{ 1 + 'x' }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(nil)
	if !errors.As(err, &e) || e.Line != 3 || e.Kind != "TypeError" {
		t.Fatalf("got %v, want a TypeError on line 3", err)
	}
}

func TestLimits(t *testing.T) {
	for _, src := range []string{
		`{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
		`{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`,
		`{{ 'x' * 1000000000 }}`,
		`{{ 2 ** 100000000 }}`,
		`{{ range(100000)|list|unique|list|length }}`,
		`{% set l = range(100000)|list %}{% for i in l %}{{ i in l }}{% endfor %}`,
		`{% set s = 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' * 100000 %}{% for i in range(100000) %}{{ s }}{% endfor %}`,
	} {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.maxSteps = 100_000 // the default budget takes seconds to exhaust
		if _, err := tmpl.Render(nil); err == nil {
			t.Errorf("%s: no error", src)
		}
	}
	if _, err := Parse("{{ " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000) + " }}"); err == nil {
		t.Error("deep expression parsed")
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, cases := loadGolden(t)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range cases {
				got, err := renderCase(tmpl, c.Inputs)
				if c.Rendered != nil && (err != nil || got != *c.Rendered) {
					t.Errorf("%s: concurrent render differs", c.Name)
					return
				}
			}
		}()
	}
	wg.Wait()
}
