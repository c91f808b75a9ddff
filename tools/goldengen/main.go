// Command goldengen writes the golden files of morphlab's kernels, testdata/golden/<op>.json, from the float64
// reference in kernels/ref with fixed seeds (the format is described in kernels/kerneltest). With -check it writes
// nothing and verifies the files against the reference instead.
//
//	go run ./tools/goldengen            # regenerate testdata/golden of this module
//	go run ./tools/goldengen -check     # verify them
//	go run ./tools/goldengen -dir /tmp/golden
//
// `go test ./kernels/... -update` regenerates the same files.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/morphlab/morphlab/kernels/kerneltest"
)

func main() {
	dir := flag.String("dir", "", "directory of the golden files (default: testdata/golden of the module around the working directory)")
	check := flag.Bool("check", false, "verify the files against kernels/ref instead of writing them")
	flag.Parse()
	if err := run(*dir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "goldengen:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	if dir == "" {
		d, err := kerneltest.GoldenDir()
		if err != nil {
			return err
		}
		dir = d
	}
	if check {
		return kerneltest.VerifyGoldenFiles(dir)
	}
	if err := kerneltest.WriteGolden(dir); err != nil {
		return err
	}
	return kerneltest.VerifyGoldenFiles(dir)
}
