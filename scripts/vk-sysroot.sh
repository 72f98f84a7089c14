#!/usr/bin/env bash
# vk-sysroot.sh DIR: a private Debian 13 (trixie) sysroot with a newer Mesa
# lavapipe (from trixie-backports) that has VK_KHR_cooperative_matrix, the
# Khronos validation layer and glslc that know it, for testing and compiling
# the cooperative-matrix shaders on a machine whose own Debian is older.
#
# Nothing is installed into the system: the packages are downloaded with
# apt-get (Debian's archive only) into DIR/debs and unpacked into DIR/root.
# Programs run against that root through its own dynamic loader, so the
# host's glibc and libvulkan stay as they are:
#
#   DIR/run PROGRAM [ARGS]   runs PROGRAM (a host binary, a test binary, or
#                            DIR/root/usr/bin/glslc) with the sysroot's
#                            glibc, Vulkan loader, lavapipe and layers
#   DIR/glslc [ARGS]         the sysroot's glslc (knows GL_KHR_cooperative_matrix)
#
# A second call with the same DIR reuses what is there. Prints DIR/run.
set -euo pipefail
dir=${1:?usage: vk-sysroot.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
stamp=$dir/root/.complete
if [ -f "$stamp" ] && [ -x "$dir/run" ]; then
	echo "$dir/run"
	exit 0
fi
rm -rf "$dir/root" "$dir/debs"
mkdir -p "$dir/apt/lists/partial" "$dir/debs" "$dir/root"
cat >"$dir/apt/trixie.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates trixie-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
# Backports first wherever a package is there (mesa and the LLVM it needs).
apt_opts=(-o "Dir::Etc::SourceList=$dir/apt/trixie.sources" -o Dir::Etc::SourceParts=/nonexistent
	-o "Dir::State::Lists=$dir/apt/lists" -o Dir::State::Status=/dev/null
	-o APT::Architecture=amd64 -o APT::Architectures=amd64 -o APT::Default-Release=trixie-backports
	-o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq >&2
want=(mesa-vulkan-drivers libvulkan1 glslc spirv-tools vulkan-validationlayers)
mapfile -t pkgs < <(apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests \
	--no-conflicts --no-breaks --no-replaces --no-enhances "${want[@]}" | grep -v '^ ' | grep -v '<' | sort -u)
if [ "${#pkgs[@]}" -lt 10 ]; then
	echo "vk-sysroot: dependency resolution found only: ${pkgs[*]}" >&2
	exit 1
fi
(cd "$dir/debs" && apt-get "${apt_opts[@]}" download -qq "${pkgs[@]}" >&2)
for f in "$dir"/debs/*.deb; do
	dpkg-deb -x "$f" "$dir/root"
done
lib=$dir/root/usr/lib/x86_64-linux-gnu
[ -f "$lib/libvulkan_lvp.so" ] || { echo "vk-sysroot: no lavapipe in $dir/root" >&2; exit 1; }
[ -x "$lib/ld-linux-x86-64.so.2" ] || { echo "vk-sysroot: no dynamic loader in $dir/root" >&2; exit 1; }
cat >"$dir/lvp_icd.json" <<EOF
{"file_format_version": "1.0.0", "ICD": {"library_path": "$lib/libvulkan_lvp.so", "api_version": "1.4.0"}}
EOF
cat >"$dir/run" <<EOF
#!/bin/sh
# Runs a program against the sysroot made by scripts/vk-sysroot.sh.
export VK_ICD_FILENAMES=$dir/lvp_icd.json VK_DRIVER_FILES=$dir/lvp_icd.json
export VK_LAYER_PATH=$dir/root/usr/share/vulkan/explicit_layer.d
export VK_ADD_LAYER_PATH=$dir/root/usr/share/vulkan/explicit_layer.d
exec $lib/ld-linux-x86-64.so.2 --library-path $lib "\$@"
EOF
cat >"$dir/glslc" <<EOF
#!/bin/sh
# The sysroot's glslc, which compiles GL_KHR_cooperative_matrix.
exec $dir/run $dir/root/usr/bin/glslc "\$@"
EOF
chmod +x "$dir/run" "$dir/glslc"
dpkg-deb -f "$(ls "$dir"/debs/mesa-vulkan-drivers_*.deb)" Version >"$stamp"
echo "$dir/run"
