//go:build race

package cpu

// gemmRace is true under the race detector, which slows the pure-Go loops tenfold: the GEMM tests then use
// their short shapes.
const gemmRace = true
