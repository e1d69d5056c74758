// Package datamove moves one file exactly as the agent moves a job's data
// (agent/internal/runtime's Mover: the URL as given, hashed as it
// travels), so that what that costs can be measured against curl
// (runmesh-bench data). The agent's mover itself stays in agent/internal.
package datamove

import (
	"context"
	"path/filepath"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/runnerapi"
)

// Fetch GETs url into path, as an input, and returns its SHA-256 and size.
func Fetch(ctx context.Context, url, path string) (string, int64, error) {
	var m runtime.Mover
	recs, err := m.Fetch(ctx, []runnerapi.LeaseInput{{Name: filepath.Base(path), URL: url}}, filepath.Dir(path), &runtime.Budget{Left: -1})
	if err != nil {
		return "", 0, err
	}
	return recs[0].SHA256, recs[0].Size, nil
}

// Upload PUTs the file at path to url, as an output, and returns its
// SHA-256 and size.
func Upload(ctx context.Context, url, path string) (string, int64, error) {
	var m runtime.Mover
	recs, err := m.Upload(ctx, []runnerapi.LeaseOutput{{Path: runnerapi.OutputsDir + "/" + filepath.Base(path), Key: "k", URL: url}}, filepath.Dir(path), &runtime.Budget{Left: -1})
	if err != nil {
		return "", 0, err
	}
	return recs[0].SHA256, recs[0].Size, nil
}
