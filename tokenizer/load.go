package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/govinfer/govinfer/gguf"
	"golang.org/x/text/unicode/norm"
)

// gpt2Pattern is the split pattern a ByteLevel pre-tokenizer applies when
// its use_regex option is on.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens  []addedTokenJSON `json:"added_tokens"`
	Normalizer   json.RawMessage  `json:"normalizer"`
	PreTokenizer json.RawMessage  `json:"pre_tokenizer"`
	Decoder      json.RawMessage  `json:"decoder"`
	Model        struct {
		Type                    string    `json:"type"`
		Vocab                   vocabMap  `json:"vocab"`
		Merges                  mergeList `json:"merges"`
		Dropout                 *float64  `json:"dropout"`
		UnkToken                *string   `json:"unk_token"`
		ContinuingSubwordPrefix *string   `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string   `json:"end_of_word_suffix"`
		ByteFallback            bool      `json:"byte_fallback"`
		IgnoreMerges            bool      `json:"ignore_merges"`
	} `json:"model"`
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	Special    bool   `json:"special"`
	Normalized *bool  `json:"normalized"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	SingleWord bool   `json:"single_word"`
}

// configJSON is the part of tokenizer_config.json this package reads.
type configJSON struct {
	AddedTokensDecoder map[string]addedTokenJSON `json:"added_tokens_decoder"`
	EOSToken           tokenRef                  `json:"eos_token"`
	PadToken           tokenRef                  `json:"pad_token"`
	BOSToken           tokenRef                  `json:"bos_token"`
	ChatTemplate       json.RawMessage           `json:"chat_template"`
}

// tokenRef is a token named in tokenizer_config.json: a string, an object
// with "content", or null.
type tokenRef string

// UnmarshalJSON accepts a string, {"content": ...} or null.
func (r *tokenRef) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*r = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*r = tokenRef(s)
		return nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return fmt.Errorf("token must be a string or an object with content: %w", err)
	}
	*r = tokenRef(obj.Content)
	return nil
}

// vocabMap is the model's vocabulary, token string -> id.
type vocabMap map[string]int

// UnmarshalJSON parses the vocabulary object by hand, for load speed (see
// mergeList).
func (vm *vocabMap) UnmarshalJSON(b []byte) error {
	sc := jsonScanner{b: b}
	if !sc.consume('{') {
		return sc.fail("vocab: expected '{'")
	}
	out := make(map[string]int, bytes.Count(b, []byte{','})+1)
	if sc.consume('}') {
		*vm = out
		return nil
	}
	for {
		k, err := sc.str()
		if err != nil {
			return err
		}
		if !sc.consume(':') {
			return sc.fail("vocab: expected ':'")
		}
		id, err := sc.int()
		if err != nil {
			return err
		}
		out[k] = id // a repeated key keeps its last id, as serde's map does
		if sc.consume(',') {
			continue
		}
		if sc.consume('}') {
			break
		}
		return sc.fail("vocab: expected ',' or '}'")
	}
	*vm = out
	return nil
}

// mergeList is the model's merges, stored either as ["a", "b"] pairs
// (Qwen3) or as "a b" strings (Qwen3.5).
type mergeList [][2]string

// UnmarshalJSON parses the merges array. It is hand-written because the
// generic decoder is slow on arrays of 150k-250k small items; strings with
// escapes are handed to encoding/json.
func (ml *mergeList) UnmarshalJSON(b []byte) error {
	sc := jsonScanner{b: b}
	if !sc.consume('[') {
		return sc.fail("merges: expected '['")
	}
	out := make([][2]string, 0, bytes.Count(b, []byte{','})+1)
	if sc.consume(']') {
		*ml = out
		return nil
	}
	for {
		var pair [2]string
		if sc.consume('[') {
			for k := range 2 {
				if k == 1 && !sc.consume(',') {
					return sc.fail("merges: expected ','")
				}
				s, err := sc.str()
				if err != nil {
					return err
				}
				pair[k] = s
			}
			if !sc.consume(']') {
				return sc.fail("merges: expected ']' after a merge pair")
			}
		} else {
			s, err := sc.str()
			if err != nil {
				return err
			}
			a, c, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(c, " ") {
				return fmt.Errorf("merge %q is not two symbols separated by a space", s)
			}
			pair = [2]string{a, c}
		}
		out = append(out, pair)
		if sc.consume(',') {
			continue
		}
		if sc.consume(']') {
			break
		}
		return sc.fail("merges: expected ',' or ']'")
	}
	*ml = out
	return nil
}

// jsonScanner reads the few JSON shapes mergeList needs.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) skipSpace() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\n' || s.b[s.i] == '\r' || s.b[s.i] == '\t') {
		s.i++
	}
}

func (s *jsonScanner) consume(c byte) bool {
	s.skipSpace()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *jsonScanner) fail(msg string) error {
	return fmt.Errorf("%s at byte %d", msg, s.i)
}

// int reads a non-negative integer below 2^31.
func (s *jsonScanner) int() (int, error) {
	s.skipSpace()
	start, v := s.i, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + int(s.b[s.i]-'0')
		s.i++
		if v >= 1<<31 {
			return 0, s.fail("id too large")
		}
	}
	if s.i == start {
		return 0, s.fail("expected a non-negative integer id")
	}
	return v, nil
}

func (s *jsonScanner) str() (string, error) {
	s.skipSpace()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", s.fail("expected a string")
	}
	start := s.i
	escaped := false
	for j := s.i + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.i = j + 1
			if !escaped {
				return string(s.b[start+1 : j]), nil
			}
			var out string
			if err := json.Unmarshal(s.b[start:j+1], &out); err != nil {
				return "", fmt.Errorf("bad string at byte %d: %w", start, err)
			}
			return out, nil
		}
	}
	return "", s.fail("unterminated string")
}

// Load reads a checkpoint directory's tokenizer: tokenizer.json, plus
// tokenizer_config.json (added tokens registered only there, eos/pad/bos,
// chat template), chat_template.jinja and generation_config.json (eos ids)
// when present. For a GGUF file (dir a .gguf file or a directory holding
// one, as gguf.Locate finds it) it reads the file's metadata (LoadGGUF).
func Load(dir string) (*Tokenizer, error) {
	if file, ok, err := gguf.Locate(dir); ok {
		return LoadGGUF(file)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := loadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if b, err := os.ReadFile(cfgPath); err == nil {
		if err := t.applyConfig(b); err != nil {
			return nil, fmt.Errorf("tokenizer config %s: %w", cfgPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer config: %w", err)
	}
	tplPath := filepath.Join(dir, "chat_template.jinja")
	if b, err := os.ReadFile(tplPath); err == nil {
		t.chatTemplate = string(b)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	genPath := filepath.Join(dir, "generation_config.json")
	if b, err := os.ReadFile(genPath); err == nil {
		if err := t.applyGenerationConfig(b); err != nil {
			return nil, fmt.Errorf("generation config %s: %w", genPath, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("generation config: %w", err)
	}
	t.rebuild()
	return t, nil
}

// LoadFile reads a tokenizer.json file.
func LoadFile(path string) (*Tokenizer, error) {
	t, err := loadFile(path)
	if err != nil {
		return nil, err
	}
	t.rebuild()
	return t, nil
}

// loadFile reads a tokenizer.json; the caller must call rebuild.
func loadFile(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// parse builds a Tokenizer from the bytes of a tokenizer.json.
func parse(b []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	return fromFile(&f)
}

// fromFile builds a Tokenizer from a decoded tokenizer.json.
func fromFile(f *fileJSON) (*Tokenizer, error) {
	t := &Tokenizer{
		bl:             newByteLevel(),
		vocab:          f.Model.Vocab,
		addedByID:      map[int]int{},
		addedByContent: map[string]int{},
		eos:            -1,
		pad:            -1,
		bos:            -1,
	}
	t.scratch = sync.Pool{New: func() any { return &scratch{} }}
	if err := t.setModel(f); err != nil {
		return nil, err
	}
	var err error
	if t.normalize, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if !t.hasByteLevel() {
		return nil, errors.New("pre_tokenizer: no ByteLevel step; only byte-level BPE is supported")
	}
	if err := checkDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	for _, at := range f.AddedTokens {
		if err := t.addToken(at); err != nil {
			return nil, fmt.Errorf("added token %q: %w", at.Content, err)
		}
	}
	return t, nil
}

// setModel checks the BPE options and builds the merge table.
func (t *Tokenizer) setModel(f *fileJSON) error {
	m := f.Model
	switch {
	case m.Type != "" && m.Type != "BPE":
		return fmt.Errorf("model type %q: only BPE is supported", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return errors.New("model: BPE dropout is not supported")
	case m.ByteFallback:
		return errors.New("model: byte_fallback is not supported")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return errors.New("model: continuing_subword_prefix is not supported")
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return errors.New("model: end_of_word_suffix is not supported")
	case len(m.Vocab) == 0:
		return errors.New("model: empty vocab")
	}
	model := &bpe{
		merges:       make(map[uint64]uint64, len(m.Merges)),
		ignoreMerges: m.IgnoreMerges,
		unk:          -1,
		cache:        map[string][]int32{},
	}
	maxID := -1
	for tok, id := range m.Vocab {
		if id < 0 || id > 1<<30 {
			return fmt.Errorf("model: token %q has bad id %d", tok, id)
		}
		maxID = max(maxID, id)
	}
	t.tokens = make([]string, maxID+1)
	t.present = make([]bool, maxID+1)
	for tok, id := range m.Vocab {
		if t.present[id] {
			return fmt.Errorf("model: id %d is used by %q and %q", id, t.tokens[id], tok)
		}
		t.tokens[id], t.present[id] = tok, true
	}
	for b := range 256 {
		model.byteID[b] = -1
		if id, ok := m.Vocab[t.bl.symbol[b]]; ok {
			model.byteID[b] = int32(id)
		}
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return fmt.Errorf("model: unk_token %q is not in the vocab", *m.UnkToken)
		}
		model.unk = int32(id)
	}
	var joined []byte
	for rank, pair := range m.Merges {
		a, okA := m.Vocab[pair[0]]
		b, okB := m.Vocab[pair[1]]
		joined = append(append(joined[:0], pair[0]...), pair[1]...)
		c, okC := m.Vocab[string(joined)]
		if !okA || !okB || !okC {
			return fmt.Errorf("model: merge %d (%q %q) uses a token missing from the vocab", rank, pair[0], pair[1])
		}
		// A repeated pair keeps its last rank, as in the Rust map.
		model.merges[pairKey(int32(a), int32(b))] = uint64(rank)<<32 | uint64(uint32(c))
	}
	if m.IgnoreMerges {
		model.vocab = make(map[string]int, len(m.Vocab))
		for tok, id := range m.Vocab {
			model.vocab[string(t.bl.decodeToken(tok))] = id
		}
	}
	t.model = model
	return nil
}

type typed struct {
	Type string `json:"type"`
}

// parseNormalizer supports the Unicode normalization forms, alone or in a
// Sequence; nil means no normalization.
func parseNormalizer(raw json.RawMessage) ([]norm.Form, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var n struct {
		typed
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	switch n.Type {
	case "NFC":
		return []norm.Form{norm.NFC}, nil
	case "NFD":
		return []norm.Form{norm.NFD}, nil
	case "NFKC":
		return []norm.Form{norm.NFKC}, nil
	case "NFKD":
		return []norm.Form{norm.NFKD}, nil
	case "Sequence":
		var out []norm.Form
		for _, sub := range n.Normalizers {
			f, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, f...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported", n.Type)
}

// preStep is one pre-tokenizer step.
type preStep struct {
	prog           *program // split pattern; nil for a ByteLevel step without regex
	pattern        string   // prog's source
	literal        string   // split on this string instead, when prog is nil and byteLevel is false
	remove         bool     // Removed behaviour: drop the matches
	byteLevel      bool
	addPrefixSpace bool
}

func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var p struct {
		typed
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		Pattern        map[string]string `json:"pattern"`
		Behavior       string            `json:"behavior"`
		Invert         bool              `json:"invert"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "Sequence":
		var out []preStep
		for _, sub := range p.Pretokenizers {
			s, err := parsePreTokenizer(sub)
			if err != nil {
				return nil, err
			}
			out = append(out, s...)
		}
		return out, nil
	case "Split":
		if p.Invert {
			return nil, errors.New("Split with invert=true is not supported")
		}
		var step preStep
		switch p.Behavior {
		case "Isolated":
		case "Removed":
			step.remove = true
		default:
			return nil, fmt.Errorf("Split behavior %q is not supported", p.Behavior)
		}
		if re, ok := p.Pattern["Regex"]; ok {
			prog, err := compilePattern(re)
			if err != nil {
				return nil, err
			}
			step.prog, step.pattern = prog, re
		} else if s, ok := p.Pattern["String"]; ok && s != "" {
			step.literal = s
		} else {
			return nil, errors.New("Split needs a Regex or a non-empty String pattern")
		}
		return []preStep{step}, nil
	case "ByteLevel":
		step := preStep{byteLevel: true, addPrefixSpace: p.AddPrefixSpace}
		if p.UseRegex == nil || *p.UseRegex {
			prog, err := compilePattern(gpt2Pattern)
			if err != nil {
				return nil, err
			}
			step.prog, step.pattern = prog, gpt2Pattern
		}
		return []preStep{step}, nil
	}
	return nil, fmt.Errorf("pre-tokenizer type %q is not supported", p.Type)
}

// checkDecoder accepts a ByteLevel decoder, alone or in a Sequence.
func checkDecoder(raw json.RawMessage) error {
	if len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return errors.New("missing; a ByteLevel decoder is required")
	}
	var d struct {
		typed
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return err
	}
	switch d.Type {
	case "ByteLevel":
		return nil
	case "Sequence":
		if len(d.Decoders) != 1 {
			return errors.New("only a Sequence holding one ByteLevel decoder is supported")
		}
		return checkDecoder(d.Decoders[0])
	}
	return fmt.Errorf("decoder type %q is not supported", d.Type)
}

// applyConfig reads tokenizer_config.json: added tokens listed only there
// (transformers registers them on load), eos/pad/bos and the chat template.
func (t *Tokenizer) applyConfig(b []byte) error {
	var c configJSON
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	for key, at := range c.AddedTokensDecoder {
		id, err := strconv.Atoi(key)
		if err != nil {
			return fmt.Errorf("added_tokens_decoder key %q is not an id", key)
		}
		at.ID = id
		if _, ok := t.addedByID[id]; ok {
			continue
		}
		if _, ok := t.addedByContent[at.Content]; ok {
			continue
		}
		if err := t.addToken(at); err != nil {
			return fmt.Errorf("added token %q: %w", at.Content, err)
		}
	}
	for _, ref := range []struct {
		name string
		tok  tokenRef
		dst  *int
	}{{"eos_token", c.EOSToken, &t.eos}, {"pad_token", c.PadToken, &t.pad}, {"bos_token", c.BOSToken, &t.bos}} {
		if ref.tok == "" {
			continue
		}
		id, ok := t.TokenID(string(ref.tok))
		if !ok {
			return fmt.Errorf("%s %q is not a token", ref.name, ref.tok)
		}
		*ref.dst = id
	}
	if len(c.ChatTemplate) > 0 && !bytes.Equal(c.ChatTemplate, []byte("null")) {
		tpl, err := parseChatTemplate(c.ChatTemplate)
		if err != nil {
			return fmt.Errorf("chat_template: %w", err)
		}
		t.chatTemplate = tpl
	}
	return nil
}

// parseChatTemplate takes a template string, or the "default" entry of a
// list of named templates.
func parseChatTemplate(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New("no template named \"default\"")
}

// applyGenerationConfig reads eos_token_id (a number or a list) from
// generation_config.json.
func (t *Tokenizer) applyGenerationConfig(b []byte) error {
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		return err
	}
	if len(g.EOS) == 0 || bytes.Equal(g.EOS, []byte("null")) {
		return nil
	}
	var one int
	if err := json.Unmarshal(g.EOS, &one); err == nil {
		t.genEOS = []int{one}
		return nil
	}
	var list []int
	if err := json.Unmarshal(g.EOS, &list); err != nil {
		return fmt.Errorf("eos_token_id: %w", err)
	}
	t.genEOS = list
	return nil
}
