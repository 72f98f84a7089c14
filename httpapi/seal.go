package httpapi

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// reasoningSealer seals a model's reasoning for clients that keep it
// themselves: the Responses API's reasoning.encrypted_content (Codex sends
// store: false) and the Messages API's thinking signature. Only a server
// holding the same key can open what it sealed, and nobody can forge or
// alter a sealed text: it is AES-256-GCM under a key derived from
// Config.ReasoningKey (made at start when none is given), with its own
// associated data per use so that a signature cannot be replayed as
// encrypted content or the other way round.
type reasoningSealer struct {
	aead cipher.AEAD
}

// Uses of a sealed text, bound into it as associated data.
const (
	sealEncryptedContent = "govinfer responses reasoning v1"
	sealSignature        = "govinfer messages thinking v1"
)

// newReasoningSealer derives the sealing key from secret (any bytes, such
// as a key file's contents); an empty secret makes a random key.
func newReasoningSealer(secret []byte) (*reasoningSealer, error) {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("httpapi: making the reasoning key: %w", err)
		}
	}
	key := sha256.Sum256(append([]byte("govinfer reasoning key\x00"), secret...))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("httpapi: reasoning key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("httpapi: reasoning key: %w", err)
	}
	return &reasoningSealer{aead: aead}, nil
}

// seal returns text sealed for use, as URL-safe base64.
func (s *reasoningSealer) seal(use, text string) string {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(text)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("httpapi: crypto/rand failed: %v", err)) // never on Linux
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, []byte(text), []byte(use)))
}

// open returns the text sealed for use, and false for anything this
// server's key did not seal for it (another server's, altered, truncated or
// not base64).
func (s *reasoningSealer) open(use, sealed string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(b) < s.aead.NonceSize()+s.aead.Overhead() {
		return "", false
	}
	n := s.aead.NonceSize()
	text, err := s.aead.Open(nil, b[:n], b[n:], []byte(use))
	if err != nil {
		return "", false
	}
	return string(text), true
}
