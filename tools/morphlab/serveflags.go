package main

import (
	"cmp"
	"flag"
	"net/url"
	"os"
	"strings"

	"github.com/morphlab/morphlab/engine/server"
)

// apiKeyEnv gives serve its API key when --api-key does not (as VLLM_API_KEY does vLLM's): a key in the
// environment stays out of the process list.
const apiKeyEnv = "MORPHLAB_API_KEY"

// accessFlags are serve's flags for who may call the server and how many connections it holds.
type accessFlags struct {
	apiKey         string
	allowedOrigins string
	maxConnections int
}

func (f *accessFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.apiKey, "api-key", "", "the `key` every request but /health and /metrics must send as Authorization: Bearer KEY (default $"+apiKeyEnv+"; unset: none)")
	fs.StringVar(&f.allowedOrigins, "allowed-origins", "", "comma-separated web `origins` (https://app.example.com) whose pages may call the API from a browser (CORS); default none")
	fs.IntVar(&f.maxConnections, "max-connections", 1024, "open connections at most; more wait to be accepted")
}

// apply checks the flags and sets what they say in c.
func (f *accessFlags) apply(c *server.Config) error {
	if f.maxConnections < 1 {
		return usagef("--max-connections=%d, want at least 1", f.maxConnections)
	}
	c.MaxConnections = f.maxConnections
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
