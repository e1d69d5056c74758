package runtime

import (
	"fmt"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// execCommand is systemd's a(sasb) for Exec* properties: the binary, its
// argv from argv[0], and whether a failure is ignored (the "-" prefix in a
// unit file). go-systemd names that last field UncleanIsFailure; systemd
// reads it as ignore-failure.
type execCommand struct {
	Path          string
	Argv          []string
	IgnoreFailure bool
}

// DBus returns the unit's properties as StartTransientUnit takes them.
func (u Unit) DBus() ([]sddbus.Property, error) {
	out := make([]sddbus.Property, 0, len(u.Properties))
	for _, p := range u.Properties {
		var v dbus.Variant
		switch x := p.Value.(type) {
		case string, bool, uint64, []string:
			v = dbus.MakeVariant(x)
		case []Exec:
			cmds := make([]execCommand, len(x))
			for i, e := range x {
				cmds[i] = execCommand{Path: e.Argv[0], Argv: e.Argv, IgnoreFailure: e.IgnoreFailure}
			}
			v = dbus.MakeVariant(cmds)
		default:
			return nil, fmt.Errorf("property %s: no D-Bus type for %T", p.Name, p.Value)
		}
		out = append(out, sddbus.Property{Name: p.Name, Value: v})
	}
	return out, nil
}
