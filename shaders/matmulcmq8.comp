#version 450
// The prefill product of quantized weights on 8x8x8 cooperative matrices:
// see matmulcm.glsl (QUANT).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#define T 8u
#define QUANT
#include "matmulcm.glsl"
