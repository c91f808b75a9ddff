// Package splitmix is splitmix64's mixing (Steele, Lea and Flood, 2014; the finalizer is Stafford's variant 13):
// the cheap, well-spread 64-bit hash that the simulator's token draws, the KV manager's block hashes and the
// prompt streams of Mooncake's hash ids share.
package splitmix

// Gamma is splitmix64's increment, 2^64 over the golden ratio.
const Gamma = 0x9e3779b97f4a7c15

// Mix is splitmix64's finalizer: a bijection of x whose every output bit depends on every input bit.
func Mix(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Hash is splitmix64's output for state x: x advanced by Gamma, then mixed.
func Hash(x uint64) uint64 { return Mix(x + Gamma) }
