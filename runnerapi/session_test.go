package runnerapi

import "testing"

func TestCheckCopy(t *testing.T) {
	for _, ok := range [][]string{{"in", "/data", "x.tar"}, {"in", "rel/dir", "ckpt.pt"}, {"out", "/outputs/ckpt.pt"}} {
		if err := CheckCopy(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range [][]string{nil, {"in"}, {"in", "/d"}, {"in", "/d", ""}, {"in", "/d", ".."}, {"in", "/d", "a/b"},
		{"out"}, {"out", ""}, {"out", "/a", "b"}, {"sideways", "/a"}, {"in", "/d\x00", "n"}} {
		if err := CheckCopy(bad); err == nil {
			t.Errorf("%q passed", bad)
		}
	}
}
