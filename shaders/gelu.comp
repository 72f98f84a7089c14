#version 450
// GELU in place over n elements, one thread per element:
//   FORM 0: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))             (exact)
//   FORM 1: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))      (tanh form)
// The tanh form is computed as x * sigmoid(2u), the same function, which
// neither overflows nor loses 1 + tanh(u) for large negative u. GLSL has
// no erf: erfc(z) for z >= 0 is Numerical Recipes' Chebyshev fit
// (fractional error below 1.2e-7 everywhere), and erf(-z) = -erf(z).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint FORM = 0;

layout(binding = 0) buffer XS { float x[]; };

layout(push_constant) uniform P {
	uint n;
} p;

// erfcPos returns erfc(z) for z >= 0.
float erfcPos(float z) {
	float t = 1.0 / (1.0 + 0.5 * z);
	float poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
		t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
		t * (-0.82215223 + t * 0.17087277))))))));
	return t * exp(-z * z + poly);
}

void main() {
	uint g = flatGroup() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (g >= p.n) {
		return;
	}
	float v = x[g];
	if (FORM == 0u) {
		// 0.5 (1 + erf(v/sqrt2)) = Phi(v) = 1 - 0.5 erfc(v/sqrt2), or
		// 0.5 erfc(-v/sqrt2) for negative v (no cancellation either way).
		float z = abs(v) * 0.70710678118654752;
		float hc = 0.5 * erfcPos(z);
		x[g] = v * (v >= 0.0 ? 1.0 - hc : hc);
	} else {
		float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
		x[g] = v / (1.0 + exp(-2.0 * u));
	}
}
