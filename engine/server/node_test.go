package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/morphlab/morphlab/internal/openai"
)

// nodeClientDir holds the script that drives the official OpenAI Node client (npm package openai, pinned in its
// package-lock.json).
const nodeClientDir = "testdata/openai-node"

// TestOpenAINodeClient runs the official OpenAI Node client against a server that wants an API key: completions
// and chat, streamed and not, with usage, the model list, a 400, and the 401 of a wrong key. What it reads must
// equal what raw HTTP requests get. It skips
// when node is absent, and installs the client with npm ci when node_modules is missing (skipping when npm cannot
// reach the registry).
func TestOpenAINodeClient(t *testing.T) {
	node, err := osexec.LookPath("node")
	if err != nil {
		t.Skip("skipping: node is not on PATH (the OpenAI Node client needs it)")
	}
	if _, err := os.Stat(filepath.Join(nodeClientDir, "node_modules", "openai", "package.json")); err != nil {
		npm, err := osexec.LookPath("npm")
		if err != nil {
			t.Skipf("skipping: %s/node_modules is missing and npm is not on PATH", nodeClientDir)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := osexec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = nodeClientDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("skipping: npm ci in %s failed (no registry?): %v: %s", nodeClientDir, err, lastLine(out))
		}
	}
	const key = "sk-node-client"
	ts := newTestServer(t, func(_ *testExec, c *testConfig) { c.APIKey = key })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, node, "client.mjs", ts.url+"/v1", testModel, key)
	cmd.Dir = nodeClientDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	type answer struct {
		Text         string        `json:"text"`
		Role         string        `json:"role"`
		FinishReason string        `json:"finish_reason"`
		Usage        *openai.Usage `json:"usage"`
		Object       string        `json:"object"`
		Chunks       int           `json:"chunks"`
	}
	var got struct {
		Completion       answer   `json:"completion"`
		CompletionStream answer   `json:"completion_stream"`
		Chat             answer   `json:"chat"`
		ChatStream       answer   `json:"chat_stream"`
		Models           []string `json:"models"`
		Error            *struct {
			Status int    `json:"status"`
			Param  string `json:"param"`
			Type   string `json:"type"`
			Name   string `json:"name"`
		} `json:"error"`
		AuthError *struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			Name   string `json:"name"`
		} `json:"auth_error"`
	}
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("the client's output: %v\n%s", err, stdout.String())
	}

	// The same requests over raw HTTP.
	raw := func(path, body string) completion {
		code, _, b := do(t, "POST", ts.url+path, body, "Content-Type", "application/json", "Authorization", "Bearer "+key)
		var c completion
		if err := json.Unmarshal(b, &c); code != 200 || err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || c.Usage == nil {
			t.Fatalf("raw %s: %d %s", path, code, b)
		}
		return c
	}
	c := raw("/v1/completions", fmt.Sprintf(`{"model": %q, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}`, testModel))
	wantText, wantReason, wantUsage := *c.Choices[0].Text, *c.Choices[0].FinishReason, c.Usage
	for _, a := range []answer{got.Completion, got.CompletionStream} {
		if a.Text != wantText || a.FinishReason != wantReason || a.Usage == nil || *a.Usage != *wantUsage {
			t.Errorf("Node client's completion %+v, want text %q, finish_reason %s, usage %+v", a, wantText, wantReason, *wantUsage)
		}
	}
	if got.Completion.Object != "text_completion" || got.CompletionStream.Chunks < 3 {
		t.Errorf("completion object %q, %d stream chunks; want text_completion and a chunk a token", got.Completion.Object, got.CompletionStream.Chunks)
	}
	c = raw("/v1/chat/completions", fmt.Sprintf(`{"model": %q, "messages": [{"role": "user", "content": "Tell me a story."}], "max_completion_tokens": 10, "temperature": 0}`, testModel))
	for _, a := range []answer{got.Chat, got.ChatStream} {
		if a.Text != c.Choices[0].Message.Content || a.FinishReason != *c.Choices[0].FinishReason || a.Usage == nil || *a.Usage != *c.Usage {
			t.Errorf("Node client's chat %+v, want text %q, finish_reason %s, usage %+v", a, c.Choices[0].Message.Content, *c.Choices[0].FinishReason, *c.Usage)
		}
	}
	if got.Chat.Role != "assistant" || got.Chat.Object != "chat.completion" {
		t.Errorf("chat role %q, object %q; want assistant, chat.completion", got.Chat.Role, got.Chat.Object)
	}
	if !slices.Equal(got.Models, []string{testModel}) {
		t.Errorf("models %v, want [%s]", got.Models, testModel)
	}
	if e := got.Error; e == nil || e.Status != 400 || e.Param != "max_tokens" || e.Type != "invalid_request_error" || e.Name != "BadRequestError" {
		t.Errorf("max_tokens 0: the client saw %+v, want a BadRequestError, 400, invalid_request_error on max_tokens", e)
	}
	if e := got.AuthError; e == nil || e.Status != 401 || e.Code != "invalid_api_key" || e.Name != "AuthenticationError" {
		t.Errorf("a wrong API key: the client saw %+v, want an AuthenticationError, 401, invalid_api_key", e)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
