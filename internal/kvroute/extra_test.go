package kvroute

import (
	"testing"

	"github.com/govinfer/govinfer/kvevents"
)

// TestIndexImages checks that blocks holding an image are indexed under
// keys that include the image (the event's extra_keys): a prompt of the
// same pads, looked up as text or with another image, does not match
// them; with the same image it does.
func TestIndexImages(t *testing.T) {
	h, _ := kvevents.NewHasher("", "m", 4)
	prompt := []int{1, 2, 9, 9, 9, 9, 3, 4, 5}
	img := []kvevents.MMItem{{Hash: "aa", Offset: 2, Length: 4}}
	extra := kvevents.MMExtraKeys(img, 0, 8, 4)
	hs, _ := h.BlocksExtra(nil, h.Root(), prompt[:8], extra)
	x := NewIndex(h)
	ev := kvevents.Event{Tag: kvevents.TagBlockStored, Hashes: hs, Tokens: prompt[:8], BlockSize: 4, ExtraKeys: extra}
	if err := x.Apply("0", kvevents.Batch{Events: []kvevents.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	if m := x.Match(prompt); len(m) != 0 {
		t.Errorf("the pads as text match %v", m)
	}
	keys := h.KeysExtra(prompt, img)
	if len(keys) != 2 || keys[0] != hs[0] || keys[1] != hs[1] {
		t.Errorf("KeysExtra %v, the event's %v", keys, hs)
	}
	if other := h.KeysExtra(prompt, []kvevents.MMItem{{Hash: "bb", Offset: 2, Length: 4}}); other[0] == hs[0] {
		t.Error("another image has the same key")
	}
}
