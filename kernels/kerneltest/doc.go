// Package kerneltest is the conformance suite and benchmark set shared by every implementation of morphlab's
// kernels (kernels/cpu, kernels/cuda): TestX(t, impl) checks an implementation of op X against the float64
// reference in kernels/ref on seeded random inputs over awkward shapes, and BenchmarkX(b, impl, shape) measures it.
package kerneltest
