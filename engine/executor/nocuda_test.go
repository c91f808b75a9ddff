//go:build !cuda

package executor

// deviceBackends is none: this build has no GPU.
func deviceBackends() []Backend { return nil }
