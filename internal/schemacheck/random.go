package schemacheck

import (
	"fmt"
	"math/rand/v2"
)

// RandomParameters returns a random tool parameters schema (an object
// schema) using every JSON type, nested objects and arrays, enums and the
// string, number and array keywords, with names p0, p1, ... and about
// half of the properties required.
func RandomParameters(rng *rand.Rand) map[string]any {
	return randomObject(rng, 0, 1+rng.IntN(5))
}

func randomObject(rng *rand.Rand, depth, n int) map[string]any {
	props := map[string]any{}
	var required []any
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		if depth > 0 {
			name = fmt.Sprintf("%c%d", 'a'+rune(depth), i)
		}
		props[name] = randomSchema(rng, depth+1)
		if rng.IntN(2) == 0 {
			required = append(required, name)
		}
	}
	o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func randomSchema(rng *rand.Rand, depth int) map[string]any {
	k := rng.IntN(11)
	if depth >= 3 {
		k = rng.IntN(7)
	}
	switch k {
	case 0:
		s := map[string]any{"type": "string", "description": "free text"}
		if rng.IntN(2) == 0 {
			s["maxLength"] = 1 + rng.IntN(20)
		}
		if rng.IntN(3) == 0 {
			s["minLength"] = rng.IntN(3)
		}
		return s
	case 1:
		return map[string]any{"type": "string", "enum": []any{"red", "green", "blue"}}
	case 2:
		s := map[string]any{"type": "integer"}
		if rng.IntN(2) == 0 {
			s["minimum"] = rng.IntN(10) - 5
			s["maximum"] = 10 + rng.IntN(100)
		}
		return s
	case 3:
		s := map[string]any{"type": "number"}
		if rng.IntN(2) == 0 {
			s["exclusiveMinimum"] = 0
			s["maximum"] = 2.5
		}
		return s
	case 4:
		return map[string]any{"type": "boolean"}
	case 5:
		return map[string]any{"type": []any{"integer", "null"}}
	case 6:
		return map[string]any{"enum": []any{1, 2.5, true, nil}}
	case 7, 8:
		a := map[string]any{"type": "array", "items": randomSchema(rng, depth+1)}
		if rng.IntN(2) == 0 {
			a["minItems"] = 1
			a["maxItems"] = 1 + rng.IntN(3)
		}
		return a
	default:
		return randomObject(rng, depth, 1+rng.IntN(3))
	}
}
