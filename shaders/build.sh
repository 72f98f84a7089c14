#!/bin/sh
# Compiles every compute shader in this directory to SPIR-V next to its
# source (name.comp -> name.spv). Run from anywhere; needs glslc
# (Debian package glslc). The output is deterministic, so the committed
# .spv files can be checked against a fresh build.
set -eu
cd "$(dirname "$0")"
GLSLC=${GLSLC:-glslc}
for src in *.comp; do
	"$GLSLC" --target-env=vulkan1.1 -O -o "${src%.comp}.spv" "$src"
done
