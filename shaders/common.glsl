#extension GL_EXT_control_flow_attributes : require

// Shared definitions for the govinfer compute shaders.
//
// Weights are bound as uint arrays whatever their dtype: F32 words are
// reinterpreted, BF16 and F16 halves are unpacked from the low (even
// element) or high (odd element) half of each word, so no 16-bit storage
// feature is needed. DType codes match compute.DType.
#define DT_F32 1u
#define DT_F16 2u
#define DT_BF16 3u

// HALF16 extracts the 16-bit half holding element e of a packed uint array.
#define HALF16(buf, e) ((buf[(e) >> 1] >> (((e) & 1u) * 16u)) & 0xffffu)

// WLOAD reads element e of a weight of dtype dt stored in buf.
#define WLOAD(buf, dt, e) ((dt) == DT_F32 ? uintBitsToFloat(buf[(e)]) : \
	((dt) == DT_BF16 ? uintBitsToFloat(HALF16(buf, e) << 16) : unpackHalf2x16(HALF16(buf, e)).x))

// flatGroup returns the linear workgroup index of a dispatch that spreads
// more than 65535 groups over x and y.
uint flatGroup() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

float sigmoidf(float x) { return 1.0 / (1.0 + exp(-x)); }
float siluf(float x) { return x / (1.0 + exp(-x)); }
