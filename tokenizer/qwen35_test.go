package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// The exact Qwen3.5 tokenizer.json is not in the repository (see
// testdata/tokenizer/README.md). These tests check what can be checked
// without it, by loading a Qwen3.5-shaped checkpoint built from the Qwen3
// vocabulary: Qwen3.5's added tokens and ids, 26 in tokenizer.json and 7
// more only in tokenizer_config.json, merges stored as "a b" strings, and
// Qwen3.5's split pattern. TestQwen35Official runs the full id goldens when
// GOVINFER_QWEN35_DIR names a real Qwen3.5 checkpoint directory.

type officialJSON struct {
	SpecialTokenIDs map[string]int `json:"special_token_ids"`
	TextVectors     []struct {
		Name string `json:"name"`
		Text string `json:"text"`
		IDs  []int  `json:"ids"`
	} `json:"text_vectors"`
	ChatVectors []struct {
		Name     string `json:"name"`
		Rendered string `json:"rendered"`
		IDs      []int  `json:"ids"`
	} `json:"chat_vectors"`
}

func readOfficial(t testing.TB) *officialJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(qwen35Dir, "qwen35_official_vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var o officialJSON
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	return &o
}

// firstAddedID is Qwen3.5's first added-token id (<|endoftext|>).
const firstAddedID = 248044

// buildQwen35Shaped writes a checkpoint directory whose tokenizer files
// have Qwen3.5's layout (see the comment above) and returns its path.
func buildQwen35Shaped(t testing.TB) string {
	t.Helper()
	facts, err := loadFacts()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(qwen3Dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	var model map[string]json.RawMessage
	if err := json.Unmarshal(top["model"], &model); err != nil {
		t.Fatal(err)
	}
	var pairs [][2]string
	if err := json.Unmarshal(model["merges"], &pairs); err != nil {
		t.Fatal(err)
	}
	merges := make([]string, len(pairs))
	for i, p := range pairs {
		merges[i] = p[0] + " " + p[1]
	}
	model["merges"] = mustJSON(t, merges)
	top["model"] = mustJSON(t, model)

	type added struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
		Special    bool   `json:"special"`
	}
	var inFile []added
	decoder := map[string]added{}
	for _, s := range facts.SpecialTokens {
		a := added{ID: s.ID, Content: s.Content, Special: s.Special == true}
		decoder[strconv.Itoa(s.ID)] = a
		if s.OnlyIn == "" {
			inFile = append(inFile, a)
		}
	}
	top["added_tokens"] = mustJSON(t, inFile)
	top["pre_tokenizer"] = mustJSON(t, map[string]any{
		"type": "Sequence",
		"pretokenizers": []any{
			map[string]any{
				"type":     "Split",
				"pattern":  map[string]string{"Regex": facts.PreTokenizer.Pretokenizers[0].Pattern.Regex},
				"behavior": "Isolated", "invert": false,
			},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		},
	})
	dir := t.TempDir()
	write := func(name string, v any) {
		if err := os.WriteFile(filepath.Join(dir, name), mustJSON(t, v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", top)
	write("tokenizer_config.json", map[string]any{
		"added_tokens_decoder": decoder,
		"eos_token":            "<|im_end|>",
		"pad_token":            "<|endoftext|>",
		"bos_token":            nil,
		"chat_template":        "{{ messages }}",
	})
	write("generation_config.json", map[string]any{"eos_token_id": []int{248046, 248044}, "pad_token_id": 248044})
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("from the jinja file"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// specialShape reduces ids to the added-token ids in order, with -1 for
// each maximal run of ordinary tokens between them; it is what a
// Qwen3-vocabulary stand-in and the real Qwen3.5 tokenizer must agree on.
func specialShape(ids []int) []int {
	var out []int
	for _, id := range ids {
		if id >= firstAddedID {
			out = append(out, id)
		} else if len(out) == 0 || out[len(out)-1] != -1 {
			out = append(out, -1)
		}
	}
	return out
}

func TestQwen35Shaped(t *testing.T) {
	tok, err := Load(buildQwen35Shaped(t))
	if err != nil {
		t.Fatal(err)
	}
	off := readOfficial(t)
	if len(off.SpecialTokenIDs) != 33 {
		t.Fatalf("official vectors list %d special tokens, want 33", len(off.SpecialTokenIDs))
	}
	for s, want := range off.SpecialTokenIDs {
		if got, ok := tok.TokenID(s); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", s, got, ok, want)
		}
		if !tok.IsAdded(want) || string(tok.TokenBytes(want)) != s {
			t.Errorf("id %d: IsAdded %v, TokenBytes %q; want an added token %q", want, tok.IsAdded(want), tok.TokenBytes(want), s)
		}
	}
	if got := tok.VocabSize(); got != 248077 {
		t.Errorf("VocabSize = %d, want 248077 (ids up to <|audio_pad|> 248076)", got)
	}
	for id, want := range map[int]bool{248044: true, 248045: true, 248046: true, 248058: false, 248066: false, 248068: false, 248069: false, 248070: true, 248076: true} {
		if got := tok.IsSpecial(id); got != want {
			t.Errorf("IsSpecial(%d) = %v, want %v", id, got, want)
		}
	}
	if got := tok.EOSTokens(); !slices.Equal(got, []int{248046, 248044}) {
		t.Errorf("EOSTokens = %v, want [248046 248044]", got)
	}
	if id, ok := tok.PadToken(); !ok || id != 248044 {
		t.Errorf("PadToken = %d, %v; want 248044", id, ok)
	}
	if _, ok := tok.BOSToken(); ok {
		t.Error("BOSToken set, want none (bos_token is null)")
	}
	if got := tok.ChatTemplate(); got != "from the jinja file" {
		t.Errorf("ChatTemplate = %q, want chat_template.jinja's text", got)
	}

	// Added tokens sit exactly where the official ids have them.
	check := func(name, text string, want []int) {
		got := tok.Encode(text)
		if gs, ws := specialShape(got), specialShape(want); !slices.Equal(gs, ws) {
			t.Errorf("%s: added-token layout %v, want %v", name, gs, ws)
		}
		if d := tok.Decode(got, false); d != text {
			t.Errorf("%s: Decode(Encode) = %q, want %q", name, trim(d), trim(text))
		}
	}
	for _, v := range off.TextVectors {
		check(v.Name, v.Text, v.IDs)
	}
	for _, v := range off.ChatVectors {
		check(v.Name, v.Rendered, v.IDs)
	}
	// A text made only of added tokens gives exactly the official ids.
	for _, v := range off.TextVectors {
		if v.Name == "all_control_tokens" {
			if got := tok.Encode(v.Text); !slices.Equal(got, v.IDs) {
				t.Errorf("all_control_tokens: got %v, want %v", got, v.IDs)
			}
		}
	}
	// The "a b" merges and the Qwen3.5 pattern give Qwen3's ids wherever the
	// two patterns cut the text the same way.
	qwen3 := mustQwen3(t)
	n := 0
	for _, c := range mustCases(t) {
		if c.Kind != "encode" || !slices.Equal(c.PretokensQwen3, c.PretokensQwen5) || len(c.Text) > 4096 {
			continue
		}
		n++
		want := qwen3.Encode(c.Text)
		for i, id := range want { // Qwen3 added ids -> Qwen3.5 ones
			if id >= 151643 {
				id2, _ := tok.TokenID(string(qwen3.TokenBytes(id)))
				want[i] = id2
			}
		}
		if got := tok.Encode(c.Text); !slices.Equal(got, want) {
			t.Errorf("%s: Qwen3.5-shaped ids %v, want %v", c.Name, trimIDs(got), trimIDs(want))
		}
	}
	if n < 250 {
		t.Errorf("only %d cases compared", n)
	}
	// <|audio_start|> is one token only because tokenizer_config.json is read.
	if got := tok.Encode("<|audio_start|>"); !slices.Equal(got, []int{248070}) {
		t.Errorf("Encode(<|audio_start|>) = %v, want [248070]", got)
	}
}

// TestQwen35Official checks every official Qwen3.5 id vector against a real
// checkpoint's tokenizer, when GOVINFER_QWEN35_DIR names one.
func TestQwen35Official(t *testing.T) {
	dir := os.Getenv("GOVINFER_QWEN35_DIR")
	if dir == "" {
		t.Skip("GOVINFER_QWEN35_DIR not set; the Qwen3.5 tokenizer.json is not in the repository")
	}
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != "5f9e4d4901a92b997e463c1f46055088b6cca5ca61a6522d1b9f64c4bb81cb42" {
		t.Fatalf("tokenizer.json SHA-256 %s is not Qwen3.5's", got)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	off := readOfficial(t)
	for s, want := range off.SpecialTokenIDs {
		if got, ok := tok.TokenID(s); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v; want %d", s, got, ok, want)
		}
	}
	vectors := map[string][2]any{}
	for _, v := range off.TextVectors {
		vectors["text/"+v.Name] = [2]any{v.Text, v.IDs}
	}
	for _, v := range off.ChatVectors {
		vectors["chat/"+v.Name] = [2]any{v.Rendered, v.IDs}
	}
	for name, v := range vectors {
		text, want := v[0].(string), v[1].([]int)
		if got := tok.Encode(text); !slices.Equal(got, want) {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
		if got := tok.Decode(want, false); got != text {
			t.Errorf("%s: Decode = %q, want %q", name, got, text)
		}
	}
	t.Logf("checked %d official Qwen3.5 vectors", len(vectors))
}
