package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"

	"github.com/morphlab/morphlab/internal/datafetch"
	"github.com/morphlab/morphlab/internal/mdtable"
	"github.com/morphlab/morphlab/internal/numfmt"
)

func init() {
	register(&command{name: "data", summary: "fetch the public data files (models, traces, profiles, eval texts) into ./data", run: runData})
}

const dataHelp = `
Data fetch downloads the public files the project uses (the manifest: 'morphlab data list') into --dir, each
from its public URL (Hugging Face, GitHub), checked against its pinned size and sha256. A file already there is
verified, not fetched again; a download interrupted midway resumes from its .part file on the next run; a file
whose checksum differs is refused and nothing is written in its place. PATH arguments fetch only those files or
the files under those directories ("traces", "models/tok512.bin"). --base-url fetches everything from one
mirror laid out as the data directory.

Tests and commands find the directory through $MORPHLAB_DATA, else ./data, else ../shared/data.`

func runData(e *env, args []string) error {
	fs := e.flags("fetch|list [flags] [PATH ...]", dataHelp)
	dir := fs.String("dir", "data", "data `directory` to fill")
	base := fs.String("base-url", "", "fetch every file from this mirror `URL` (URL/PATH) instead of its public URL")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of a table")
	if len(args) == 0 {
		return usagef("want a subcommand, fetch or list (run 'morphlab data -h' for usage)")
	}
	sub, rest := args[0], args[1:]
	if sub == "-h" || sub == "-help" || sub == "--help" {
		e.usage()
		return errHelp
	}
	if sub != "fetch" && sub != "list" {
		return usagef("unknown subcommand %q, want fetch or list", sub)
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.usage()
			return errHelp
		}
		return usagef("%v (run 'morphlab data -h' for usage)", err)
	}
	e.warnDeprecated(fs)
	files, err := datafetch.Select(datafetch.Manifest, fs.Args())
	if err != nil {
		return usageError{err.Error()}
	}
	if sub == "list" {
		return listData(e, files, *asJSON)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var (
		bar     *progress
		current string
	)
	opt := datafetch.Options{BaseURL: *base, Progress: func(f datafetch.File, done, total int64) {
		if f.Path != current {
			bar.clear()
			bar, current = newBytesProgress(e.stderr, f.Path), f.Path
		}
		bar.set(int(done), int(total))
	}}
	results, fetchErr := datafetch.Fetch(ctx, *dir, files, opt)
	bar.clear()
	if *asJSON {
		type result struct {
			Path   string `json:"path"`
			Bytes  int64  `json:"bytes"`
			Status string `json:"status"`
			Error  string `json:"error,omitempty"`
		}
		var out []result
		for _, r := range results {
			res := result{Path: r.File.Path, Bytes: r.File.Size, Status: string(r.Status)}
			if r.Err != nil {
				res.Error = r.Err.Error()
			}
			out = append(out, res)
		}
		if err := writeJSON(e.stdout, out); err != nil {
			return err
		}
	} else {
		var rows [][]string
		for _, r := range results {
			rows = append(rows, []string{r.File.Path, fileSize(r.File.Size), string(r.Status)})
		}
		if err := mdtable.Write(e.stdout, []string{"file", "size", "status"}, rows); err != nil {
			return err
		}
	}
	return fetchErr
}

// listData prints the manifest: each file's path, size, sha256 prefix, source and what it is.
func listData(e *env, files []datafetch.File, asJSON bool) error {
	if asJSON {
		return writeJSON(e.stdout, files)
	}
	var (
		rows  [][]string
		total int64
	)
	for _, f := range files {
		rows = append(rows, []string{f.Path, fileSize(f.Size), f.SHA256[:16], f.What, f.URL})
		total += f.Size
	}
	if err := mdtable.Write(e.stdout, []string{"file", "size", "sha256", "what", "source"}, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "%d files, %s bytes (%s)\n", len(files), strconv.FormatInt(total, 10), fileSize(total))
	return err
}

// fileSize formats a file size with about four digits, in KiB below a MiB: 6.081 KiB, 1.008 MiB.
func fileSize(n int64) string {
	if n < 1<<20 {
		return numfmt.Figure(float64(n)/(1<<10)) + " KiB"
	}
	return numfmt.Figure(float64(n)/(1<<20)) + " MiB"
}
