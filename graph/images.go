package graph

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/graph/model"
	"github.com/runmesh/runmesh/runnerapi"
)

// runnerImages is what a runner reported of its pool's images.
func runnerImages(r *record.Runner) []model.RunnerImage {
	out := make([]model.RunnerImage, 0, len(r.Capacity.Images))
	for _, im := range r.Capacity.Images {
		m := model.RunnerImage{Runner: r, Image: im.Image, State: model.ImageState(im.State), At: im.At}
		if im.Digest != "" {
			m.Digest = &im.Digest
		}
		if im.Error != "" {
			m.Error = &im.Error
		}
		if im.Progress != "" {
			m.Progress = &im.Progress
		}
		out = append(out, m)
	}
	return out
}

// poolImages are a pool's images with what each of its approved runners
// (those the caller may see) reported of them: one statement for the
// pool's runners, asked only when runners is.
func (r *poolResolver) poolImages(ctx context.Context, p *record.Pool) ([]model.PoolImage, error) {
	out := make([]model.PoolImage, 0, len(p.Images))
	byImage := map[string][]model.RunnerImage{}
	if len(p.Images) > 0 && asks(ctx, "runners") {
		me, _ := principal(ctx)
		approved := record.RunnerApproved
		runners, err := r.Fleet.Runners(ctx, me.Scope(), record.RunnerFilter{PoolID: &p.ID, Status: &approved}, record.Page{})
		if err != nil {
			return nil, err
		}
		for i := range runners {
			for _, im := range runnerImages(&runners[i]) {
				byImage[im.Image] = append(byImage[im.Image], im)
			}
		}
	}
	for _, img := range p.Images {
		ref, digest, _ := runnerapi.ParsePoolImage(img) // checked when the pool was saved
		m := model.PoolImage{Image: img, Reference: ref, Runners: byImage[img]}
		if m.Runners == nil {
			m.Runners = []model.RunnerImage{}
		}
		if digest != "" {
			m.PinnedDigest = &digest
		}
		out = append(out, m)
	}
	return out, nil
}

// asks: the field being resolved selects name.
func asks(ctx context.Context, name string) bool {
	for _, f := range graphql.CollectFieldsCtx(ctx, nil) {
		if f.Name == name {
			return true
		}
	}
	return false
}
