package runtime

import (
	"bytes"
	"fmt"
)

// ReadOutput turns podman's k8s-file log (the CRI format: one
// "TIME STREAM TAG TEXT" line per record, TAG "P" for a partial line that
// the next record continues, "F" for a full one) back into the job's
// output, stdout and stderr interleaved as written. It returns the bytes
// of complete records and how much of b they used, so a caller reading a
// growing file resumes from there.
func ReadOutput(b []byte) (out []byte, used int, err error) {
	for used < len(b) {
		nl := bytes.IndexByte(b[used:], '\n')
		if nl < 0 {
			break // a record still being written
		}
		line := b[used : used+nl]
		fields := bytes.SplitN(line, []byte(" "), 4)
		if len(fields) < 3 {
			return out, used, fmt.Errorf("output record %q is not in the CRI log format", line)
		}
		var text []byte
		if len(fields) == 4 {
			text = fields[3]
		}
		switch string(fields[2]) {
		case "F":
			out = append(append(out, text...), '\n')
		case "P":
			out = append(out, text...)
		default:
			return out, used, fmt.Errorf("output record tag %q is neither F nor P", fields[2])
		}
		used += nl + 1
	}
	return out, used, nil
}
