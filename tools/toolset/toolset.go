// Package toolset assembles every server class this build ships into one registry,
// the single catalog the router dispatches from and the API serves.
package toolset

import (
	"fmt"

	"github.com/aetherium-engine/aetherium/security"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/tools"
	"github.com/aetherium-engine/aetherium/tools/comms"
	"github.com/aetherium-engine/aetherium/tools/orchestration"
	"github.com/aetherium-engine/aetherium/tools/planning"
	"github.com/aetherium-engine/aetherium/tools/research"
	"github.com/aetherium-engine/aetherium/tools/workspace"
)

// Deps are what the server classes need.
type Deps struct {
	// Store backs planning tools; nil builds a catalog-only registry (schemas, CLI).
	Store     *store.Store
	Workspace workspace.Config
	// Egress is the policy-enforcing HTTP client factory of outbound tools.
	Egress   *security.Egress
	Research research.Config
}

// New registers every tool and checks the result against tools/catalog.yaml.
func New(d Deps) (*tools.Registry, error) {
	reg := tools.NewRegistry()
	workspace.Register(reg, d.Workspace)
	planning.Register(reg, d.Store)
	comms.Register(reg)
	orchestration.Register(reg)
	research.Register(reg, d.Egress, d.Research)
	if err := tools.CheckCatalog(reg); err != nil {
		return nil, fmt.Errorf("tool catalog check: %w", err)
	}
	return reg, nil
}
