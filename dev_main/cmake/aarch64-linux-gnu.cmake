# Cross-building for aarch64 Linux with Debian's cross toolchain (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross), running the tests under user-mode QEMU (qemu-user):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#   ctest --test-dir build-aarch64        (`make test-aarch64` does all of it)
# -DCMAKE_C_COMPILER=clang builds with clang instead (its --target comes from below).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(ROPEPOOL_AARCH64_SYSROOT /usr/aarch64-linux-gnu CACHE PATH "aarch64 libraries (libc6-dev-arm64-cross)")
if(NOT CMAKE_C_COMPILER)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
endif()
set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu) # clang's --target; gcc ignores it

# Headers and libraries from the target's tree only; programs (cmake, python) from the host.
set(CMAKE_FIND_ROOT_PATH ${ROPEPOOL_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# add_test() commands that name a target run through this, so ctest runs the aarch64 binaries.
find_program(ROPEPOOL_QEMU_AARCH64 qemu-aarch64)
if(ROPEPOOL_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${ROPEPOOL_QEMU_AARCH64} -L ${ROPEPOOL_AARCH64_SYSROOT})
endif()
