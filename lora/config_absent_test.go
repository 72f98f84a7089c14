package lora

import "testing"

// TestParseConfigWithoutPatterns reads a config without rank_pattern and
// alpha_pattern (hand-written and older configs leave them out): an absent
// optional object is not an error.
func TestParseConfigWithoutPatterns(t *testing.T) {
	c, err := ParseConfig([]byte(`{"peft_type": "LORA", "r": 16, "lora_alpha": 16, "target_modules": ["q_proj"]}`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if c.R != 16 || c.Alpha != 16 || len(c.RankPattern) != 0 || len(c.AlphaPattern) != 0 {
		t.Fatalf("config %+v", c)
	}
}
