package main

import (
	"cmp"
	"flag"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/morphlab/morphlab/engine/server"
)

// apiKeyEnv gives serve its API key when --api-key does not (as VLLM_API_KEY does vLLM's): a key in the
// environment stays out of the process list.
const apiKeyEnv = "MORPHLAB_API_KEY"

// accessFlags are serve's flags for who may call the server, how many connections it holds and how long a
// client that stops reading may hold one.
type accessFlags struct {
	apiKey         string
	allowedOrigins string
	maxConnections int
	writeTimeout   time.Duration
}

func (f *accessFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.apiKey, "api-key", "", "the `key` every request but /health and /metrics must send as Authorization: Bearer KEY (default $"+apiKeyEnv+"; unset: none)")
	fs.StringVar(&f.allowedOrigins, "allowed-origins", "", "comma-separated web `origins` (https://app.example.com) whose pages may call the API from a browser (CORS); default none")
	fs.IntVar(&f.maxConnections, "max-connections", 1024, "open connections at most; more wait to be accepted")
	fs.DurationVar(&f.writeTimeout, "write-timeout", time.Minute, "how long one write of an answer may wait for a client that reads nothing; then the request is cancelled and the connection closed")
}

// apply checks the flags and sets what they say in c.
func (f *accessFlags) apply(c *server.Config) error {
	if f.maxConnections < 1 {
		return usagef("--max-connections=%d, want at least 1", f.maxConnections)
	}
	if f.writeTimeout <= 0 {
		return usagef("--write-timeout=%v, want more than 0", f.writeTimeout)
	}
	c.MaxConnections, c.WriteTimeout = f.maxConnections, f.writeTimeout
	c.APIKey = cmp.Or(f.apiKey, os.Getenv(apiKeyEnv))
	for o := range strings.SplitSeq(f.allowedOrigins, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if u, err := url.Parse(o); o != "*" && (err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Path != "" || u.RawQuery != "") {
			return usagef("--allowed-origins: %q, want origins such as https://app.example.com or http://localhost:3000 (or *)", o)
		}
		c.AllowedOrigins = append(c.AllowedOrigins, o)
	}
	return nil
}
