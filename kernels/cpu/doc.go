// Package cpu holds morphlab's fast float32 (and quantized) kernels for x86-64: the same ops as kernels/ref, with
// hot loops in Go assembly chosen at run time by CPU feature (AVX-512, AVX2+FMA) and a pure-Go path under the
// build tag noasm. Work is split across cores by a small persistent worker pool (Parallel, SetThreads).
// Layouts and panic messages are those documented in kernels/ref.
package cpu
