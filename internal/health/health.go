// Package health is a process's health as a set of named conditions, after
// Tailscale's health.Warnable: each condition is declared once, with a name,
// a title and a severity, and then set healthy or unhealthy with a text as
// checks find it. One Registry per binary feeds sd_notify STATUS=, the
// watchdog, /healthz and the API, so they never disagree.
//
// It uses the standard library only: the agent and the server both link it.
package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Severity says what an unhealthy condition costs the process.
type Severity uint8

const (
	// Info is worth showing; nothing is wrong because of it.
	Info Severity = iota
	// Warning is wrong but the process still does its job; it stays healthy.
	Warning
	// Error makes the process unhealthy.
	Error
)

func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Error:
		return "error"
	}
	return fmt.Sprintf("severity(%d)", uint8(s))
}

// MarshalText writes the severity's name, as JSON and the API show it.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// NotChecked is the text of a condition no check has set yet. A condition
// starts unhealthy: a process that has not looked does not claim to be well.
const NotChecked = "not checked yet"

// Status is one condition as it stands.
type Status struct {
	Name     string   `json:"name"`
	Title    string   `json:"title"`
	Severity Severity `json:"severity"`
	OK       bool     `json:"ok"`
	// Text is what the last check found: why it is unhealthy, or a detail
	// of a healthy one.
	Text string `json:"text,omitempty"`
	// Since is when OK or Text last changed (registration, at first).
	Since time.Time `json:"since"`
}

// Condition is a declared condition; checks set it through this handle.
type Condition struct {
	r    *Registry
	i    int // index into r.conds
	name string
}

// Registry holds a process's conditions.
type Registry struct {
	now func() time.Time

	mu sync.Mutex // guards conds, names and changed
	// conds are in registration order, which is the order they are listed.
	conds []Status
	names map[string]int
	// changed is closed, and replaced, at every change.
	changed chan struct{}
}

// NewRegistry is an empty registry.
func NewRegistry() *Registry {
	return &Registry{now: time.Now, names: map[string]int{}, changed: make(chan struct{})}
}

// Register declares a condition. Names are unique within a registry;
// declaring one twice, or an empty one, is a programming error and panics.
func (r *Registry) Register(name, title string, sev Severity) *Condition {
	if name == "" {
		panic("health: condition without a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.names[name]; dup {
		panic("health: condition " + name + " registered twice")
	}
	r.names[name] = len(r.conds)
	r.conds = append(r.conds, Status{Name: name, Title: title, Severity: sev, Text: NotChecked, Since: r.now()})
	r.notifyLocked()
	return &Condition{r: r, i: len(r.conds) - 1, name: name}
}

// Name is the condition's name.
func (c *Condition) Name() string { return c.name }

// Status is the condition as it stands now.
func (c *Condition) Status() Status {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return c.r.conds[c.i]
}

// SetHealthy marks the condition healthy; text may say what was found.
func (c *Condition) SetHealthy(text string) { c.Set(true, text) }

// SetUnhealthy marks the condition unhealthy and says why.
func (c *Condition) SetUnhealthy(text string) { c.Set(false, text) }

// SetErr is SetHealthy(healthyText) for a nil err, SetUnhealthy(err) otherwise.
func (c *Condition) SetErr(err error, healthyText string) {
	if err != nil {
		c.SetUnhealthy(err.Error())
		return
	}
	c.SetHealthy(healthyText)
}

// Set records a check's result. Setting what is already there is no
// change: checks that run on a pace wake no watcher while nothing moves.
func (c *Condition) Set(ok bool, text string) {
	text = oneLine(text)
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.conds[c.i]
	if st.OK == ok && st.Text == text {
		return
	}
	st.OK, st.Text, st.Since = ok, text, r.now()
	r.notifyLocked()
}

func (r *Registry) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Conditions lists every condition in registration order.
func (r *Registry) Conditions() []Status {
	out, _ := r.Watch()
	return out
}

// Watch returns the conditions and a channel closed at the next change.
// Both come from one moment, so a caller that waits on the channel and
// reads again misses no change:
//
//	for {
//		conds, changed := r.Watch()
//		show(conds)
//		select { case <-ctx.Done(): return; case <-changed: }
//	}
func (r *Registry) Watch() ([]Status, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Status(nil), r.conds...), r.changed
}

// Err is nil while the process is healthy: no condition of severity Error
// is unhealthy. Otherwise it names those that are.
func (r *Registry) Err() error { return Err(r.Conditions()) }

// Healthy is Err() == nil.
func (r *Registry) Healthy() bool { return r.Err() == nil }

// Summary is the one-line summary of Summarise over the current conditions.
func (r *Registry) Summary() string { return Summarise(r.Conditions()) }

// Follow calls f with the summary now and again after every change, until
// ctx ends: what feeds sd_notify STATUS=.
func (r *Registry) Follow(ctx context.Context, f func(summary string)) {
	last := ""
	for {
		conds, changed := r.Watch()
		// A change of a text that the summary leaves out is not news.
		if s := Summarise(conds); s != last {
			f(s)
			last = s
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Err is nil when no condition of severity Error among conds is unhealthy,
// and names those that are otherwise: the verdict for one snapshot.
func Err(conds []Status) error {
	var bad []string
	for _, c := range conds {
		if !c.OK && c.Severity == Error {
			bad = append(bad, describe(c))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return errors.New("unhealthy: " + strings.Join(bad, "; "))
}

// Summarise says in one line, fit for sd_notify STATUS=, how conditions
// stand: "healthy (N conditions)" when all are, otherwise "unhealthy" (an
// error-severity condition is down) or "degraded", then every condition
// that is not healthy, the most severe first.
func Summarise(conds []Status) string {
	var bad []string
	worst := Info
	for sev := Error; ; sev-- {
		for _, c := range conds {
			if !c.OK && c.Severity == sev {
				if len(bad) == 0 {
					worst = sev
				}
				bad = append(bad, describe(c))
			}
		}
		if sev == Info {
			break
		}
	}
	switch {
	case len(conds) == 1 && len(bad) == 0:
		return "healthy (1 condition)"
	case len(bad) == 0:
		return fmt.Sprintf("healthy (%d conditions)", len(conds))
	case worst == Error:
		return "unhealthy: " + strings.Join(bad, "; ")
	default:
		return "degraded: " + strings.Join(bad, "; ")
	}
}

func describe(c Status) string {
	if c.Text == "" {
		return c.Name
	}
	return c.Name + ": " + clip(c.Text, maxText)
}

// maxText bounds one condition's text in a summary: STATUS= is one line
// that systemctl status shows whole.
const maxText = 200

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// oneLine folds a text onto one line: it ends up in STATUS= and in the
// line-per-condition /healthz body.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n\t") {
		return strings.TrimSpace(s)
	}
	return strings.Join(strings.Fields(s), " ")
}
