package httpapi

import (
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/govinfer/govinfer/imageproc"
	"github.com/govinfer/govinfer/kvevents"
	"github.com/govinfer/govinfer/llm"
)

// TestKVEventsImages checks the BlockStored events of requests with an
// image: their token_ids are the real ids (the image's pads, not the
// prefix cache's negative keys), their extra_keys name the image's hash
// (hex SHA-256) with its offset on exactly the blocks holding its tokens,
// two images behind the same pads give different block hashes, and a
// router index (Hasher.BlocksExtra) recomputes the engine's keys.
func TestKVEventsImages(t *testing.T) {
	s := startServerDir(t, vlCheckpoint(t), Config{KVEvents: "tcp://127.0.0.1:0", PodID: "p"}, llm.Options{MaxModelLen: 1024, MaxImages: 2})
	msgs := subscribeEvents(t, s)
	drain := func() []kvevents.Event {
		var evs []kvevents.Event
		for {
			select {
			case m := <-msgs:
				if m.Err != nil {
					t.Fatal(m.Err)
				}
				evs = append(evs, m.Batch.Events...)
			case <-time.After(300 * time.Millisecond):
				return evs
			}
		}
	}
	drain()

	long := strings.Repeat("Describe every part of the picture with care and in detail. ", 3)
	stored := func(name string) []kvevents.Event {
		t.Helper()
		png := imageFile(t, name)
		body := chatWithImage(dataURL(png))
		msg := body["messages"].([]any)[0].(map[string]any)
		msg["content"] = append(msg["content"].([]any), map[string]any{"type": "text", "text": long})
		if code, out := post(t, s, "/v1/chat/completions", body); code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, code, out)
		}
		var out []kvevents.Event
		for _, ev := range drain() {
			if ev.Tag == kvevents.TagBlockStored {
				out = append(out, ev)
			}
		}
		if len(out) == 0 {
			t.Fatalf("%s: no BlockStored", name)
		}
		return out
	}
	hashOf := func(name string) string {
		img, err := imageproc.Decode(imageFile(t, name))
		if err != nil {
			t.Fatal(err)
		}
		h := imageproc.HashRGB(img)
		return hex.EncodeToString(h[:])
	}

	const pad = 996 // <|image_pad|> in testckpt.WriteVL's tokenizer
	router, _ := kvevents.NewHasher("", "test-model", BlockSize)
	check := func(name string, evs []kvevents.Event) (first []uint64) {
		t.Helper()
		want := hashOf(name)
		pos, pads, imgStart, tagged := 0, 0, -1, 0
		for _, ev := range evs {
			if ev.HasParent != (pos > 0) {
				t.Fatalf("%s: a span at %d with parent %v", name, pos, ev.HasParent)
			}
			for i, tok := range ev.Tokens {
				if tok < 0 {
					t.Fatalf("%s: token_ids[%d] = %d", name, i, tok)
				}
				if tok == pad {
					if imgStart < 0 {
						imgStart = pos + i
					}
					pads++
				}
			}
			parent := router.Root()
			if ev.HasParent {
				parent = ev.Parent
			}
			keys, err := router.BlocksExtra(nil, parent, ev.Tokens, ev.ExtraKeys)
			if err != nil || !slices.Equal(keys, ev.Hashes) {
				t.Errorf("%s: block hashes %v, recomputed %v (%v)", name, ev.Hashes, keys, err)
			}
			for b := range len(ev.Hashes) {
				start := pos + b*BlockSize
				holds := imgStart >= 0 && slices.Contains(ev.Tokens[b*BlockSize:(b+1)*BlockSize], pad)
				var got []kvevents.MMKey
				if ev.ExtraKeys != nil {
					got = ev.ExtraKeys[b]
				}
				if holds {
					tagged++
					if len(got) != 1 || got[0].Hash != want || got[0].Offset != imgStart-start {
						t.Errorf("%s: block at %d holds the image from %d; extra keys %+v, want [{%s %d}]", name, start, imgStart, got, want, imgStart-start)
					}
				} else if got != nil {
					t.Errorf("%s: block at %d holds no image token; extra keys %+v", name, start, got)
				}
			}
			if first == nil {
				first = ev.Hashes
			}
			pos += len(ev.Tokens)
		}
		if pads == 0 || tagged == 0 {
			t.Fatalf("%s: %d image pads in the stored tokens, %d blocks holding them", name, pads, tagged)
		}
		return first
	}
	a := check("gradient_64x48.png", stored("gradient_64x48.png"))
	b := check("gray_44x36.png", stored("gray_44x36.png"))
	if a[0] == b[0] {
		t.Errorf("two images give the same first block hash %d", a[0])
	}
}
