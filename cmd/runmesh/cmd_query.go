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

	"github.com/spf13/cobra"
)

// queryCommand runs any operation, for what no command covers (or a
// selection of fields of one's own). It prints the answer's data as JSON.
func (a *app) queryCommand() *cobra.Command {
	var vars []string
	c := &cobra.Command{
		Use:   "query QUERY",
		Short: "Run any GraphQL query or mutation; QUERY - reads it from stdin",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := args[0]
			if q == "-" {
				b, err := io.ReadAll(a.stdin)
				if err != nil {
					return err
				}
				q = string(b)
			}
			values := map[string]any{}
			for _, v := range vars {
				k, raw, ok := strings.Cut(v, "=")
				if !ok || k == "" {
					return fmt.Errorf("--var %q: NAME=VALUE", v)
				}
				var decoded any
				if err := json.Unmarshal([]byte(raw), &decoded); err != nil {
					decoded = raw // a bare word is a string
				}
				values[k] = decoded
			}
			data, err := a.raw(cmd.Context(), q, values)
			if err != nil {
				return err
			}
			var doc any
			if err := json.Unmarshal(data, &doc); err != nil {
				return err
			}
			if a.flags.output == "yaml" {
				return writeYAML(a, doc)
			}
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(doc)
		},
	}
	c.Flags().StringArrayVar(&vars, "var", nil, "a variable, NAME=JSON (a bare word is a string; repeatable)")
	return c
}

// raw runs one operation as given and returns its data; GraphQL errors
// become one error with each message and code.
func (a *app) raw(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	if err := a.connect(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.flags.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.ep.url+"/graphql", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		return nil, errors.New("the admin API refused the token (401): it is wrong, expired or revoked")
	}
	var out struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("HTTP %d: not a GraphQL answer", resp.StatusCode)
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
