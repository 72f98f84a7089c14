package jsonvalue

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestDecodeKeepsOrderAndLiterals(t *testing.T) {
	v, err := Decode([]byte(` {"b": 1, "a": {"y": [], "x": 2.50}, "b": 3, "n": null} `))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Dumps(v, PythonOptions())
	if err != nil {
		t.Fatal(err)
	}
	// A repeated key keeps its first position and its last value, as in a
	// Python dict; numbers keep their literals.
	if want := `{"b": 3, "a": {"y": [], "x": 2.50}, "n": null}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for _, bad := range []string{``, `{`, `{"a":1} x`, `[1,]`, `{1: 2}`, strings.Repeat("[", MaxDepth+5) + strings.Repeat("]", MaxDepth+5)} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%.20q) succeeded", bad)
		}
	}
	if _, err := Decode([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth))); err != nil {
		t.Errorf("nesting of MaxDepth: %v", err)
	}
}

func TestDumpsPythonFormatting(t *testing.T) {
	o := NewObject()
	o.Set("s", "é\u2028\x00\x1f\x7f\"\\\n")
	o.Set("f", []any{1.0, math.Copysign(0, -1), 1e16, 1e-5, 0.1, int64(-3), 7})
	got, err := Dumps(o, PythonOptions())
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"s\": \"é\u2028\\u0000\\u001f\x7f\\\"\\\\\\n\", \"f\": [1.0, -0.0, 1e+16, 1e-05, 0.1, -3, 7]}"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	ascii := PythonOptions()
	ascii.EnsureASCII = true
	if got, _ := Dumps("é🚀\x7f", ascii); got != `"\u00e9\ud83d\ude80\u007f"` {
		t.Errorf("ensure_ascii: %s", got)
	}
	ind := "  "
	pretty := DumpOptions{Indent: &ind, ItemSep: ",", KeySep: ": ", SortKeys: true}
	o2 := NewObject()
	o2.Set("b", []any{})
	o2.Set("a", []any{json.Number("1"), NewObject()})
	if got, _ := Dumps(o2, pretty); got != "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}" {
		t.Errorf("indent: %q", got)
	}
	if _, err := Dumps(struct{}{}, PythonOptions()); err == nil {
		t.Error("an unknown type was written")
	}
}

func TestFields(t *testing.T) {
	v, _ := Decode([]byte(`{"s": "x", "n": 1.5, "i": 2, "o": {"b": true}, "a": [1, 2], "z": null}`))
	f := ObjectFields(v.(*Object), "req")
	if s, ok, err := f.Str("s"); s != "x" || !ok || err != nil {
		t.Errorf("Str: %q %v %v", s, ok, err)
	}
	if _, _, err := f.Int("n"); err == nil || err.Field != "req.n" {
		t.Errorf("Int of 1.5: %v", err)
	}
	if _, _, err := f.Str("i"); err == nil || err.Message != "req.i must be a string, got a number" {
		t.Errorf("Str of a number: %v", err)
	}
	o, ok, err := f.Object("o")
	if b, _, _ := o.Bool("b"); !ok || err != nil || !b || o.Name("b") != "req.o.b" {
		t.Errorf("Object: %v %v %v", ok, err, o.Name("b"))
	}
	if l, err := f.IntList("a"); err != nil || len(l) != 2 {
		t.Errorf("IntList: %v %v", l, err)
	}
	if f.Has("z") || f.Has("missing") {
		t.Error("null or missing member reported present")
	}
}

// FuzzDecodeDumps: decoding never panics, and what decodes writes as valid
// JSON that decodes and writes back to the same text.
func FuzzDecodeDumps(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.0, "x"], "b": {"c": null}}`, `[true, false, -1e400]`, `"\ud800"`, `{"a":1,"a":2}`, `"é🚀\u0000"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Decode(data)
		if err != nil {
			return
		}
		out, err := Dumps(v, PythonOptions())
		if err != nil {
			t.Fatalf("Dumps of a decoded value: %v", err)
		}
		if !json.Valid([]byte(out)) {
			t.Fatalf("%q writes invalid JSON %q", data, out)
		}
		w, err := Decode([]byte(out))
		if err != nil {
			t.Fatalf("%q does not decode: %v", out, err)
		}
		again, _ := Dumps(w, PythonOptions())
		if again != out {
			t.Fatalf("not a fixed point: %q then %q", out, again)
		}
	})
}
