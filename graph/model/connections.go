package model

import (
	"context"

	"github.com/runmesh/runmesh/controlplane/record"
)

// AdminConnection is a page of admins. TotalCount is counted only when a
// query asks for it, by Count.
type AdminConnection struct {
	Edges    []AdminEdge                        `json:"edges"`
	Nodes    []record.Admin                     `json:"nodes"`
	PageInfo *PageInfo                          `json:"pageInfo"`
	Count    func(context.Context) (int, error) `json:"-"`
}
