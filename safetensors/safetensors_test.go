package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/govinfer/govinfer/internal/half"
)

// randomTensors makes n tensors of mixed dtypes and shapes (odd sizes
// included, so that alignment matters) filled with random bytes.
func randomTensors(rng *rand.Rand, n int) []Tensor {
	dtypes := []DType{F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL, U16, U32, U64, F8E4M3}
	out := make([]Tensor, n)
	for i := range out {
		shape := make([]int, rng.IntN(4))
		for j := range shape {
			shape[j] = rng.IntN(9)
		}
		t := Tensor{Name: fmt.Sprintf("layer.%d.w%d", rng.IntN(1000), i), DType: dtypes[rng.IntN(len(dtypes))], Shape: shape}
		t.Data = make([]byte, t.NumElements()*t.DType.Size())
		for j := range t.Data {
			t.Data[j] = byte(rng.Uint32())
		}
		out[i] = t
	}
	return out
}

// checkSame verifies that f holds exactly the tensors want.
func checkSame(t *testing.T, names []string, get func(string) (Tensor, error), want []Tensor) {
	t.Helper()
	wantNames := make([]string, len(want))
	for i, w := range want {
		wantNames[i] = w.Name
	}
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Fatalf("names %v, want %v", names, wantNames)
	}
	for _, w := range want {
		got, err := get(w.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != w.Name || got.DType != w.DType || !slices.Equal(got.Shape, w.Shape) && !(len(got.Shape) == 0 && len(w.Shape) == 0) || !bytes.Equal(got.Data, w.Data) {
			t.Fatalf("tensor %s: got %s %v (%d bytes), want %s %v (%d bytes)", w.Name, got.DType, got.Shape, len(got.Data), w.DType, w.Shape, len(w.Data))
		}
		if size := got.DType.Size(); len(got.Data) > 0 && uintptr(unsafe.Pointer(&got.Data[0]))%uintptr(size) != 0 {
			t.Errorf("tensor %s (%s) is not aligned to %d bytes", w.Name, got.DType, size)
		}
	}
}

func fileGetter(f *File) func(string) (Tensor, error) {
	return func(name string) (Tensor, error) {
		t, ok := f.Tensor(name)
		if !ok {
			return t, fmt.Errorf("tensor %s missing", name)
		}
		return t, nil
	}
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	for iter := range 20 {
		tensors := randomTensors(rng, 1+rng.IntN(30))
		meta := map[string]string{"format": "pt", "iter": fmt.Sprint(iter), "html": "<&>"}
		path := filepath.Join(dir, fmt.Sprintf("rt%d.safetensors", iter))
		if err := WriteFile(path, tensors, meta); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, f.Names(), fileGetter(f), tensors)
		if got := f.Metadata(); !maps.Equal(got, meta) {
			t.Errorf("metadata %v, want %v", got, meta)
		}
		// The header is padded so that the data region starts 8-byte aligned.
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
			t.Errorf("header length %d leaves the data unaligned", n)
		}
		// Marshal gives the same bytes as WriteFile.
		m, err := Marshal(tensors, meta)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m, raw) {
			t.Errorf("Marshal and WriteFile differ")
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if _, ok := f.Tensor(tensors[0].Name); ok {
			t.Errorf("Tensor after Close succeeded")
		}
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("leftover file %s", e.Name())
		}
	}
}

func TestWriteRejectsBadTensors(t *testing.T) {
	dir := t.TempDir()
	ok := Tensor{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 8)}
	cases := []struct {
		name    string
		tensors []Tensor
		msg     string
	}{
		{"wrong length", []Tensor{{Name: "a", DType: BF16, Shape: []int{3}, Data: make([]byte, 4)}}, `tensor "a": dtype BF16 with shape [3] needs 6 bytes, data has 4`},
		{"duplicate", []Tensor{ok, ok}, `tensor "a" given twice`},
		{"empty name", []Tensor{{DType: F32, Shape: []int{}, Data: make([]byte, 4)}}, "empty name"},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: U8, Shape: []int{}, Data: make([]byte, 1)}}, "reserved"},
		{"bad dtype", []Tensor{{Name: "a", DType: "F4", Shape: []int{2}, Data: make([]byte, 1)}}, "unsupported dtype"},
		{"negative dim", []Tensor{{Name: "a", DType: U8, Shape: []int{-1, -1}, Data: make([]byte, 1)}}, "negative dimension"},
		{"overflow", []Tensor{{Name: "a", DType: U8, Shape: []int{math.MaxInt32, math.MaxInt32, math.MaxInt32}, Data: nil}}, "too large"},
	}
	for _, c := range cases {
		path := filepath.Join(dir, "x.safetensors")
		err := WriteFile(path, c.tensors, nil)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: got %v, want an error saying %q", c.name, err, c.msg)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: file written despite the error", c.name)
		}
	}
}

// TestStreamingWriter writes tensors in pieces, in reverse order and from
// several goroutines, and checks the misuse errors.
func TestStreamingWriter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	tensors := randomTensors(rng, 12)
	infos := make([]TensorInfo, len(tensors))
	for i, tt := range tensors {
		infos[i] = tt.Info()
	}
	path := filepath.Join(t.TempDir(), "stream.safetensors")
	w, err := NewWriter(path, infos, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var wg sync.WaitGroup
	errs := make([]error, len(tensors))
	for i := len(tensors) - 1; i >= 0; i-- {
		wg.Go(func() {
			tw, err := w.TensorWriter(tensors[i].Name)
			if err != nil {
				errs[i] = err
				return
			}
			data := tensors[i].Data
			for len(data) > 0 { // odd-sized pieces
				n := min(len(data), 3)
				if _, err := tw.Write(data[:n]); err != nil {
					errs[i] = err
					return
				}
				data = data[n:]
			}
			if _, err := tw.Write([]byte{0}); err == nil {
				errs[i] = fmt.Errorf("writing past the end of %s succeeded", tensors[i].Name)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor(tensors[0].Name, tensors[0].Data); err == nil || !strings.Contains(err.Error(), "written twice") {
		t.Errorf("second write: %v", err)
	}
	if err := w.WriteTensor("nope", nil); err == nil || !strings.Contains(err.Error(), "not declared") {
		t.Errorf("undeclared tensor: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	checkSame(t, f.Names(), fileGetter(f), tensors)
}

func TestWriterIncomplete(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "partial.safetensors")
	w, err := NewWriter(path, []TensorInfo{{Name: "a", DType: F32, Shape: []int{4}}, {Name: "b", DType: U8, Shape: []int{2}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTensor("b", []byte{1}); err == nil {
		t.Error("short WriteTensor succeeded")
	}
	if err := w.WriteTensor("b", []byte{1, 2}); err != nil {
		t.Fatal(err)
	}
	tw, err := w.TensorWriter("a")
	if err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 5))
	err = w.Close()
	if err == nil || !strings.Contains(err.Error(), `tensor "a" has 5 of its 16 bytes`) {
		t.Errorf("Close of an incomplete file: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

func TestShardedRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tensors := randomTensors(rng, 40)
	var total int64
	for _, tt := range tensors {
		total += int64(len(tt.Data))
	}
	dir := t.TempDir()
	if err := WriteSharded(dir, tensors, 200); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := c.Files()
	if len(files) < 3 {
		t.Fatalf("only %d shards for %d bytes at 200 per shard", len(files), total)
	}
	for i, p := range files {
		if want := shardName(i, len(files)); filepath.Base(p) != want {
			t.Errorf("shard %d is %s, want %s", i, filepath.Base(p), want)
		}
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		// A shard exceeds the limit only when it holds one big tensor.
		if f.DataSize() > 200 && f.Len() != 1 {
			t.Errorf("shard %s holds %d bytes in %d tensors", p, f.DataSize(), f.Len())
		}
		if f.Metadata()["format"] != "pt" {
			t.Errorf("shard %s metadata %v", p, f.Metadata())
		}
		f.Close()
	}
	checkSame(t, c.Names(), c.Tensor, tensors)
	if c.TotalBytes() != total {
		t.Errorf("TotalBytes %d, want %d", c.TotalBytes(), total)
	}
	var idx index
	raw, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		t.Fatal(err)
	}
	if got, _ := idx.Metadata["total_size"].(float64); int64(got) != total {
		t.Errorf("index total_size %v, want %d", idx.Metadata["total_size"], total)
	}
	if _, err := c.Tensor("absent"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"absent"`) || !strings.Contains(err.Error(), dir) {
		t.Errorf("Tensor(absent) = %v", err)
	}
	if c.Has("absent") || !c.Has(tensors[0].Name) {
		t.Error("Has is wrong")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tensor(tensors[0].Name); !errors.Is(err, ErrClosed) {
		t.Errorf("Tensor after Close: %v", err)
	}

	// Rewriting the same directory as a single file removes the stale index.
	if err := WriteSharded(dir, tensors, 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, IndexFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale index left: %v", err)
	}
	c, err = OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if files := c.Files(); len(files) != 1 || filepath.Base(files[0]) != SingleFileName {
		t.Errorf("single-shard files %v", files)
	}
	checkSame(t, c.Names(), c.Tensor, tensors)
}

// writeIndex writes an index file mapping tensors to shards.
func writeIndex(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointErrors(t *testing.T) {
	a := Tensor{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 8)}
	b := Tensor{Name: "b", DType: BF16, Shape: []int{3}, Data: make([]byte, 6)}
	mk := func(t *testing.T, shards map[string][]Tensor, idx string) string {
		dir := t.TempDir()
		for name, ts := range shards {
			if err := WriteFile(filepath.Join(dir, name), ts, nil); err != nil {
				t.Fatal(err)
			}
		}
		if idx != "" {
			writeIndex(t, dir, idx)
		}
		return dir
	}
	cases := []struct {
		name   string
		shards map[string][]Tensor
		index  string
		msg    []string // parts of the message
	}{
		{"missing shard", map[string][]Tensor{"s1.safetensors": {a}}, `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`,
			[]string{`shard "s2.safetensors"`, `"b" first`, "missing"}},
		{"shard lacks tensor", map[string][]Tensor{"s1.safetensors": {a}, "s2.safetensors": {a}}, `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`,
			[]string{IndexFileName, `tensor "b"`, `listed in shard "s2.safetensors", which does not contain it`}},
		{"shard outside dir", map[string][]Tensor{"s1.safetensors": {a}}, `{"weight_map":{"a":"../s1.safetensors"}}`,
			[]string{`tensor "a"`, "not a plain file name"}},
		{"index not JSON", nil, `{"weight_map":`, []string{IndexFileName, "not JSON"}},
		{"index without map", nil, `{"metadata":{}}`, []string{`no "weight_map"`}},
		{"empty map", nil, `{"weight_map":{}}`, []string{"lists no tensors"}},
		{"duplicate in map", map[string][]Tensor{"s1.safetensors": {a}}, `{"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}}`, []string{`lists tensor "a" twice`}},
		{"shard not a string", nil, `{"weight_map":{"a":1}}`, []string{`tensor "a": shard is not a string`}},
		{"bad shard", map[string][]Tensor{"s1.safetensors": {a}, "s2.safetensors": {b}}, `{"weight_map":{"a":"s1.safetensors","b":"bad.safetensors"}}`,
			[]string{"bad.safetensors", "truncated"}},
		{"no files", nil, "", []string{"no " + IndexFileName}},
		{"two files, no index", map[string][]Tensor{"x.safetensors": {a}, "y.safetensors": {b}}, "", []string{"2 .safetensors files"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := mk(t, c.shards, c.index)
			if c.name == "bad shard" {
				os.WriteFile(filepath.Join(dir, "bad.safetensors"), []byte{1, 2}, 0o644)
			}
			ck, err := OpenCheckpoint(dir)
			if err == nil {
				ck.Close()
				t.Fatal("no error")
			}
			t.Log(err)
			for _, m := range c.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not say %q", err, m)
				}
			}
		})
	}
	if _, err := OpenCheckpoint(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent dir: %v", err)
	}
}

func TestCheckpointFallbacks(t *testing.T) {
	a := Tensor{Name: "a", DType: F32, Shape: []int{2}, Data: []byte{1, 2, 3, 4, 5, 6, 7, 8}}
	// The only .safetensors file in a directory.
	dir := t.TempDir()
	path := filepath.Join(dir, "weights.safetensors")
	if err := WriteFile(path, []Tensor{a}, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, path} { // a directory, or the file itself
		c, err := OpenCheckpoint(p)
		if err != nil {
			t.Fatal(err)
		}
		checkSame(t, c.Names(), c.Tensor, []Tensor{a})
		c.Close()
	}
	// model.safetensors wins over other files.
	if err := WriteFile(filepath.Join(dir, SingleFileName), []Tensor{a}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if files := c.Files(); len(files) != 1 || filepath.Base(files[0]) != SingleFileName {
		t.Errorf("files %v", files)
	}
}

// TestRealCheckpoints reads the project's reference checkpoints.
func TestRealCheckpoints(t *testing.T) {
	cases := []struct {
		dir     string
		tensors int
		f32     int
		shapes  map[string][]int
	}{
		{"tiny", 91, 6, map[string][]int{
			"model.language_model.embed_tokens.weight":                     {1024, 64},
			"model.language_model.layers.0.linear_attn.A_log":              {4},
			"model.language_model.layers.0.linear_attn.norm.weight":        {16},
			"model.language_model.layers.0.linear_attn.conv1d.weight":      {128, 1, 4},
			"model.language_model.layers.3.self_attn.q_proj.weight":        {256, 64},
			"model.language_model.layers.3.self_attn.k_proj.weight":        {64, 64},
			"model.language_model.norm.weight":                             {64},
			"model.language_model.layers.0.linear_attn.in_proj_qkv.weight": {128, 64},
		}},
		{"small", 109, 12, map[string][]int{
			"lm_head.weight": {4096, 256},
			"model.language_model.embed_tokens.weight":              {4096, 256},
			"model.language_model.layers.6.linear_attn.A_log":       {8},
			"model.language_model.layers.6.linear_attn.norm.weight": {32},
			"model.language_model.layers.7.self_attn.q_proj.weight": {1024, 256},
			"model.language_model.layers.7.self_attn.k_proj.weight": {128, 256},
			"model.language_model.layers.0.mlp.down_proj.weight":    {256, 704},
		}},
	}
	for _, cs := range cases {
		t.Run(cs.dir, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "models", cs.dir)
			c, err := OpenCheckpoint(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			names := c.Names()
			if len(names) != cs.tensors {
				t.Errorf("%d tensors, want %d", len(names), cs.tensors)
			}
			st, err := os.Stat(filepath.Join(dir, SingleFileName))
			if err != nil {
				t.Fatal(err)
			}
			if c.TotalBytes() <= 0 || c.TotalBytes() >= st.Size() || st.Size()-c.TotalBytes() > MaxHeaderSize {
				t.Errorf("TotalBytes %d for a %d-byte file", c.TotalBytes(), st.Size())
			}
			for name, shape := range cs.shapes {
				tt, err := c.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(tt.Shape, shape) {
					t.Errorf("%s: shape %v, want %v", name, tt.Shape, shape)
				}
			}
			f32 := 0
			for _, name := range names {
				tt, err := c.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				wantF32 := strings.HasSuffix(name, "linear_attn.A_log") || strings.HasSuffix(name, "linear_attn.norm.weight")
				switch {
				case wantF32 && tt.DType != F32:
					t.Errorf("%s is %s, want F32", name, tt.DType)
				case !wantF32 && tt.DType != BF16:
					t.Errorf("%s is %s, want BF16", name, tt.DType)
				}
				vals, err := tt.ToFloat32()
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range vals {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s[%d] = %v", name, i, v)
					}
				}
				if wantF32 {
					f32++
					if strings.HasSuffix(name, "A_log") {
						view, err := tt.Float32s()
						if err != nil {
							t.Fatal(err)
						}
						if &view[0] != (*float32)(unsafe.Pointer(&tt.Data[0])) {
							t.Errorf("%s: Float32s copied instead of viewing the mapping", name)
						}
					}
				}
			}
			if f32 != cs.f32 {
				t.Errorf("%d F32 tensors, want %d", f32, cs.f32)
			}
		})
	}
}

// TestConcurrentReads reads every tensor of a checkpoint from many
// goroutines at once (run with -race) and checks the bytes.
func TestConcurrentReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tensors := randomTensors(rng, 30)
	dir := t.TempDir()
	if err := WriteSharded(dir, tensors, 300); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for k := range 50 {
				w := tensors[(g*7+k)%len(tensors)]
				got, err := c.Tensor(w.Name)
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got.Data, w.Data) || !c.Has(w.Name) || len(c.Names()) != len(tensors) {
					errs <- fmt.Errorf("goroutine %d: tensor %s differs", g, w.Name)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestViewsAndConversions(t *testing.T) {
	vals := []float32{1, -2, 0.1, 3.5e-3, 65504, -0.0}
	for _, dt := range []DType{F32, BF16, F16} {
		tt, err := FromFloat32("x", dt, []int{2, 3}, vals)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tt.ToFloat32()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range vals {
			want := v
			switch dt {
			case BF16:
				want = half.BF16ToF32(half.F32ToBF16(v))
			case F16:
				want = half.F16ToF32(half.F32ToF16(v))
			}
			if got[i] != want {
				t.Errorf("%s[%d] = %v, want %v", dt, i, got[i], want)
			}
		}
		switch dt {
		case F32:
			f, err := tt.Float32s()
			if err != nil || !slices.Equal(f, vals) {
				t.Errorf("Float32s = %v, %v", f, err)
			}
			// An unaligned view is copied, with the same values.
			buf := make([]byte, len(tt.Data)+1)
			copy(buf[1:], tt.Data)
			u := tt
			u.Data = buf[1:]
			f, err = u.Float32s()
			if err != nil || !slices.Equal(f, vals) {
				t.Errorf("unaligned Float32s = %v, %v", f, err)
			}
		default:
			u, err := tt.Uint16s()
			if err != nil {
				t.Fatal(err)
			}
			for i := range u {
				if u[i] != binary.LittleEndian.Uint16(tt.Data[2*i:]) {
					t.Errorf("Uint16s[%d] = %#x", i, u[i])
				}
			}
			if _, err := tt.Float32s(); err == nil {
				t.Errorf("Float32s of %s succeeded", dt)
			}
		}
	}
	if _, err := FromFloat32("x", F32, []int{4}, vals); err == nil {
		t.Error("FromFloat32 with a wrong count succeeded")
	}
	if _, err := FromFloat32("x", I32, []int{6}, vals); err == nil {
		t.Error("FromFloat32 to I32 succeeded")
	}
	bad := Tensor{Name: "bad", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}
	if _, err := bad.Float32s(); err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("Float32s of a mis-sized tensor: %v", err)
	}
	if _, err := bad.ToFloat32(); err == nil {
		t.Error("ToFloat32 of a mis-sized tensor succeeded")
	}
}

// TestStreamingWriterMemory writes a checkpoint much larger than the memory
// it is allowed to allocate, in chunks through ShardedWriter.TensorWriter,
// and checks it back chunk by chunk.
func TestStreamingWriterMemory(t *testing.T) {
	size := 64 << 20
	if testing.Short() {
		size = 8 << 20
	}
	const chunk = 1 << 20
	infos := []TensorInfo{
		{Name: "big.a", DType: BF16, Shape: []int{size / 2 / 1024, 1024}},
		{Name: "big.b", DType: F32, Shape: []int{size / 4 / 1024, 1024}},
		{Name: "small", DType: F32, Shape: []int{3}},
	}
	fill := func(name string, off int, p []byte) { // deterministic content
		for i := range p {
			p[i] = byte(off+i) ^ name[len(name)-1]
		}
	}
	dir := t.TempDir()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w, err := NewShardedWriter(dir, infos, int64(size)+12, nil) // shards: big.a | big.b, small
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	buf := make([]byte, chunk)
	for _, info := range infos {
		n, _ := byteSize(info)
		tw, err := w.TensorWriter(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < int(n); off += chunk {
			p := buf[:min(chunk, int(n)-off)]
			fill(info.Name, off, p)
			if _, err := tw.Write(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(size/4) {
		t.Errorf("writing %d bytes allocated %d", 2*size, grew)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Files()) != 2 || c.TotalBytes() != int64(2*size+12) {
		t.Fatalf("%d files, %d bytes", len(c.Files()), c.TotalBytes())
	}
	for _, info := range infos {
		tt, err := c.Tensor(info.Name)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(tt.Data); off += chunk {
			p := buf[:min(chunk, len(tt.Data)-off)]
			fill(info.Name, off, p)
			if !bytes.Equal(tt.Data[off:off+len(p)], p) {
				t.Fatalf("%s differs at chunk %d", info.Name, off/chunk)
			}
		}
	}
}
