package prefixdisk

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the reader: it must never panic,
// never return an item that is not within the limits (so never allocate
// more than a block's or a state's payload), and what it accepts must be
// exactly what the writer writes.
func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, it := range []*Item{kvItem(r, 7, 3, 8), stateItem(r, 7, 8, 2)} {
		hdr, body := encodeItem(it, testKey(1))
		file := append(append(hdr, body...), floatBytes(it.Data)...)
		f.Add(file)
		f.Add(file[:len(file)-1])
		f.Add(hdr)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		it, err := decodeItem(bytes.NewReader(data), int64(len(data)), testKey(1), testLim)
		if err == nil {
			if it.Kind == KindKV && (len(it.Tokens) != testLim.BlockTokens || len(it.Data) != testLim.KVFloats) ||
				it.Kind == KindState && (len(it.Tokens) != 0 || len(it.Data) != testLim.StateFloats) ||
				it.End <= 0 || it.End > testLim.MaxEnd {
				t.Fatalf("decoded an item outside the limits: %+v", it)
			}
			// What decodes encodes to the same bytes.
			hdr, body := encodeItem(it, testKey(1))
			if !bytes.Equal(append(append(hdr, body...), floatBytes(it.Data)...), data) {
				t.Fatal("a decoded file does not encode back to its bytes")
			}
		}
	})
}

// FuzzStoreFile puts arbitrary bytes in the directory as a KV block's and
// a state's file, then opens the store and reads them: the index rebuilt
// at open and the reads must skip what is not whole and never panic.
func FuzzStoreFile(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, it := range []*Item{kvItem(r, 7, 3, 8), stateItem(r, 7, 8, 2)} {
		hdr, body := encodeItem(it, testKey(1))
		file := append(append(hdr, body...), floatBytes(it.Data)...)
		f.Add(file)
		f.Add(file[:len(file)-1])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		s, err := Open(dir, testKey(1), testLim, Options{Budget: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		os.WriteFile(filepath.Join(s.Dir(), "0000000000000007.kv"), data, 0o644)
		os.WriteFile(filepath.Join(s.Dir(), "0000000000000007.st"), data, 0o644)
		s.scan()
		s.Get(KindKV, 7, 3, 8, nil)
		s.Get(KindState, 7, 0, 8, nil)
	})
}
