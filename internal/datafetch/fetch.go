// Package datafetch downloads the public data files morphlab uses (models, tokenizers, request traces, GPU
// operator profiles, evaluation texts) into a data directory, for `make data` and `morphlab data fetch`.
//
// Every file has a pinned size and sha256 (Manifest). A file already in place is checked, not fetched again. A
// download goes to PATH.part and resumes from where it stopped with an HTTP Range request; when it is complete,
// a file whose size or checksum differs from the pinned one is refused (the .part is removed) and nothing lands
// at PATH. Options.BaseURL fetches every file from one mirror laid out as the data directory instead of from its
// public URL (the tests serve fixtures this way).
package datafetch

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// File is one data file: where it goes, where it comes from, and what it must be.
type File struct {
	Path   string `json:"path"`           // slash-separated, relative to the data directory: "models/stories260K.bin"
	URL    string `json:"url"`            // its public URL
	Gzip   bool   `json:"gzip,omitempty"` // URL serves it gzipped; Size and SHA256 are of the uncompressed file
	Size   int64  `json:"bytes"`
	SHA256 string `json:"sha256"` // hex
	What   string `json:"what"`   // one line for `morphlab data list`
}

// Source returns the URL f is fetched from: its own, or base + "/" + Path (+ ".gz" when gzipped) for a mirror.
func (f File) Source(base string) string {
	if base == "" {
		return f.URL
	}
	u := strings.TrimSuffix(base, "/") + "/" + f.Path
	if f.Gzip {
		u += ".gz"
	}
	return u
}

// Options configure Fetch.
type Options struct {
	BaseURL  string       // a mirror to fetch every file from (see File.Source); empty: each file's URL
	Client   *http.Client // nil: DefaultClient
	Progress func(f File, done, total int64)
}

// DefaultClient is http.DefaultClient's transport with bounded waits for a connection and for the response
// headers, so that a network that drops packets fails in seconds; a body may take as long as it needs.
var DefaultClient = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 15 * time.Second
	t.ResponseHeaderTimeout = 30 * time.Second
	return &http.Client{Transport: t}
}()

// Status says what Fetch did with a file.
type Status string

const (
	Present Status = "present" // already in place, checksum verified
	Fetched Status = "fetched" // downloaded from the start
	Resumed Status = "resumed" // a .part from an earlier run completed
	Failed  Status = "failed"
)

// Result is the outcome for one file.
type Result struct {
	File   File
	Status Status
	Err    error // set when Status is Failed
}

// unreachableError is a request that got no HTTP response at all: no network, no such host, refused, timed out.
type unreachableError struct {
	host string
	err  error
}

func (e *unreachableError) Error() string { return "cannot reach " + e.host + ": " + e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// Fetch brings every file into dir, one after another, and returns a result for each. Once a host cannot be
// reached, the rest of its files are not tried. The error, nil when every file is in place, is one line: the
// hosts it could not reach, or the number of files that failed and the first reason.
func Fetch(ctx context.Context, dir string, files []File, opt Options) ([]Result, error) {
	if opt.Client == nil {
		opt.Client = DefaultClient
	}
	var (
		results     []Result
		unreachable []string
		firstErr    error
		failed      int
	)
	for _, f := range files {
		st, err := fetchOne(ctx, dir, f, opt, unreachable)
		if err != nil {
			failed++
			st = Failed
			var ue *unreachableError
			if errors.As(err, &ue) {
				if !slices.Contains(unreachable, ue.host) {
					unreachable = append(unreachable, ue.host)
				}
			} else if firstErr == nil {
				firstErr = err
			}
		}
		results = append(results, Result{File: f, Status: st, Err: err})
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case ctx.Err() != nil:
		return results, fmt.Errorf("interrupted (%v); run again to resume", ctx.Err())
	case len(unreachable) > 0 && firstErr != nil:
		return results, fmt.Errorf("could not reach %s: %d of %d files not in place; first other failure: %v",
			strings.Join(unreachable, ", "), failed, len(files), firstErr)
	case len(unreachable) > 0:
		return results, fmt.Errorf("could not reach %s: %d of %d files not in place (no network?)",
			strings.Join(unreachable, ", "), failed, len(files))
	case failed > 0:
		return results, fmt.Errorf("%d of %d files failed; first: %v", failed, len(files), firstErr)
	}
	return results, nil
}

// fetchOne brings f into dir; it does not try a host in unreachable.
func fetchOne(ctx context.Context, dir string, f File, opt Options, unreachable []string) (Status, error) {
	dest := filepath.Join(dir, filepath.FromSlash(f.Path))
	if _, err := os.Stat(dest); err == nil {
		if err := verify(dest, f); err != nil {
			return Failed, fmt.Errorf("%s is there but %v; remove it to fetch it again", dest, err)
		}
		return Present, nil
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return Failed, err
	}
	part := dest + ".part"
	src := f.Source(opt.BaseURL)
	if h := host(src); slices.Contains(unreachable, h) {
		return Failed, fmt.Errorf("%s: %w", f.Path, &unreachableError{host: h, err: errors.New("not tried again")})
	}
	resumed, err := download(ctx, opt, f, src, part)
	if err != nil {
		return Failed, fmt.Errorf("%s: %w", f.Path, err)
	}
	got := part
	if f.Gzip {
		got = dest + ".gunzip"
		if err := gunzip(part, got); err != nil {
			os.Remove(part)
			return Failed, fmt.Errorf("%s: %s: %v; refused", f.Path, src, err)
		}
	}
	if err := verify(got, f); err != nil {
		os.Remove(part)
		os.Remove(got)
		return Failed, fmt.Errorf("%s: %s: %v; refused", f.Path, src, err)
	}
	if err := os.Rename(got, dest); err != nil {
		return Failed, err
	}
	os.Remove(part)
	if resumed {
		return Resumed, nil
	}
	return Fetched, nil
}

// download brings src into part, resuming from part's length with a Range request. It reports whether it
// resumed. A body cut short leaves part as far as it got, for the next run.
func download(ctx context.Context, opt Options, f File, src, part string) (resumed bool, err error) {
	var have int64
	if st, err := os.Stat(part); err == nil {
		have = st.Size()
	}
	if !f.Gzip && have > f.Size {
		os.Remove(part)
		have = 0
	}
	if !f.Gzip && have == f.Size && have > 0 {
		return true, nil // complete from an earlier run; verify decides
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return false, err
	}
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := opt.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, &unreachableError{host: host(src), err: errors.Unwrap(err)}
	}
	defer resp.Body.Close()
	flags := os.O_WRONLY | os.O_CREATE
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(have, 10)+"-") {
			return false, fmt.Errorf("GET %s: asked for bytes %d- and got Content-Range %q", src, have, resp.Header.Get("Content-Range"))
		}
		flags |= os.O_APPEND
		resumed = true
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && have > 0:
		return true, nil // part already holds the whole file
	case resp.StatusCode == http.StatusOK:
		flags |= os.O_TRUNC // the server ignored the range, or there was none
		have = 0
	default:
		return false, fmt.Errorf("GET %s: %s", src, resp.Status)
	}
	out, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return false, err
	}
	total := resp.ContentLength
	if total >= 0 {
		total += have
	}
	if !f.Gzip {
		total = f.Size
	}
	body := io.Reader(resp.Body)
	if !f.Gzip {
		body = io.LimitReader(resp.Body, f.Size-have+1) // one byte over the size is enough to refuse it
	}
	w := &progressWriter{w: out, f: f, done: have, total: total, report: opt.Progress}
	_, copyErr := io.Copy(w, body)
	if err := errors.Join(copyErr, out.Close()); err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("GET %s: interrupted after %d bytes (%v); run again to resume", src, w.done, err)
	}
	return resumed, nil
}

// host returns the host of a URL, or the URL when it does not parse.
func host(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.Host != "" {
		return u.Host
	}
	return rawURL
}

// progressWriter counts the bytes written through it and reports them.
type progressWriter struct {
	w           io.Writer
	f           File
	done, total int64
	report      func(File, int64, int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.done += int64(n)
	if p.report != nil {
		p.report(p.f, p.done, p.total)
	}
	return n, err
}

// gunzip decompresses the gzip file src into dst.
func gunzip(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return fmt.Errorf("not gzip: %v", err)
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, zr)
	return errors.Join(err, out.Close())
}

// verify checks the file at path against f's size and sha256.
func verify(path string, f File) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	h := sha256.New()
	n, err := io.Copy(h, in)
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("%d bytes, want %d", n, f.Size)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != f.SHA256 {
		return fmt.Errorf("sha256 %s, want %s", sum, f.SHA256)
	}
	return nil
}

// Select returns the files of m whose path is one of names or lies under one of them ("traces" or "traces/"
// selects every trace); no names selects all. A name that selects nothing is an error naming it.
func Select(m []File, names []string) ([]File, error) {
	if len(names) == 0 {
		return m, nil
	}
	var out []File
	for _, n := range names {
		n = strings.TrimSuffix(n, "/")
		found := false
		for _, f := range m {
			if f.Path == n || strings.HasPrefix(f.Path, n+"/") {
				found = true
				if !slices.ContainsFunc(out, func(g File) bool { return g.Path == f.Path }) {
					out = append(out, f)
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("%q is no data file or directory of the manifest (morphlab data list)", n)
		}
	}
	return out, nil
}
