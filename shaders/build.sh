#!/bin/sh
# Compiles every compute shader in this directory to SPIR-V next to its
# source (name.comp -> name.spv). Run from anywhere; needs glslc
# (Debian package glslc). The output is deterministic, so the committed
# .spv files can be checked against a fresh build.
#
# Shaders that use GL_KHR_cooperative_matrix need a newer glslc (glslang
# 13 or later) than Debian 12's: GLSLC_COOPMAT names it (`make shaders`
# takes the one scripts/vk-sysroot.sh unpacks). The others are compiled
# with GLSLC, so their SPIR-V does not change with the compiler of the few.
set -eu
cd "$(dirname "$0")"
GLSLC=${GLSLC:-glslc}
GLSLC_COOPMAT=${GLSLC_COOPMAT:-$GLSLC}
for src in *.comp; do
	cc=$GLSLC
	if grep -q GL_KHR_cooperative_matrix "$src"; then
		cc=$GLSLC_COOPMAT
	fi
	"$cc" --target-env=vulkan1.1 -O -o "${src%.comp}.spv" "$src"
done
