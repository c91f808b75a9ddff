module github.com/morphlab/morphlab

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.4-1
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
	gorgonia.org/cu v0.9.6
)

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	golang.org/x/tools v0.30.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
