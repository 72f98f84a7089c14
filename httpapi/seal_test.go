package httpapi

import (
	"strings"
	"testing"
)

// Sealed reasoning opens only on a server with the same key, for the same
// use, unaltered.
func TestReasoningSealer(t *testing.T) {
	a, err := newReasoningSealer([]byte("shared secret"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newReasoningSealer([]byte("shared secret"))
	other, _ := newReasoningSealer(nil)
	text := "The user wants a haiku. 思考 <tags> too."
	sealed := a.seal(sealEncryptedContent, text)
	if strings.Contains(sealed, "haiku") {
		t.Fatalf("sealed text shows the reasoning: %s", sealed)
	}
	if got, ok := b.open(sealEncryptedContent, sealed); !ok || got != text {
		t.Errorf("same key: %q %v, want %q", got, ok, text)
	}
	if _, ok := other.open(sealEncryptedContent, sealed); ok {
		t.Error("another key opened it")
	}
	if _, ok := a.open(sealSignature, sealed); ok {
		t.Error("opened for another use")
	}
	flipped := []byte(sealed)
	flipped[len(flipped)/2] ^= 1
	for _, bad := range []string{"", "x", "not base64 !", sealed[:len(sealed)-2], string(flipped)} {
		if _, ok := a.open(sealEncryptedContent, bad); ok {
			t.Errorf("opened %q", bad)
		}
	}
	if a.seal(sealEncryptedContent, text) == sealed {
		t.Error("two seals of one text are equal: the nonce is not fresh")
	}
}
