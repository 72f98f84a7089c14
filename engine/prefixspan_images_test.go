package engine

import (
	"slices"
	"testing"
)

// TestPrefixSpanImages checks what the prefix observer is told of a prompt
// with an image: the real prompt tokens (not the cache's negative keys)
// and the image on exactly the spans its tokens overlap.
func TestPrefixSpanImages(t *testing.T) {
	c := loadVLCase(t)
	a := withTextPrefix(c.req, 64) // 177 tokens, image at [95, 149)
	obs := &observer{}
	warm := newEngine(t, c.m, Config{PrefixCache: true, PrefixObserver: obs})
	run1(t, warm, a)
	im := a.Images[0]
	n := len(im.Embeds) / c.m.Config().HiddenSize
	obs.mu.Lock()
	defer obs.mu.Unlock()
	tagged := 0
	for _, sp := range obs.stored {
		if len(sp.Tokens) == 0 {
			continue
		}
		if !slices.Equal(sp.Tokens, a.Prompt[sp.Start:sp.End]) {
			t.Errorf("span [%d, %d): tokens are not the prompt's", sp.Start, sp.End)
		}
		overlaps := im.Index < sp.End && im.Index+n > sp.Start
		want := []SpanImage(nil)
		if overlaps {
			want = []SpanImage{{Hash: im.Hash, Index: im.Index, Len: n}}
			tagged++
		}
		if !slices.Equal(sp.Images, want) {
			t.Errorf("span [%d, %d): images %v, want %v", sp.Start, sp.End, sp.Images, want)
		}
	}
	if tagged == 0 {
		t.Errorf("no stored span holds the image at [%d, %d): %d spans", im.Index, im.Index+n, len(obs.stored))
	}
}
