package shaders

import (
	"fmt"
	"sort"
)

// Member is one member of a shader's push-constant block: its byte offset,
// size and scalar kind ('u' 32-bit unsigned, 'i' 32-bit signed, 'f' 32-bit
// float).
type Member struct {
	Offset, Size int
	Kind         byte
}

// More SPIR-V that PushConstants reads.
const (
	opTypeInt   = 21
	opTypeFloat = 22

	decorOffset = 35

	storagePushConstant = 9
)

// PushConstants returns the members of a SPIR-V module's push-constant
// block in offset order, or none when it declares no block. Members must
// be 32-bit scalars (what the Vulkan backend's push structs hold).
func PushConstants(words []uint32) ([]Member, error) {
	if len(words) < 5 || words[0] != spirvMagic {
		return nil, fmt.Errorf("shaders: not a SPIR-V module")
	}
	scalars := map[uint32]Member{}      // type -> size and kind
	structs := map[uint32][]uint32{}    // struct -> member types
	offsets := map[uint32]map[int]int{} // struct -> member -> offset
	pointee := map[uint32][2]uint32{}   // pointer type -> storage class, pointee
	var block uint32
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("shaders: truncated SPIR-V instruction at word %d", i)
		}
		args := words[i+1 : i+n]
		switch {
		case op == opTypeInt && len(args) >= 3:
			kind := byte('u')
			if args[2] != 0 {
				kind = 'i'
			}
			scalars[args[0]] = Member{Size: int(args[1]) / 8, Kind: kind}
		case op == opTypeFloat && len(args) >= 2:
			scalars[args[0]] = Member{Size: int(args[1]) / 8, Kind: 'f'}
		case op == opTypeStruct && len(args) >= 1:
			structs[args[0]] = args[1:]
		case op == opMemberDecorate && len(args) >= 4 && args[2] == decorOffset:
			if offsets[args[0]] == nil {
				offsets[args[0]] = map[int]int{}
			}
			offsets[args[0]][int(args[1])] = int(args[3])
		case op == opTypePointer && len(args) >= 3:
			pointee[args[0]] = [2]uint32{args[1], args[2]}
		case op == opVariable && len(args) >= 3 && args[2] == storagePushConstant:
			pt := pointee[args[0]]
			if block != 0 && block != pt[1] {
				return nil, fmt.Errorf("shaders: more than one push-constant block")
			}
			block = pt[1]
		}
		i += n
	}
	if block == 0 {
		return nil, nil
	}
	types, ok := structs[block]
	if !ok {
		return nil, fmt.Errorf("shaders: the push-constant block is not a struct")
	}
	ms := make([]Member, len(types))
	for k, t := range types {
		s, ok := scalars[t]
		if !ok || s.Size != 4 {
			return nil, fmt.Errorf("shaders: push-constant member %d is not a 32-bit scalar", k)
		}
		off, ok := offsets[block][k]
		if !ok {
			return nil, fmt.Errorf("shaders: push-constant member %d has no offset", k)
		}
		s.Offset = off
		ms[k] = s
	}
	sort.Slice(ms, func(a, b int) bool { return ms[a].Offset < ms[b].Offset })
	return ms, nil
}
