package graph

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/graph/model"
)

// Connections (Relay's cursor paging). A cursor is opaque to clients: the
// sort key of an item in its list (record.Cursor) and which list it
// belongs to, base64url-encoded. A page is read one item longer than
// asked for, so that hasNextPage costs no second statement.

// Lists, as cursors name them: a cursor of one list is refused by another.
const (
	listJobs      = "jobs"
	listRunners   = "runners"
	listRuns      = "runs"
	listEvents    = "events"
	listAudit     = "audit"
	listAdmins    = "admins"
	listEnrolment = "enrolment-tokens"
)

// Page sizes: the most one page may hold.
const (
	maxPage      = 1000
	maxAuditPage = 500
)

func encodeCursor(list string, c record.Cursor) string {
	var at int64
	if !c.At.IsZero() {
		at = c.At.UnixMicro()
	}
	raw := list + "|" + strconv.FormatInt(at, 10) + "|" + c.ID.String() + "|" + strconv.FormatInt(c.N, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeCursor(list, s string) (record.Cursor, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return record.Cursor{}, false
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 4 || parts[0] != list {
		return record.Cursor{}, false
	}
	at, err1 := strconv.ParseInt(parts[1], 10, 64)
	id, err2 := uuid.Parse(parts[2])
	n, err3 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return record.Cursor{}, false
	}
	c := record.Cursor{ID: id, N: n}
	if at != 0 {
		c.At = time.UnixMicro(at).UTC()
	}
	return c, true
}

// pageOf is the page a connection's arguments ask for: first between 1
// and most, after a cursor of list. It reads one more item than first.
func pageOf(list string, first int, after *string, most int) (record.Page, error) {
	if first < 1 || first > most {
		return record.Page{}, badInputf("first: between 1 and %d", most)
	}
	p := record.Page{Limit: first + 1}
	if after != nil {
		c, ok := decodeCursor(list, *after)
		if !ok {
			return record.Page{}, badInputf("after: not a cursor of this list")
		}
		p.After = &c
	}
	return p, nil
}

// connect makes a page read one longer into a connection's nodes, edges
// (each with its cursor, made by edge) and PageInfo.
func connect[T, E any](list string, items []T, first int, key func(T) record.Cursor, edge func(string, *T) E) ([]T, []E, *model.PageInfo) {
	info := &model.PageInfo{HasNextPage: len(items) > first}
	if info.HasNextPage {
		items = items[:first]
	}
	edges := make([]E, len(items))
	for i := range items {
		cursor := encodeCursor(list, key(items[i]))
		edges[i] = edge(cursor, &items[i])
		if i == len(items)-1 {
			info.EndCursor = &cursor
		}
	}
	return items, edges, info
}

func jobKey(j record.Job) record.Cursor          { return record.Cursor{ID: j.ID} }
func runnerKey(r record.Runner) record.Cursor    { return record.Cursor{At: r.EnrolledAt, ID: r.ID} }
func eventKey(e record.JobEvent) record.Cursor   { return record.Cursor{N: e.ID} }
func auditKey(e record.AuditEntry) record.Cursor { return record.Cursor{N: e.ID} }
func adminKey(a record.Admin) record.Cursor      { return record.Cursor{At: a.CreatedAt, ID: a.ID} }
func enrolmentKey(t record.EnrolmentToken) record.Cursor {
	return record.Cursor{At: t.CreatedAt, ID: t.ID}
}
func runKey(r record.JobRun) record.Cursor {
	var at time.Time
	if r.FinishedAt != nil {
		at = *r.FinishedAt
	}
	return record.Cursor{At: at, ID: r.JobID, N: int64(r.Attempt)}
}

// runConnection is a page of runs, read one longer, as a connection.
func runConnection(runs []record.JobRun, first int) *model.JobRunConnection {
	nodes, edges, info := connect(listRuns, runs, first, runKey, func(c string, n *record.JobRun) model.JobRunEdge { return model.JobRunEdge{Cursor: c, Node: n} })
	return &model.JobRunConnection{Nodes: nodes, Edges: edges, PageInfo: info}
}
