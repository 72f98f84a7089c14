package kvevents

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestMMExtraKeys(t *testing.T) {
	items := []MMItem{{Hash: "aa", Offset: 2, Length: 5}, {Hash: "bb", Offset: 9, Length: 3}}
	// vLLM's example (PR 11187): blocks of 4 from 0: (aa,2) | (aa,-2) | (bb,1).
	got := MMExtraKeys(items, 0, 12, 4)
	want := [][]MMKey{{{"aa", 2}}, {{"aa", -2}}, {{"bb", 1}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("MMExtraKeys = %v, want %v", got, want)
	}
	if got := MMExtraKeys(items, 12, 20, 4); got != nil {
		t.Errorf("blocks after the items: %v, want nil", got)
	}
	if got := MMExtraKeys(items, 4, 16, 4); !reflect.DeepEqual(got, [][]MMKey{{{"aa", -2}}, {{"bb", 1}}, nil}) {
		t.Errorf("from 4: %v", got)
	}
	two := []MMItem{{Hash: "aa", Offset: 1, Length: 2}, {Hash: "bb", Offset: 3, Length: 2}}
	if got := MMExtraKeys(two, 0, 4, 4); !reflect.DeepEqual(got, [][]MMKey{{{"aa", 1}, {"bb", 3}}}) {
		t.Errorf("two items in a block: %v", got)
	}
}

// TestSpanStoredExtra checks a BlockStored with extra keys: vLLM's nine
// fields with extra_keys one entry per block of [hash, offset] pairs, its
// decoding, hashes that depend on the image, and that a span without keys
// is SpanStored's event byte for byte.
func TestSpanStoredExtra(t *testing.T) {
	sink := &memSink{}
	p, err := newPublisher(Config{Model: "m", Topic: "kv@p@m", BlockSize: 4}, sink)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int{1, 2, 9, 9, 9, 9, 3, 4}
	extra := [][]MMKey{{{"aa", 2}}, {{"aa", -2}}}
	a, err := p.SpanStoredExtra(Span{}, toks, extra)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.SpanStoredExtra(Span{}, toks, [][]MMKey{{{"bb", 2}}, {{"bb", -2}}})
	text, _ := p.SpanStored(Span{}, toks)
	if a.hashes[0] == b.hashes[0] || a.hashes[0] == text.hashes[0] || a.hashes[1] == b.hashes[1] {
		t.Errorf("hashes of two images and of text: %v %v %v", a.hashes, b.hashes, text.hashes)
	}
	if want, _ := p.hasher.Blocks(nil, p.hasher.Root(), toks); !slices.Equal(text.hashes, want) {
		t.Errorf("text hashes %v, want %v", text.hashes, want)
	}
	if !bytes.Equal(blockStored(text.hashes, 0, false, toks, 4, Attrs{Extra: [][]MMKey{nil, nil}}), blockStored(text.hashes, 0, false, toks, 4, Attrs{})) {
		t.Error("a span with only empty extra keys is not encoded as a text span")
	}
	enc := blockStored(a.hashes, 0, false, toks, 4, Attrs{Extra: extra})
	var raw []any
	if err := msgpack.Unmarshal(enc, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 9 || raw[5] != nil || raw[6] != nil || raw[7] != nil {
		t.Fatalf("fields %v", raw)
	}
	ek, ok := raw[8].([]any)
	if !ok || len(ek) != 2 {
		t.Fatalf("extra_keys %#v", raw[8])
	}
	pair := ek[1].([]any)[0].([]any)
	if pair[0] != "aa" || reflect.ValueOf(pair[1]).Int() != -2 {
		t.Errorf("extra_keys[1] = %#v", ek[1])
	}
	ev, err := decodeEvent(raw)
	if err != nil || !reflect.DeepEqual(ev.ExtraKeys, extra) || !slices.Equal(ev.Tokens, toks) {
		t.Errorf("decoded %+v, %v", ev, err)
	}
	if _, err := p.SpanStoredExtra(Span{}, toks, [][]MMKey{{{"aa", 2}}}); err == nil {
		t.Error("extra keys for one block of two accepted")
	}
	// vLLM's older bare identifiers decode too.
	old, _ := msgpack.Marshal([]any{"BlockStored", []any{uint64(1)}, nil, []any{1, 2, 3, 4}, 4, nil, "GPU", nil, []any{[]any{"cc"}}})
	raw = nil
	if err := msgpack.Unmarshal(old, &raw); err != nil {
		t.Fatal(err)
	}
	ev, err = decodeEvent(raw)
	if err != nil || !reflect.DeepEqual(ev.ExtraKeys, [][]MMKey{{{"cc", 0}}}) {
		t.Errorf("bare identifier: %+v, %v", ev.ExtraKeys, err)
	}
	p.Close()
}

// memSink discards what is sent.
type memSink struct{}

func (memSink) send(string, uint64, []byte) error { return nil }
func (memSink) close() error                      { return nil }
