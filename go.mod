module github.com/morphlab/morphlab

go 1.26.0

require (
	golang.org/x/sys v0.50.0
	golang.org/x/term v0.48.0
)
