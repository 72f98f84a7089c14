package kvevents

import (
	"slices"
	"testing"
)

// TestLoRASpan: a span computed with a LoRA adapter carries lora_id and
// lora_name where vLLM's BlockStored does (fields 5 and 7), and its
// blocks chain from the root of the adapter's name, so a router hashing
// a request for the adapter (its model field) finds them, and one
// hashing the same tokens for the base model does not.
func TestLoRASpan(t *testing.T) {
	s := &recordSink{}
	p, err := newPublisher(Config{Topic: "kv@p@m", Model: "base", BlockSize: 4}, s)
	if err != nil {
		t.Fatal(err)
	}
	toks := []int{1, 2, 3, 4, 5, 6, 7, 8}
	base, _ := p.SpanStored(Span{}, toks[:4])
	ad, _ := p.SpanStoredAttrs(Span{}, toks[:4], Attrs{LoRAName: "sql", LoRAID: 3})
	next, _ := p.SpanStoredAttrs(ad, toks[4:], Attrs{LoRAName: "sql", LoRAID: 3, Medium: MediumCPU})
	p.Close()

	forAdapter, err := NewHasher("", "sql", 4)
	if err != nil {
		t.Fatal(err)
	}
	if want := forAdapter.Keys(toks); !slices.Equal(append(ad.Hashes(), next.Hashes()...), want) {
		t.Errorf("the adapter's blocks %v %v, a router hashing for model sql gets %v", ad.Hashes(), next.Hashes(), want)
	}
	if slices.Equal(ad.Hashes(), base.Hashes()) {
		t.Errorf("the adapter's block has the base model's hash %v", base.Hashes())
	}
	var evs [][]any
	var dec []Event
	for _, payload := range s.sent {
		evs = append(evs, routerDecode(t, payload)...)
		b, err := Decode(payload)
		if err != nil {
			t.Fatal(err)
		}
		dec = append(dec, b.Events...)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	if len(evs[0]) != 5 {
		t.Errorf("the base span's event has %d fields, want 5: %v", len(evs[0]), evs[0])
	}
	for i, ev := range evs[1:] {
		if len(ev) != 8 || ev[7] != "sql" {
			t.Fatalf("adapter event %d: %v", i, ev)
		}
		if id, err := intOf(ev[5]); err != nil || id != 3 {
			t.Errorf("adapter event %d: lora_id %v", i, ev[5])
		}
		if d := dec[i+1]; d.LoRAName != "sql" || d.LoRAID != 3 {
			t.Errorf("adapter event %d decodes as lora %q id %d", i, d.LoRAName, d.LoRAID)
		}
	}
	if dec[2].Medium != MediumCPU || evs[1][6] != nil {
		t.Errorf("media: %q, %v", dec[2].Medium, evs[1][6])
	}
}
