#!/usr/bin/env bash
# Installs the build into a fresh prefix, builds a consumer against it, runs what it built.
set -euo pipefail
build=$1 source=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/ropepool.h"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib64/pkgconfig"
cmake -S "$source/tests/install" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DEXAMPLE_SOURCE="$source/examples/example.c" > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
# As on a machine without the CUDA toolkit: the shared library carries cudart, so its package is
# found and linked without one (the static library's users need the toolkit).
cmake -S "$source/tests/install" -B "$work/consumer-no-cuda" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DSHARED_ONLY=ON \
      -DEXAMPLE_SOURCE="$source/examples/example.c" > "$work/configure-no-cuda.log"
cmake --build "$work/consumer-no-cuda" > "$work/build-no-cuda.log"
! grep -q cudart "$work/consumer-no-cuda/CMakeFiles/example_cmake.dir/link.txt"
# The soname: the major version, and before 1.0 the minor too (src/CMakeLists.txt says why).
version() { sed -n "s/^#define RP_VERSION_$1 \([0-9]*\)$/\1/p" "$source/include/ropepool.h"; }
soname=libropepool.so.$(version MAJOR)
[ "$(version MAJOR)" != 0 ] || soname=$soname.$(version MINOR)
objdump -p "$work"/prefix/lib*/libropepool.so | grep -qx " *SONAME *$soname" ||
  { echo "the soname is not $soname:"; objdump -p "$work"/prefix/lib*/libropepool.so | grep SONAME; exit 1; }
export LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64"
for exe in "$work"/consumer/example_* "$work"/consumer-no-cuda/example_*; do
  "$exe" > "$work/run.log"
  grep -q "second call: RP_ERR_SLOT_OUT_OF_RANGE" "$work/run.log"
  echo "ok: $(basename "$exe")"
done
# Debian's layout: GNUInstallDirs' LIBDIR under /usr is lib/x86_64-linux-gnu, one folder deeper,
# from which the .pc file must still find the prefix (a fixed ../.. gave -I<prefix>/lib/include).
# The project configured apart with that LIBDIR (nothing built), its .pc set beside this build's
# header and library in that layout, the example built with pkg-config's flags alone and run.
if command -v pkg-config > /dev/null; then
  multi="$work/multiarch" libdir=lib/x86_64-linux-gnu
  cmake -S "$source" -B "$multi/build" -DCMAKE_INSTALL_LIBDIR=$libdir -DROPEPOOL_CUDA=OFF \
        -DROPEPOOL_TESTS=OFF -DROPEPOOL_BENCH=OFF -DROPEPOOL_PYTHON=OFF > "$work/configure-multiarch.log"
  mkdir -p "$multi/prefix/$libdir/pkgconfig" "$multi/prefix/include"
  cp "$work/prefix/include/ropepool.h" "$multi/prefix/include/"
  cp -P "$work"/prefix/lib*/libropepool.so* "$multi/prefix/$libdir/"
  cp "$multi/build/ropepool.pc" "$multi/prefix/$libdir/pkgconfig/"
  flags=$(PKG_CONFIG_PATH="$multi/prefix/$libdir/pkgconfig" pkg-config --cflags --libs ropepool)
  "${CC:-cc}" "$source/examples/example.c" $flags -o "$multi/example_pkgconfig_multiarch"
  LD_LIBRARY_PATH="$multi/prefix/$libdir" "$multi/example_pkgconfig_multiarch" > "$work/run.log"
  grep -q "second call: RP_ERR_SLOT_OUT_OF_RANGE" "$work/run.log"
  echo "ok: example_pkgconfig_multiarch"
fi
