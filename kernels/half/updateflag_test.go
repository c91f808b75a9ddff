package half_test

// kerneltest defines the -update flag of `go test ./kernels/... -update` (which regenerates testdata/golden);
// importing it here makes this test binary accept the flag instead of failing on it.
import _ "github.com/morphlab/morphlab/kernels/kerneltest"
