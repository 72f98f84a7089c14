#version 450
// The plan of a mixture of experts' indexed products, from every row's
// chosen experts (ids[0..pairs), pair r*k+j being row r's j-th expert): the
// pairs sorted by expert (ascending pairs within one), and tasks of up to
// 8 pairs of one expert, which matvecid.comp runs one per workgroup row.
// One workgroup; the plan goes to ids from word planOff: the task count,
// maxTasks tasks of three words (expert, first sorted pair, count), then
// the sorted pairs. Every list is in a fixed order, whatever the threads'
// timing.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(binding = 0) buffer RS { uint ids[]; };

layout(push_constant) uniform P {
	uint pairs, ne;
	uint planOff, maxTasks;
} p;

const uint EMAX = 512u;
const uint TILE = 2048u;

shared uint cnt[EMAX];   // pairs per expert, then the next free sorted slot
shared uint tile[TILE];

void main() {
	uint t = gl_LocalInvocationID.x;
	for (uint e = t; e < p.ne; e += 256u) {
		cnt[e] = 0u;
	}
	barrier();
	// Count, a tile of pairs at a time; each thread owns its experts.
	for (uint t0 = 0u; t0 < p.pairs; t0 += TILE) {
		uint n = min(TILE, p.pairs - t0);
		for (uint i = t; i < n; i += 256u) {
			tile[i] = ids[t0 + i];
		}
		barrier();
		for (uint e = t; e < p.ne; e += 256u) {
			uint c = cnt[e];
			for (uint i = 0u; i < n; i++) {
				c += tile[i] == e ? 1u : 0u;
			}
			cnt[e] = c;
		}
		barrier();
	}
	uint sorted = p.planOff + 1u + 3u * p.maxTasks;
	if (t == 0u) {
		uint s = 0u, tasks = 0u;
		for (uint e = 0u; e < p.ne; e++) {
			uint c = cnt[e];
			for (uint q = 0u; q < c; q += 8u) {
				uint ti = p.planOff + 1u + 3u * tasks;
				ids[ti] = e;
				ids[ti + 1u] = s + q;
				ids[ti + 2u] = min(8u, c - q);
				tasks++;
			}
			cnt[e] = s; // from here: the expert's next sorted slot
			s += c;
		}
		ids[p.planOff] = tasks;
	}
	barrier();
	for (uint t0 = 0u; t0 < p.pairs; t0 += TILE) {
		uint n = min(TILE, p.pairs - t0);
		for (uint i = t; i < n; i += 256u) {
			tile[i] = ids[t0 + i];
		}
		barrier();
		for (uint e = t; e < p.ne; e += 256u) {
			uint s = cnt[e];
			for (uint i = 0u; i < n; i++) {
				if (tile[i] == e) {
					ids[sorted + s] = t0 + i;
					s++;
				}
			}
			cnt[e] = s;
		}
		barrier();
	}
}
