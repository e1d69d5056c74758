package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"
)

// view says how a command's answer reads as a table: the list in it (a
// dotted path, e.g. "jobs.nodes"; "" for one object, printed as YAML) and
// the columns.
type view struct {
	list string
	cols []column
}

// column is a table column: its header and the dotted path of its value
// in each item.
type column struct{ header, path string }

// cols reads "HEADER=path" specs.
func cols(specs ...string) []column {
	out := make([]column, len(specs))
	for i, s := range specs {
		h, p, _ := strings.Cut(s, "=")
		out[i] = column{header: h, path: p}
	}
	return out
}

// print writes v, a generated response, as -o says: its JSON or YAML, or
// the view's table. A page that is not the last says how to get the next.
func (a *app) print(v any, w view) error {
	doc, err := generic(v)
	if err != nil {
		return err
	}
	switch a.flags.output {
	case "json":
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	case "yaml":
		return writeYAML(a, doc)
	}
	if w.list == "" {
		return writeYAML(a, doc)
	}
	items, _ := lookup(doc, w.list).([]any)
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	headers := make([]string, len(w.cols))
	for i, c := range w.cols {
		headers[i] = c.header
	}
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, it := range items {
		cells := make([]string, len(w.cols))
		for i, c := range w.cols {
			cells[i] = cell(lookup(it, c.path))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if parent := strings.TrimSuffix(w.list, ".nodes"); parent != w.list {
		if lookup(doc, parent+".pageInfo.hasNextPage") == true {
			fmt.Fprintf(a.stderr, "more follow: --after %s (or --all)\n", cell(lookup(doc, parent+".pageInfo.endCursor")))
		}
	}
	return nil
}

func writeYAML(a *app, doc any) error {
	enc := yaml.NewEncoder(a.stdout)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	return enc.Close()
}

// generic is v as JSON's generic values, so that the answer prints with
// the schema's field names.
func generic(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(b, &out)
}

// lookup follows a dotted path: a number picks a list's element
// ("nodes.0.id"), and a list on the way otherwise gives what each of its
// elements gives ("gpus.index").
func lookup(v any, path string) any {
	if path == "" {
		return v
	}
	key, rest, _ := strings.Cut(path, ".")
	switch x := v.(type) {
	case map[string]any:
		return lookup(x[key], rest)
	case []any:
		if i, err := strconv.Atoi(key); err == nil {
			if i < 0 || i >= len(x) {
				return nil
			}
			return lookup(x[i], rest)
		}
		out := make([]any, 0, len(x))
		for _, e := range x {
			out = append(out, lookup(e, path))
		}
		return out
	}
	return nil
}

// cell is how a value reads in a table: times to the second, in UTC;
// lists comma-separated; nothing as "-".
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if t, err := time.Parse(time.RFC3339Nano, x); err == nil {
			return t.UTC().Format("2006-01-02 15:04:05")
		}
		if x == "" {
			return "-"
		}
		return x
	case bool:
		if x {
			return "yes"
		}
		return "no"
	case float64:
		return fmt.Sprint(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = cell(e)
		}
		return strings.Join(parts, ",")
	}
	b, _ := json.Marshal(v)
	return string(b)
}
