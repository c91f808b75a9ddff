module github.com/morphlab/morphlab

go 1.26.0

require (
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
	gorgonia.org/cu v0.9.6
)

require (
	github.com/google/uuid v1.1.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
)
