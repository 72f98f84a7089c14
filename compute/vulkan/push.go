package vulkan

import (
	"unsafe"

	"github.com/govinfer/govinfer/compute"
)

// The push constants of each shader, one struct per `layout(push_constant)`
// block, field for field: every field is a 32-bit scalar (uint32 for
// uint, float32 for float), so a struct's memory is the block's bytes, which
// pushWords hands to the dispatch. TestPushStructsMatchSPIRV checks each
// struct's size and field offsets and types against the block in the
// shader's SPIR-V (pushStructs lists them).

// headsPush is a compute.Heads view as the shaders take it: offset, row
// stride, head stride.
type headsPush struct{ Off, Row, Head uint32 }

func headsOf(h compute.Heads) headsPush {
	return headsPush{uint32(h.Off), uint32(h.RowStride), uint32(h.HeadStride)}
}

type (
	embedPush  struct{ N, Cols, RowBase, Rows, IDsOff uint32 }
	matvecPush struct{ Rows, Cols, N, RowBase, DstRows, Vec, I0 uint32 }
	// matmulPush is the block of matmul.
	matmulPush struct{ Rows, Cols, N, RowBase, DstRows uint32 }
	// matmulQPush is the block of matmulq and of the cooperative-matrix
	// shaders (matmulcm8/16 and their quantized matmulcmq8/16, which read
	// RowBytes: the bytes of a weight row in its block format).
	matmulQPush struct{ Rows, Cols, N, RowBase, DstRows, RowBytes uint32 }
	matvecQPush struct{ Rows, Cols, N, RowBase, DstRows, RowBytes, I0 uint32 }
	embedQPush  struct{ N, Cols, RowBase, Rows, IDsOff, RowBytes uint32 }
	normPush    struct {
		N, Count, Dim uint32
		X, D, Z       headsPush
		Eps           float32
	}
	addnormPush struct {
		N, Dim uint32
		Eps    float32
	}
	ropePush      struct{ N, Count, Off, RowStride, HeadStride, Rotary, TableOff uint32 }
	convPush      struct{ Row, RowStride, N, Channels, Kernel, ChBase, ChCount uint32 }
	gatesPush     struct{ N, Heads uint32 }
	deltarulePush struct {
		Q, K, V            headsPush
		GateRow, OutRow, N uint32
		QScale             float32
		Nk, Nv, Dv         uint32
	}
	deltachunkPush struct {
		Q, K, V                      headsPush
		GateRow, OutRow, N           uint32 // N: tokens of the whole sequence
		QScale                       float32
		Nk, Nv, Dk, Dv               uint32
		T0, Nc                       uint32 // the window: first token, number of chunks
		UOff, WOff, MOff, GOff, HOff uint32
	}
	kvstorePush struct {
		K, V                 headsPush
		N, KVHeads, Dim, Pos uint32
	}
	attentionPush struct {
		Q                                      headsPush
		Heads, KVHeads, Dim, Pos, OutRow       uint32
		Scale                                  float32
		N, SplitLen, NSplit, RowBlocks, PartML uint32
	}
	attnmergePush struct{ Heads, Dim, N, Pos, OutRow, SplitLen, NSplit, PartML uint32 }
	eltwisePush   struct {
		Rows, Count, Dim uint32
		D, A, B          headsPush
	}
	argmaxPush    struct{ Rows, Dim, DOff uint32 }
	sumrowsPush   struct{ Rows, Dim, StartOff, SrcOff, WOff uint32 }
	layernormPush struct {
		N, Dim uint32
		Eps    float32
	}
	biasPush     struct{ N, Dim uint32 }
	moetopkPush  struct{ Rows, NE, K, WOff uint32 }
	moeplanPush  struct{ Pairs, NE, PlanOff, MaxTasks uint32 }
	matvecidPush struct {
		Rows, Cols, E0, NE, Stride, RowBytes, K, PerPair, PlanOff, MaxTasks uint32
	}
	moecombinePush struct{ Rows, Dim, K, WOff uint32 }
	geluPush       struct{ N uint32 }
	segattnPush    struct {
		Q, K, V                             headsPush
		Heads, Dim, SegLen, Segs, RowBlocks uint32
		Scale                               float32
	}
)

// pushStructs maps each shader to its push-constant struct.
var pushStructs = map[string]any{
	"embed": embedPush{}, "matvec": matvecPush{}, "matmul": matmulPush{},
	"matmulcm8": matmulQPush{}, "matmulcm16": matmulQPush{}, "matmulcmq8": matmulQPush{}, "matmulcmq16": matmulQPush{},
	"matmulq": matmulQPush{}, "matvecq": matvecQPush{}, "embedq": embedQPush{},
	"norm": normPush{}, "addnorm": addnormPush{}, "rope": ropePush{}, "conv": convPush{},
	"gates": gatesPush{}, "deltarule": deltarulePush{}, "deltachunk": deltachunkPush{},
	"kvstore": kvstorePush{}, "attention": attentionPush{}, "attnmerge": attnmergePush{},
	"eltwise": eltwisePush{}, "argmax": argmaxPush{}, "sumrows": sumrowsPush{},
	"layernorm": layernormPush{}, "bias": biasPush{}, "gelu": geluPush{}, "segattn": segattnPush{},
	"moetopk": moetopkPush{}, "moeplan": moeplanPush{}, "matvecid": matvecidPush{}, "moecombine": moecombinePush{},
}

// pushStruct is the set of push-constant structs.
type pushStruct interface {
	embedPush | matvecPush | matmulPush | matmulQPush | matvecQPush | embedQPush | normPush | addnormPush | ropePush | convPush | gatesPush |
		deltarulePush | deltachunkPush | kvstorePush | attentionPush | attnmergePush | eltwisePush | argmaxPush | sumrowsPush |
		layernormPush | biasPush | geluPush | segattnPush | moetopkPush | moeplanPush | matvecidPush | moecombinePush
}

// pushWords returns the push constants of p as the 32-bit words the
// dispatch copies: p's own memory, so nothing is allocated.
func pushWords[T pushStruct](p *T) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(p)), unsafe.Sizeof(*p)/4)
}
