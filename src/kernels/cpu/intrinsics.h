// The x86 intrinsics for the CPU kernels, included through this one header: GCC 12 reports
// the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics as
// (maybe-)uninitialized (a known false positive), and the pragmas must precede <immintrin.h>.
// Include it before any other header that may pull <immintrin.h> in.
#pragma once

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>
