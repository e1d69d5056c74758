package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/Khan/genqlient/graphql"
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

// raw runs one operation as given, through the same client as every
// command, and returns its data.
func (a *app) raw(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	var data json.RawMessage
	_, err := call(ctx, a, func(ctx context.Context, c graphql.Client) (*struct{}, error) {
		return nil, c.MakeRequest(ctx, &graphql.Request{Query: query, Variables: vars}, &graphql.Response{Data: &data})
	})
	return data, err
}
