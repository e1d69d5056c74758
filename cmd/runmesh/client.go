package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/runmesh/runmesh/internal/devenv"
)

type client struct {
	url   string
	token string
	http  *http.Client
}

func newClient(envFile string, getenv func(string) string) (*client, error) {
	c := &client{url: getenv("RUNMESH_ADMIN_URL"), token: getenv("RUNMESH_ADMIN_TOKEN"), http: http.DefaultClient}
	if envFile != "" {
		env, err := devenv.Read(envFile)
		if err != nil {
			return nil, err
		}
		if v := env["RUNMESH_ADMIN_URL"]; v != "" {
			c.url = v
		}
		if v := env["RUNMESH_ADMIN_TOKEN"]; v != "" {
			c.token = v
		}
	}
	switch {
	case c.url == "":
		return nil, errors.New("no admin API: set RUNMESH_ADMIN_URL or pass --env-file")
	case c.token == "":
		return nil, errors.New("no token: set RUNMESH_ADMIN_TOKEN or pass --env-file")
	}
	c.url = strings.TrimSuffix(c.url, "/")
	return c, nil
}

// do runs one operation and returns its data. GraphQL errors become a Go
// error carrying each message and code.
func (c *client) do(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/graphql", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, errors.New("the admin API refused the token (401)")
	}
	var out struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string `json:"message"`
			Path       []any  `json:"path"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("HTTP %d: not a GraphQL answer: %.200s", resp.StatusCode, raw)
	}
	if len(out.Errors) > 0 {
		msgs := make([]string, len(out.Errors))
		for i, e := range out.Errors {
			msgs[i] = fmt.Sprintf("%s (%s)", e.Message, e.Extensions.Code)
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	return out.Data, nil
}
