package agent

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// measuredAt is where the free disk of dir is measured without creating
// anything: dir, or its nearest ancestor that exists. The commands that
// only look (capacity, enrol's measurement, status) must leave no
// directory behind, least of all one owned by whoever ran them (root).
func measuredAt(dir string) string {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		if d == filepath.Dir(d) {
			return d
		}
	}
}

// ownDirs makes each directory the agent writes (created private to it if
// missing) and checks that each is its own. One owned by another user (a
// work directory created by running the agent as root once) would fail
// every job at its first write: the error says which directory, whose it
// is, and the command that gives it back.
func ownDirs(dirs ...string) error {
	uid := os.Getuid()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil && !os.IsPermission(err) {
			return fmt.Errorf("%s: %w", d, err)
		}
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("%s: %w (%s)", d, err, fixOwnership(d, uid))
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok || int(sys.Uid) == uid {
			continue
		}
		return fmt.Errorf("%s is owned by %s, not by %s, which the agent runs as (%s)",
			d, userName(int(sys.Uid)), userName(uid), fixOwnership(d, uid))
	}
	return nil
}

func fixOwnership(dir string, uid int) string {
	name := userName(uid)
	return fmt.Sprintf("fix it with: chown -R %s:%s %s, or on a packaged host: systemd-tmpfiles --create runmesh-agent.conf; then restart the agent", name, name, dir)
}

// userName is uid's name, or the number when it has none.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}
